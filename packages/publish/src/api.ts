import type { paths } from '../../../admin/src/api/schema.js';

/** The service's admin API over fetch, with the token from the environment (never printed). */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** What the answer's `Retry-After` asked for (ms). */
    readonly retryAfterMs: number | null = null,
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
export type Me = Json<'/api/admin/me', 'get', 200>;

/** Answers a proxy or a busy service gives that a later attempt may not: retried. */
const RETRIED = new Set([429, 502, 503, 504]);
/** Waits before the retries (ms, doubled each time up to the last); a Retry-After up to RETRY_AFTER_MAX_S wins. */
export const RETRY_DELAYS_MS = [1000, 2000, 4000, 8000, 16000];
const RETRY_AFTER_MAX_S = 60;

/** The wait a `Retry-After` (seconds or an HTTP date) asks for, in ms; null when absent or unusable. */
function retryAfterMs(header: string | null): number | null {
  if (header === null) return null;
  const seconds = /^\d+$/.test(header.trim()) ? Number(header) : (Date.parse(header) - Date.now()) / 1000;
  if (!Number.isFinite(seconds)) return null;
  return Math.min(Math.max(seconds, 0), RETRY_AFTER_MAX_S) * 1000;
}

export interface RequestOptions {
  /** Sent as `Idempotency-Key`: a 409 (the same request still being answered) is then retried too. */
  idempotencyKey?: string;
}

export class Api {
  readonly server: string;

  constructor(
    server: string,
    private readonly token: string,
    /** Told each retry (a line for stderr). */
    private readonly log: (line: string) => void = () => undefined,
    private readonly delaysMs: readonly number[] = RETRY_DELAYS_MS,
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

  /**
   * A JSON request to `path` (under the server) or to an absolute URL the service answered. 429, 502,
   * 503, 504 and network errors are retried after the next of the delays (or the answer's
   * `Retry-After`), each retry logged; so is a 409 of a request sent with an idempotency key.
   */
  async json<T>(method: string, path: string, body?: unknown, request: RequestOptions = {}): Promise<T> {
    for (let attempt = 0; ; attempt += 1) {
      const delay = this.delaysMs[attempt];
      try {
        return await this.once<T>(method, path, body, request);
      } catch (err) {
        const status = err instanceof ApiError ? err.status : null;
        const retried =
          status === null
            ? !(err instanceof ApiError)
            : RETRIED.has(status) || (status === 409 && request.idempotencyKey !== undefined);
        if (!retried || delay === undefined) throw err;
        const wait = (err instanceof ApiError ? err.retryAfterMs : null) ?? delay;
        this.log(
          `retry ${attempt + 1}/${this.delaysMs.length} in ${Math.round(wait / 100) / 10} s: ${(err as Error).message}`,
        );
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  private async once<T>(method: string, path: string, body: unknown, request: RequestOptions): Promise<T> {
    let res: Response;
    try {
      res = await fetch(/^https?:\/\//.test(path) ? path : this.url(path), {
        method,
        headers: {
          ...this.headers,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...(request.idempotencyKey !== undefined ? { 'idempotency-key': `"${request.idempotencyKey}"` } : {}),
        },
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
        retryAfterMs(res.headers.get('retry-after')),
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
