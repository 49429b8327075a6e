/**
 * Requests with typed failures, and the one backoff rule every retry uses: exponential with full
 * jitter, or the server's `Retry-After` when it gives one.
 */
import { AbortedError, AnswerTooLargeError, HttpError, NetworkError } from '../errors.js';

export interface RetryOptions {
  /** Attempts after the first (default 5). */
  retries: number;
  /** First backoff ceiling in ms (default 500), doubled per failure. */
  baseDelayMs: number;
  /** Largest backoff in ms (default 30 000); a longer `Retry-After` is still honoured. */
  maxDelayMs: number;
  /** Told of each failure about to be retried: the failure, the wait before the next attempt (ms), the failures counted so far. */
  onRetry?: (failure: NetworkError | HttpError, delayMs: number, failures: number) => void;
}

export const DEFAULT_RETRY: RetryOptions = { retries: 5, baseDelayMs: 500, maxDelayMs: 30_000 };

/** `Retry-After` in ms (delta-seconds or an HTTP date), or null when absent or unreadable. */
export function retryAfterMs(value: string | null, now = Date.now()): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** The wait before attempt `failures + 1`: `Retry-After` when given, else full jitter under base·2^(failures−1). */
export function backoffMs(failures: number, options: RetryOptions, retryAfter: number | null = null): number {
  if (retryAfter !== null) return retryAfter;
  const ceiling = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** Math.max(0, failures - 1));
  return Math.random() * ceiling;
}

