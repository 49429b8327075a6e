import type { paths } from '../../../admin/src/api/schema.js';

/** The service's admin API over fetch, with the token from the environment (never printed). */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The service's answers, typed from its OpenAPI document (the console's generated types): the
 * wire contract is the one source of truth.
 */
type Json<
  Path extends keyof paths,
  Method extends 'get' | 'post' | 'put',
  Status extends number,
> = paths[Path][Method] extends { responses: { [S in Status]: { content: { 'application/json': infer T } } } }
  ? T
  : never;

export type StoredFile = Json<'/api/admin/uploads/{id}', 'get', 200>;
export type Package = Json<'/api/admin/software/{idOrSlug}', 'get', 200>;
export type Version = Json<'/api/software/{id}/versions', 'post', 201>;
export type Addon = Json<'/api/admin/addons/{idOrSlug}', 'get', 200>;
export type Release = Json<'/api/releases', 'post', 201>;

export class Api {
  readonly server: string;

  constructor(
    server: string,
    private readonly token: string,
  ) {
    let url: URL;
    try {
      url = new URL(server);
    } catch {
      throw new Error(`--server: not a URL: ${server}`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('--server: must be an http(s) URL');
    this.server = url.origin + url.pathname.replace(/\/+$/, '');
  }

  /** Headers that authenticate a request (also handed to the tus client). */
  get headers(): Record<string, string> {
    return { authorization: `Bearer ${this.token}` };
  }

  url(path: string): string {
    return this.server + path;
  }

  /** A JSON request to `path` (under the server) or to an absolute URL the service answered. */
  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await fetch(/^https?:\/\//.test(path) ? path : this.url(path), {
        method,
        headers: { ...this.headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (err) {
      const cause = (err as Error).cause;
      throw new Error(`${method} ${path}: ${cause instanceof Error ? cause.message : (err as Error).message}`, {
        cause: err,
      });
    }
    const text = await res.text();
    let answer: unknown = null;
    try {
      answer = text === '' ? null : JSON.parse(text);
    } catch {
      // not JSON: reported below by status
    }
    if (!res.ok) {
      const error = (answer as { error?: unknown } | null)?.error;
      throw new ApiError(
        res.status,
        `${method} ${path}: ${res.status} ${typeof error === 'string' ? error : res.statusText}`,
      );
    }
    return answer as T;
  }
}

/** The token from LAUNCHER_TOKEN; it is only ever sent in the Authorization header. */
export function tokenFrom(env: NodeJS.ProcessEnv): string {
  const token = env.LAUNCHER_TOKEN;
  if (token === undefined || token.trim() === '') {
    throw new Error('LAUNCHER_TOKEN is not set: create an API token in the console and put it in this variable');
  }
  return token.trim();
}
