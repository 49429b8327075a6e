/**
 * Resumable downloads into the state folder. A partial file `<sha256>.part` is kept with the URL and
 * `ETag` it came from (`<sha256>.part.json`); the next attempt asks for the rest with `Range` and
 * `If-Range`, and starts again from byte 0 when the server answers 200 or another `ETag`. Network
 * errors, 429 and 5xx are retried with backoff (honouring `Retry-After`). Every attempt has
 * deadlines (`DownloadDeadlines`): no answer within `timeoutMs`, or too few bytes over a window,
 * ends it; only attempts that made no progress count against the retries.
 */
import fs from 'node:fs';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { Dispatcher } from 'undici';
import { AbortedError, AnswerTooLargeError, IntegrityError, NetworkError } from '../errors.js';
import {
  answerError,
  type Deadline,
  ERROR_BODY_MAX_BYTES,
  type FailureCount,
  failure,
  httpError,
  type RetryOptions,
  sendWithin,
  withRetries,
} from './http.js';

export interface Progress {
  /** Bytes on disk so far (a resumed download counts what it already had). */
  readonly bytes: number;
  readonly total: number;
  /** Bytes per second received by this call so far. */
  readonly rate: number;
}

export interface FetchFileOptions {
  readonly onProgress?: (progress: Progress) => void;
  readonly signal?: AbortSignal;
  readonly retry: RetryOptions;
  readonly deadlines: DownloadDeadlines;
  /**
   * The failed attempts without progress so far; downloads given one object count together (a
   * delta's and then its full file's, so that one call has one bound). Default: this call's own.
   */
  readonly failures?: FailureCount;
}

/**
 * Each attempt's deadlines: the answer's headers within `timeoutMs`, and, as curl's
 * `--speed-limit`/`--speed-time`, at least `minBytesPerSecond × stallTimeoutMs / 1000` bytes over
 * any `stallTimeoutMs` from the request on.
 */
export interface DownloadDeadlines {
  readonly timeoutMs: number;
  readonly minBytesPerSecond: number;
  readonly stallTimeoutMs: number;
}

/** The default `minBytesPerSecond`. */
export const DEFAULT_MIN_BYTES_PER_SECOND = 1024;
/** The default `stallTimeoutMs`. */
export const DEFAULT_STALL_TIMEOUT_MS = 30_000;

/**
 * One download attempt's deadlines, a `Deadline` for `sendWithin`: its signal aborts, with the
 * `NetworkError` that says why, when no answer came within `timeoutMs`, or when fewer than `floor`
 * bytes arrived over a window of `stallTimeoutMs` (from the request on), or with the caller's.
 */
class Watchdog implements Deadline {
  readonly signal: AbortSignal;
  readonly timeoutMs: number;
  /** The bytes a window must hold: `minBytesPerSecond × stallTimeoutMs / 1000`. */
  readonly floor: number;
  private bytes = 0;
  private readonly controller = new AbortController();
  private readonly windowMs: number;
  private readonly started = performance.now();
  /** Arrivals (when, and `received` after it) that a window ending later may still start before. */
  private readonly arrivals: { at: number; received: number }[] = [];
  private readonly answerTimer: NodeJS.Timeout;
  private stallTimer: NodeJS.Timeout;

  constructor(
    private readonly url: string,
    deadlines: DownloadDeadlines,
    readonly caller: AbortSignal | undefined,
  ) {
    this.timeoutMs = deadlines.timeoutMs;
    this.windowMs = deadlines.stallTimeoutMs;
    this.floor = Math.ceil((deadlines.minBytesPerSecond * deadlines.stallTimeoutMs) / 1000);
    this.signal = caller === undefined ? this.controller.signal : AbortSignal.any([caller, this.controller.signal]);
    this.answerTimer = setTimeout(() => this.fail(`no answer within ${this.timeoutMs} ms`), this.timeoutMs);
    this.stallTimer = setTimeout(() => this.check(), this.windowMs);
  }

  /** Bytes received by this attempt. */
  get received(): number {
    return this.bytes;
  }

  /** The answer's headers arrived. */
  answered(): void {
    clearTimeout(this.answerTimer);
  }

  arrived(bytes: number): void {
    this.bytes += bytes;
    this.arrivals.push({ at: performance.now(), received: this.bytes });
    // Every window starting at or after an arrival with at most `received - floor` bytes up to it
    // already holds the floor: such an arrival can no longer be where a short window starts.
    while ((this.arrivals[0]?.received ?? Infinity) <= this.received - this.floor) this.arrivals.shift();
  }