function aborted(signal: AbortSignal | undefined): AbortedError {
  const reason: unknown = signal?.reason;
  return new AbortedError(reason instanceof Error ? reason.message : 'aborted');
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(aborted(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(aborted(signal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function networkError(url: string, err: unknown, signal: AbortSignal | undefined): AbortedError | NetworkError {
  if (signal?.aborted) return aborted(signal);
  const cause = (err as Error & { cause?: Error }).cause;
  return new NetworkError(`${url}: ${cause?.message ?? (err as Error).message}`, { cause: err });
}

/** One attempt's deadline and the caller's signal, as one signal (`deadline.caller` tells them apart). */
export interface Deadline {
  readonly signal: AbortSignal;
  readonly caller: AbortSignal | undefined;
  readonly timeoutMs: number;
  /** Told of each piece of the body as it arrives (a download's speed floor). */
  arrived?(bytes: number): void;
}

/** A deadline of `timeoutMs` from now for one attempt (connecting, waiting and reading), or the caller's abort. */
export function deadline(timeoutMs: number, caller?: AbortSignal): Deadline {
  const timeout = AbortSignal.timeout(timeoutMs);
  return { signal: caller === undefined ? timeout : AbortSignal.any([caller, timeout]), caller, timeoutMs };
}

/**
 * The failure of an attempt that `deadline` ended: `AbortedError` for the caller's, else a
 * `NetworkError` (the one the deadline's signal aborted with, when it gave one).
 */
export function failure(url: string, err: unknown, within: Deadline | undefined): AbortedError | NetworkError {
  if (within === undefined) return networkError(url, err, undefined);
  if (within.caller?.aborted) return aborted(within.caller);
  if (within.signal.aborted) {
    const reason: unknown = within.signal.reason;
    if (reason instanceof NetworkError) return reason;
    return new NetworkError(`${url}: no answer within ${within.timeoutMs} ms`, { cause: err });
  }
  return networkError(url, err, undefined);
}

/** `fetch` whose failures are `NetworkError` or `AbortedError`. */
export async function send(url: string, init: RequestInit & { signal?: AbortSignal }): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (err) {
    throw networkError(url, err, init.signal ?? undefined);
  }
}

/** `fetch` within a deadline: failures are `NetworkError` (the deadline passed) or `AbortedError`. */
export async function sendWithin(url: string, init: RequestInit, within: Deadline): Promise<Response> {
  try {
    return await fetch(url, { ...init, signal: within.signal });
  } catch (err) {
    throw failure(url, err, within);
  }
}

/** The whole body of an answer; a connection cut before its end is a `NetworkError`. */
export async function readBody(url: string, res: Response, signal?: AbortSignal): Promise<Buffer> {
  try {
    return Buffer.from(await res.arrayBuffer());
  } catch (err) {
    throw networkError(url, err, signal);
  }
}

/**
 * The body of an answer of at most `maxBytes`, read within `within`: a larger one is refused as soon
 * as its `Content-Length` says so or its bytes pass the limit (`AnswerTooLargeError`, the rest
 * never read), so memory stays flat whatever the server sends. With `into` (at least `maxBytes`
 * long) the body is copied there and a view of it answered: a caller reading many answers one after
 * another allocates nothing per answer.
 */
export async function readLimitedBody(
  url: string,
  res: Response,
  maxBytes: number,
  within?: Deadline,
  into?: Buffer,
): Promise<Buffer> {
  const tooLarge = () =>
    new AnswerTooLargeError(`${url}: the answer is larger than ${maxBytes} bytes (maxAnswerBytes)`);
  const declared = Number(res.headers.get('content-length') ?? Number.NaN);
  if (declared > maxBytes) {
    await res.body?.cancel().catch(() => undefined);
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let length = 0;
  try {
    for await (const chunk of res.body ?? []) {
      if (length + chunk.length > maxBytes) throw tooLarge();
      within?.arrived?.(chunk.length);
      // A view, not a copy: the one copy is into `into` or the concatenation below.
      if (into === undefined) chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      else into.set(chunk, length);
      length += chunk.length;
    }
  } catch (err) {
    // Leaving the loop early cancels the body: the connection is dropped, the rest never read.
    if (err instanceof AnswerTooLargeError) throw err;
    throw failure(url, err, within);
  }
  return into === undefined ? Buffer.concat(chunks, length) : into.subarray(0, length);
}

/** The most of an error answer read for its `{error}` text. */
export const ERROR_BODY_MAX_BYTES = 64 * 1024;

/** The `HttpError` of an unexpected answer (its `{error}` text when it has one, read up to 64 KiB). */
export async function httpError(url: string, res: Response): Promise<HttpError> {
  const body = await readLimitedBody(url, res, ERROR_BODY_MAX_BYTES).catch(() => null);
  return answerError(url, res.status, body, res.headers.get('retry-after'));
}

/** The `HttpError` of an answer of `status` whose body (at most 64 KiB, null when unread) may carry `{error}`. */
export function answerError(url: string, status: number, body: Buffer | null, retryAfter: string | null): HttpError {
  let message: string | null = null;
  try {
    const parsed = JSON.parse(body?.toString('utf8') ?? '') as { error?: unknown };
    if (typeof parsed.error === 'string') message = parsed.error;
  } catch {
    // not JSON: the status says enough
  }
  return new HttpError(status, url, message, retryAfterMs(retryAfter));
}

/** Whether a failure is worth another attempt: no answer, 429 or 5xx. */
export function retryable(err: unknown): err is NetworkError | HttpError {
  return err instanceof NetworkError || (err instanceof HttpError && (err.status === 429 || err.status >= 500));
}

/**
 * The retryable failures `withRetries` counted since the last success. Calls given one count share
 * it (a delta's download and then its full file's: one bound for both); an attempt may set it back
 * to 0 (a download that made progress before it failed).
 */
export interface FailureCount {
  failures: number;
}

/**
 * Runs `attempt` until it succeeds, a failure is not retryable, or `count` passes the retries,
 * waiting between attempts as `backoffMs` says (honouring an `HttpError`'s `Retry-After`).
 */
export async function withRetries<T>(
  attempt: () => Promise<T>,
  options: RetryOptions,
  signal?: AbortSignal,
  count: FailureCount = { failures: 0 },
): Promise<T> {
  for (;;) {
    try {
      const result = await attempt();
      count.failures = 0;
      return result;
    } catch (err) {
      if (!retryable(err)) throw err;
      count.failures++;
      if (count.failures > options.retries) throw err;
      const retryAfter = err instanceof HttpError ? err.retryAfterMs : null;
      const delay = backoffMs(count.failures, options, retryAfter);
      options.onRetry?.(err, delay, count.failures);
      await sleep(delay, signal);
    }
  }
}
