/**
 * Resumable downloads into the state folder. A partial file `<sha256>.part` is kept with the URL and
 * `ETag` it came from (`<sha256>.part.json`); the next attempt asks for the rest with `Range` and
 * `If-Range`, and starts again from byte 0 when the server answers 200 or another `ETag`. Network
 * errors, 429 and 5xx are retried with backoff (honouring `Retry-After`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { AbortedError, IntegrityError, NetworkError } from './errors.js';
import { httpError, type RetryOptions, send, withRetries } from './http.js';

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

  const attempt = async (): Promise<void> => {
    const info = await readPartInfo(files.info);
    let have = info !== null && info.url === url ? await sizeOf(files.part) : 0;
    if (have >= expected.fileSize) have = 0;
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    if (have > 0 && info !== null) {
      headers.range = `bytes=${have}-`;
      headers['if-range'] = info.etag;
    }
    const res = await send(url, { headers, signal: options.signal });
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
      throw new NetworkError(`${url}: cut off after ${have} bytes: ${(err as Error).message}`, { cause: err });
    } finally {
      out.end();
      await closed;
    }
    report(have, true);
  };
  await withRetries(attempt, options.retry, options.signal);
  return received;
}