  /** Why the deadlines ended the attempt, or null. */
  get failure(): NetworkError | null {
    const reason: unknown = this.controller.signal.reason;
    return reason instanceof NetworkError ? reason : null;
  }

  stop(): void {
    clearTimeout(this.answerTimer);
    clearTimeout(this.stallTimer);
  }

  /**
   * Ends the attempt when the window of `stallTimeoutMs` ending now holds fewer than `floor` bytes:
   * that is so from `stallTimeoutMs` after the oldest arrival kept (after the request while fewer
   * than `floor` arrived in all), unless more arrive before; else looks again then.
   */
  private check(): void {
    const from = this.received < this.floor ? this.started : (this.arrivals[0]?.at ?? this.started);
    const now = performance.now();
    if (now >= from + this.windowMs) {
      this.fail(
        `fewer than ${this.floor} bytes in ${this.windowMs} ms (the speed floor), after ${this.received} bytes`,
      );
    } else this.stallTimer = setTimeout(() => this.check(), from + this.windowMs - now);
  }

  private fail(why: string): void {
    this.controller.abort(new NetworkError(`${this.url}: ${why}`));
  }
}

/** The redirects a chunk download follows (a presigned store URL, an offload), as a browser would, at most. */
const MAX_REDIRECTS = 5;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * The connections small downloads (game chunks) go through: keep-alive, at most `connections` to
 * each origin; `destroy` ends them. Through undici's dispatcher (the HTTP client of Node's `fetch`,
 * without the streams around it): the body arrives as views of what the socket read, where
 * `node:http` hands each piece over as a copy of its own, so that a chunk after chunk over a few
 * connections costs 0.7× the CPU (1 GiB in 1 MiB chunks on loopback, same run).
 */
export async function chunkConnections(connections: number): Promise<Dispatcher> {
  // Loaded when first needed: undici takes 0.1 s to load, which every other command would pay.
  const { Agent } = await import('undici');
  // No timeouts of undici's own: each attempt's `Watchdog` has the deadlines.
  return new Agent({ connections, headersTimeout: 0, bodyTimeout: 0 });
}

/**
 * How many bytes received through the chunk connections between two young-generation collections.
 * Each socket read is a buffer of its own outside V8's heap (up to 64 KiB, in the C library's heap),
 * freed only when the garbage collector finds it dead; V8 collects as its own heap grows, which a
 * download's few small objects hardly make it do, so at hundreds of MB/s tens of MiB of dead reads
 * wait. A collection of the young generation (a scavenge: about a millisecond) every 8 MiB frees
 * them: the 2 GiB install of the bench peaked at 249-257 MiB instead of 292-295, and spent 2-3 s
 * less CPU (fewer pages faulted in and given back).
 */
const COLLECT_EVERY_BYTES = 8 * 1024 * 1024;
let receivedSinceCollection = 0;
let collectGarbage: NodeJS.GCFunction | undefined;

/** Counts `bytes` received, and collects the young generation every `COLLECT_EVERY_BYTES`. */
function received(bytes: number): void {
  receivedSinceCollection += bytes;
  if (receivedSinceCollection < COLLECT_EVERY_BYTES) return;
  receivedSinceCollection = 0;
  collectGarbage ??= garbageCollector();
  collectGarbage({ type: 'minor' });
}

/**
 * V8's `gc` function: the process's own when Node was started with `--expose-gc`, else taken from a
 * context made while the flag is on for a moment (as Jest's leak detector does), so that no other
 * context of the process (a launcher's own) gains a `gc`.
 */
