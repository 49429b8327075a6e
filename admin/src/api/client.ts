import createClient, { type Middleware } from 'openapi-fetch';
import type { components as _components, paths } from './schema';

/** The service's paths, generated from its /openapi.json (`npm run admin:api`): the one wire contract. */
export type Paths = paths;

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** The JSON a call on `Path` answers with `Status` (200 unless given). */
export type Answer<Path extends keyof Paths, M extends Method, Status extends number = 200> = Paths[Path][M] extends {
  responses: { [S in Status]: { content: { 'application/json': infer T } } };
}
  ? T
  : never;

/** A software version as the admin detail answers it (the Software page and its rollout panel). */
export type Version = Answer<'/api/admin/software/{idOrSlug}', 'get'>['versions'][number];

/** A game client build as the admin list answers it (the Game client page). */
export type GameBuild = Answer<'/api/admin/game/builds', 'get'>[number];

/** The JSON body a call on `Path` takes. */
export type RequestBody<Path extends keyof Paths, M extends Method> = Paths[Path][M] extends {
  requestBody?: { content: { 'application/json': infer T } };
}
  ? T
  : never;

/** A failed API call: the HTTP status and the service's `{error}` message (status 0: network failure). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly path: string,
    /** The rest of the error answer's JSON, e.g. `totpRequired` of a login. */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

let onUnauthorized: (() => void) | null = null;
/** Called when an administrator call answers 401 (session ended): the app goes back to the login page. */
export function setUnauthorizedHandler(handler: (() => void) | null) {
  onUnauthorized = handler;
}

const errors: Middleware = {
  async onResponse({ response, request }) {
    if (response.ok || response.status === 304) return undefined;
    let message = response.statusText || 'request failed';
    let details: Record<string, unknown> = {};
    try {
      const body: unknown = await response.clone().json();
      if (typeof body === 'object' && body !== null) details = body as Record<string, unknown>;
      if (typeof details.error === 'string') message = details.error;
    } catch {
      // not JSON: keep the status text
    }
    const path = new URL(request.url).pathname;
    if (response.status === 401 && path !== '/api/admin/login' && path !== '/api/admin/me') onUnauthorized?.();
    throw new ApiError(response.status, message, path, details);
  },
  onError({ error, request }) {
    if (error instanceof ApiError) return error;
    return new ApiError(0, error instanceof Error ? error.message : String(error), new URL(request.url).pathname);
  },
};

export const api = createClient<Paths>({ baseUrl: window.location.origin, credentials: 'same-origin' });
api.use(errors);

/** The data of a successful call (errors were thrown by the middleware). */
export function data<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.data === undefined) {
    throw new ApiError(result.response.status, 'empty answer', new URL(result.response.url).pathname);
  }
  return result.data;
}

/** The `cursor` of a paged answer's next page (its `Link: <…>; rel="next"` header), or null on the last page. */
export function nextCursor(response: Response): string | null {
  const next = /<([^>]+)>\s*;\s*rel="next"/.exec(response.headers.get('link') ?? '')?.[1];
  return next === undefined ? null : new URL(next).searchParams.get('cursor');
}

export type Schemas = _components;