function garbageCollector(): NodeJS.GCFunction {
  if (globalThis.gc !== undefined) return globalThis.gc;
  v8.setFlagsFromString('--expose-gc');
  try {
    return vm.runInNewContext('gc') as NodeJS.GCFunction;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
}

/** An answer's status, headers and body, read into a buffer that the status chose. */
interface Answered {
  readonly status: number;
  readonly location: string | undefined;
  readonly retryAfter: string | undefined;
  /** A view of the buffer read into; null for a redirect's body, or an error body larger than its bound. */
  readonly body: Buffer | null;
}

const header = (headers: Record<string, string | string[] | undefined>, name: string) => {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
};

/**
 * One GET of `url` through `dispatcher`, ended by `within`'s signal: a 200's body is read into
 * `into` (more than `maxBytes`, announced or sent, is `AnswerTooLargeError`), another answer's body
 * into a buffer of its own (at most `ERROR_BODY_MAX_BYTES`), a redirect's is dropped; a body cut
 * short is a `NetworkError`.
 */
function get(dispatcher: Dispatcher, url: string, within: Watchdog, into: Buffer, maxBytes: number): Promise<Answered> {
  return new Promise((resolve, reject) => {
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      reject(new NetworkError(`${url}: not a URL`));
      return;
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:') {
      reject(new NetworkError(`${url}: not an http or https URL`));
      return;
    }
    let status = 0;
    let location: string | undefined;
    let retryAfter: string | undefined;
    let buffer: Buffer | null = null;
    let bound = 0;
    let length = 0;
    let settled: Error | true | null = null;
    let ongoing: Dispatcher.DispatchController | null = null;
    const settle = (err: Error | null) => {
      if (settled !== null) return;
      settled = err ?? true;
      within.signal.removeEventListener('abort', abort);
      if (err === null) resolve({ status, location, retryAfter, body: buffer?.subarray(0, length) ?? null });
      else reject(err);
    };
    // Ended at once, whether the request is on a connection yet or still waiting for one.
    const abort = () => {
      const err = failure(url, within.signal.reason, within);
      ongoing?.abort(err);
      settle(err);
    };
    if (within.signal.aborted) {
      abort();
      return;
    }
    within.signal.addEventListener('abort', abort, { once: true });
    try {
      dispatcher.dispatch(
        {
          origin: target.origin,
          path: `${target.pathname}${target.search}`,
          method: 'GET',
          headers: { 'accept-encoding': 'identity' },
        },
        {
          onRequestStart(started) {
            ongoing = started;
            if (settled instanceof Error) started.abort(settled);
          },
          onResponseStart(controller, statusCode, headers) {
            if (statusCode < 200) return; // 1xx: the answer is still to come
            within.answered();
            status = statusCode;
            location = header(headers, 'location');
            retryAfter = header(headers, 'retry-after');
            if (status === 200) {
              if (Number(header(headers, 'content-length') ?? 0) > maxBytes) {
                controller.abort(new AnswerTooLargeError(`${url}: the answer is larger than ${maxBytes} bytes`));
                return;
              }
              [buffer, bound] = [into, maxBytes];
            } else if (!REDIRECTS.has(status)) {
              [buffer, bound] = [Buffer.allocUnsafe(ERROR_BODY_MAX_BYTES), ERROR_BODY_MAX_BYTES];
            }
          },
          onResponseData(controller, chunk) {
            within.arrived(chunk.length);
            received(chunk.length);
            if (buffer === null) return;
            if (length + chunk.length > bound) {
              if (status === 200) {
                controller.abort(new AnswerTooLargeError(`${url}: the answer is larger than ${maxBytes} bytes`));
              } else buffer = null;
              return;
            }
            chunk.copy(buffer, length);
            length += chunk.length;
          },
          onResponseEnd() {
            settle(null);
          },
          onResponseError(_controller, err) {
            settle(err instanceof AnswerTooLargeError || err instanceof AbortedError ? err : failure(url, err, within));
          },
        },
      );
    } catch (err) {
      settle(failure(url, err, within)); // a dispatcher destroyed meanwhile
    }
  });
}

/**
 * One small file's bytes (a game chunk: at most `maxBytes`), read into `into` under the download
 * deadlines (an answer within `timeoutMs`, the speed floor) and the caller's `signal`, through
 * `dispatcher` (`chunkConnections`), redirects followed: a view of `into`; an answer other than
 * 200 is an `HttpError`, a stalled or cut one a `NetworkError`.
 */
export async function downloadInto(
  dispatcher: Dispatcher,
  url: string,
  maxBytes: number,
  into: Buffer,
  deadlines: DownloadDeadlines,
  signal: AbortSignal | undefined,
): Promise<Buffer> {
  const within = new Watchdog(url, deadlines, signal);
  try {
    let answer = await get(dispatcher, url, within, into, maxBytes);
    for (let hops = 0; REDIRECTS.has(answer.status) && answer.location !== undefined; hops++) {
      if (hops === MAX_REDIRECTS) throw new NetworkError(`${url}: more than ${MAX_REDIRECTS} redirects`);
      url = new URL(answer.location, url).href;
      answer = await get(dispatcher, url, within, into, maxBytes);
    }
    if (answer.status !== 200) throw answerError(url, answer.status, answer.body, answer.retryAfter ?? null);
    return answer.body ?? into.subarray(0, 0);
  } finally {
    within.stop();
  }
}

interface PartInfo {
  url: string;
  etag: string;
}

const PROGRESS_EVERY_MS = 100;

/** The partial file of a download and its sidecar; `remove` deletes both. */
export function partFiles(dir: string, sha256: string) {
  const part = path.join(dir, `${sha256.toLowerCase()}.part`);
  const info = `${part}.json`;
  return {
    part,
    info,
    remove: async () => {
      await fs.promises.rm(part, { force: true });
      await fs.promises.rm(info, { force: true });
    },
  };
}

async function readPartInfo(file: string): Promise<PartInfo | null> {
  try {
    const info = JSON.parse(await fs.promises.readFile(file, 'utf8')) as Partial<PartInfo>;
    return typeof info.url === 'string' && typeof info.etag === 'string' ? { url: info.url, etag: info.etag } : null;
  } catch {
    return null;
  }
}

async function sizeOf(file: string): Promise<number> {
  try {
    return (await fs.promises.stat(file)).size;
  } catch {
    return 0;
  }
}

/**
 * Fetches `url` into the partial file of `sha256` until it holds `total` bytes (or the server ends
 * the file), resuming what an earlier attempt left (`partFiles`). The caller verifies the partial
 * file, then renames or deletes it. Answers the bytes received by this call (a resumed part's are not).
 */
export async function fetchFile(
  dir: string,
  url: string,
  expected: { fileSize: number; sha256: string },
  options: FetchFileOptions,
): Promise<number> {
  await fs.promises.mkdir(dir, { recursive: true });
  const files = partFiles(dir, expected.sha256);
  const started = Date.now();
  let received = 0;
  let lastReport = 0;
  const report = (bytes: number, force: boolean) => {
    const at = Date.now();
    if (!options.onProgress || (!force && at - lastReport < PROGRESS_EVERY_MS)) return;
    lastReport = at;
    options.onProgress({ bytes, total: expected.fileSize, rate: received / Math.max(0.001, (at - started) / 1000) });
  };

  const attempt = async (within: Watchdog): Promise<void> => {
    const info = await readPartInfo(files.info);
    let have = info !== null && info.url === url ? await sizeOf(files.part) : 0;
    if (have >= expected.fileSize) have = 0;
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    if (have > 0 && info !== null) {
      headers.range = `bytes=${have}-`;
      headers['if-range'] = info.etag;
    }
    const res = await sendWithin(url, { headers }, within);
    within.answered();
    if (res.status !== 200 && res.status !== 206) throw await httpError(url, res);
    const etag = res.headers.get('etag');
    const resumed =
      res.status === 206 &&
      have > 0 &&
      etag === info?.etag &&
      res.headers.get('content-range')?.startsWith(`bytes ${have}-`);
    if (res.status === 206 && !resumed) {
      // A range we did not ask for, or of another file: start over.
      await res.body?.cancel();
      await files.remove();
      throw new NetworkError(`${url}: unexpected partial answer, starting again from 0`);
    }
    if (!resumed) {
      have = 0;
      await fs.promises.writeFile(files.part, '');
      if (etag !== null && !etag.startsWith('W/'))
        await fs.promises.writeFile(files.info, JSON.stringify({ url, etag }));
      else await fs.promises.rm(files.info, { force: true });
    }
    const out = fs.createWriteStream(files.part, { flags: 'a' });
    const closed = new Promise<void>((resolve, reject) => {
      out.once('close', resolve);
      out.once('error', reject);
    });
    try {
      if (res.body === null) throw new NetworkError(`${url}: empty answer`);
      for await (const chunk of res.body) {
        const bytes = chunk as Uint8Array;
        within.arrived(bytes.length);
        have += bytes.length;
        received += bytes.length;
        if (have > expected.fileSize)
          throw new IntegrityError(`the download is larger than ${expected.fileSize} bytes`);
        if (!out.write(bytes)) await new Promise<void>((resolve) => out.once('drain', () => resolve()));
        report(have, false);
      }
    } catch (err) {
      if (options.signal?.aborted) throw new AbortedError('the download was cancelled');
      if (err instanceof IntegrityError) throw err;
      throw (
        within.failure ??
        new NetworkError(`${url}: cut off after ${have} bytes: ${(err as Error).message}`, { cause: err })
      );
    } finally {
      out.end();
      await closed;
    }
    report(have, true);
  };
  const failures = options.failures ?? { failures: 0 };
  await withRetries(
    async () => {
      const within = new Watchdog(url, options.deadlines, options.signal);
      try {
        await attempt(within);
      } catch (err) {
        // Only attempts that made no progress (less than a window's floor) are bounded by the retries.
        if (within.received >= within.floor) failures.failures = 0;
        throw err;
      } finally {
        within.stop();
      }
    },
    options.retry,
    options.signal,
    failures,
  );
  return received;
}
