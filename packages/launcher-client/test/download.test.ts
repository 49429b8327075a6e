import fs from 'node:fs';
import path from 'node:path';
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AbortedError,
  IntegrityError,
  NetworkError,
  type Progress,
  type UpdateInfo,
  UpdateManager,
  type UpdateManagerOptions,
} from '../src/index.js';
import { chunkConnections, downloadInto } from '../src/net/download.js';
import { type Answer, downloadsOf, launcherPackage, publishVersion, type Service, startService } from './helpers.js';

let s: Service;
let update: UpdateInfo;
let content: Buffer;
const SIZE = 256 * 1024;

beforeAll(async () => {
  s = await startService();
  const pkg = await launcherPackage(s.t, 'dl-launcher');
  const published = await publishVersion(s.t, pkg, 2, {}, SIZE);
  content = published.content;
  // What a verified check-update names (the answers' verification is tested elsewhere).
  const url = `/api/software/check-update?slug=dl-launcher&versionCode=1`;
  const answer = await (await fetch(`${s.proxy.url}${url}`)).json();
  update = { kind: 'full', slug: 'dl-launcher', downgrade: false, changelog: '', ...answer.latest };
  expect(update.sha256).toBe(published.sha256);
  expect(new URL(update.downloadUrl).origin).toBe(s.proxy.url);
});
afterAll(() => s.close());
afterEach(() => {
  s.proxy.rule = null;
});

function manager(stateDir = s.stateDir(), options: Partial<UpdateManagerOptions> = {}) {
  return new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: [],
    stateDir,
    retry: { baseDelayMs: 10, retries: 3 },
    ...options,
  });
}
const isDownload = (url: string) => url.startsWith('/api/software/download/');

describe('downloads', () => {
  it('resume from where a cut-off download stopped (Range and If-Range), then verify and rename atomically', async () => {
    const half = SIZE / 2;
    let cut = false;
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url) || cut) return undefined;
      cut = true;
      return { ...(await upstream()), cutAfter: half };
    };
    const progress: Progress[] = [];
    const stateDir = s.stateDir();
    const before = s.proxy.seen.length;
    const done = await manager(stateDir).downloadUpdate(update, { onProgress: (p) => progress.push(p) });
    s.proxy.rule = null;
    const requests = s.proxy.seen.slice(before).filter((r) => isDownload(r.url));
    // The resumed request asks for the rest of what reached the file before the cut: up to half (the
    // last bytes the proxy wrote may still be in flight when it drops the connection on a busy machine).
    expect(requests.map((r) => r.headers.range)).toEqual([undefined, expect.stringMatching(/^bytes=\d+-$/)]);
    const resumedAt = Number(/\d+/.exec(String(requests[1]?.headers.range))?.[0]);
    expect(resumedAt).toBeGreaterThan(0);
    expect(resumedAt).toBeLessThanOrEqual(half);
    expect(requests[1]?.headers['if-range']).toBe(`"${update.sha256}"`);
    expect(done.file).toBe(path.join(stateDir, 'downloads', update.sha256!, 'dl-launcher-1.2.exe'));
    expect(fs.readFileSync(done.file).equals(content)).toBe(true);
    expect(downloadsOf(stateDir).sort()).toEqual([update.sha256, path.join(update.sha256!, 'dl-launcher-1.2.exe')]);
    expect(progress.at(-1)).toMatchObject({ bytes: SIZE, total: SIZE });
    expect(progress.every((p) => p.rate >= 0 && p.bytes <= SIZE)).toBe(true);
    // A second call finds the verified file and downloads nothing.
    const again = s.proxy.seen.length;
    expect((await manager(stateDir).downloadUpdate(update)).file).toBe(done.file);
    expect(s.proxy.seen.length).toBe(again);
  });

  it('start again from 0 when the resumed request gets a 200 (the file changed: If-Range did not match)', async () => {
    const stateDir = s.stateDir();
    let calls = 0;
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url)) return undefined;
      calls++;
      const answer = await upstream();
      if (calls === 1) return { ...answer, cutAfter: 1000 };
      // The resumed request: answered whole, as a server whose file changed does.
      const whole = await fetch(`${s.direct}${seen.url}`);
      return { status: 200, headers: { etag: '"other"' }, body: Buffer.from(await whole.arrayBuffer()) };
    };
    const done = await manager(stateDir).downloadUpdate(update);
    s.proxy.rule = null;
    expect(calls).toBe(2);
    expect(fs.readFileSync(done.file).equals(content)).toBe(true);
  });

  it('refuse and delete a corrupted download (IntegrityError), leaving nothing in downloads', async () => {
    const stateDir = s.stateDir();
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url)) return undefined;
      const answer = await upstream();
      const body = Buffer.from(answer.body);
      body[SIZE - 10] = (body[SIZE - 10] ?? 0) ^ 0xff;
      return { ...answer, body };
    };
    await expect(manager(stateDir).downloadUpdate(update)).rejects.toBeInstanceOf(IntegrityError);
    expect(downloadsOf(stateDir)).toEqual([]);
    // A longer file is refused as soon as it passes the announced size.
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url)) return undefined;
      const answer = await upstream();
      return { ...answer, body: Buffer.concat([answer.body, Buffer.from('more')]) };
    };
    await expect(manager(stateDir).downloadUpdate(update)).rejects.toBeInstanceOf(IntegrityError);
    s.proxy.rule = null;
    expect(downloadsOf(stateDir)).toEqual([]);
  });

  it('refuse an update that names no SHA-256, downloading nothing', async () => {
    const stateDir = s.stateDir();
    await expect(manager(stateDir).downloadUpdate({ ...update, sha256: null })).rejects.toBeInstanceOf(IntegrityError);
    expect(downloadsOf(stateDir)).toEqual([]);
  });

  it('stop on the AbortSignal, keeping the part for a later resume', async () => {
    const stateDir = s.stateDir();
    const controller = new AbortController();
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url)) return undefined;
      const answer = await upstream();
      setTimeout(() => controller.abort(), 100);
      return { ...answer, cutAfter: 4096, hold: true };
    };
    const aborted = manager(stateDir).downloadUpdate(update, { signal: controller.signal });
    await expect(aborted).rejects.toBeInstanceOf(AbortedError);
    s.proxy.rule = null;
    const before = s.proxy.seen.length;
    const done = await manager(stateDir).downloadUpdate(update);
    expect(fs.readFileSync(done.file).equals(content)).toBe(true);
    expect(s.proxy.seen.slice(before).find((r) => isDownload(r.url))?.headers.range).toBe('bytes=4096-');
  });

  it('retry 5xx and 429 with backoff, honouring Retry-After', async () => {
    const stateDir = s.stateDir();
    const statuses = [503, 429];
    s.proxy.rule = (seen) => {
      const status = isDownload(seen.url) ? statuses.shift() : undefined;
      if (status === undefined) return undefined;
      return { status, headers: status === 429 ? { 'retry-after': '1' } : {}, body: Buffer.from('{"error":"busy"}') };
    };
    const before = s.proxy.seen.length;
    const done = await manager(stateDir).downloadUpdate(update);
    s.proxy.rule = null;
    const times = s.proxy.seen
      .slice(before)
      .filter((r) => isDownload(r.url))
      .map((r) => r.at);
    expect(times).toHaveLength(3);
    expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(990);
    expect(fs.readFileSync(done.file).equals(content)).toBe(true);
  });
});

describe('deadlines: a speed floor over every window, an answer within timeoutMs, attempts without progress bounded', () => {
  // The defaults (1 024 bytes a second over 30 s, 30 s for the answer) scaled down: a floor of 512
  // bytes over any 500 ms.
  const WINDOW = 500;
  const deadlines = { stallTimeoutMs: WINDOW, minBytesPerSecond: 1024, timeoutMs: 2000 };
  /** The times of the download requests the proxy saw since `from`. */
  const downloadTimes = (from: number) =>
    s.proxy.seen
      .slice(from)
      .filter((r) => isDownload(r.url))
      .map((r) => r.at);
  /** An answer that drips one byte every `everyMs` for as long as the client reads. */
  const drip = (everyMs: number): Answer => ({
    status: 200,
    headers: { 'content-type': 'application/octet-stream' },
    body: Buffer.alloc(0),
    stream: async function* () {
      for (;;) {
        yield Buffer.from('x');
        await sleep(everyMs);
      }
    },
  });

  it('a drip (a byte every 100 ms) fails each attempt at the window, and the call within (retries + 1) windows', async () => {
    s.proxy.rule = (seen) => (isDownload(seen.url) ? drip(100) : undefined);
    const from = s.proxy.seen.length;
    const started = Date.now();
    const m = manager(s.stateDir(), { ...deadlines, retry: { retries: 2, baseDelayMs: 10 } });
    const failed = m.downloadUpdate(update);
    await expect(failed).rejects.toBeInstanceOf(NetworkError);
    await expect(failed).rejects.toThrow(/fewer than 512 bytes in 500 ms \(the speed floor\), after \d bytes/);
    const elapsed = Date.now() - started;
    const times = downloadTimes(from);
    expect(times).toHaveLength(3);
    // Each attempt ends at its window (the backoff between is at most 10 and 20 ms).
    for (const [i, at] of times.slice(1).entries()) {
      expect(at - times[i]!).toBeGreaterThanOrEqual(WINDOW);
      expect(at - times[i]!).toBeLessThan(WINDOW + 400);
    }
    // The bound: 3 attempts of a window each, and the backoffs.
    expect(elapsed).toBeGreaterThanOrEqual(3 * WINDOW);
    expect(elapsed).toBeLessThan(3 * WINDOW + 30 + 1000);
  });

  it('a server that never answers (no headers) fails each attempt at timeoutMs', async () => {
    s.proxy.rule = (seen) => (isDownload(seen.url) ? new Promise<never>(() => undefined) : undefined);
    const from = s.proxy.seen.length;
    const started = Date.now();
    const m = manager(s.stateDir(), { timeoutMs: 300, stallTimeoutMs: 60_000, retry: { retries: 1, baseDelayMs: 10 } });
    await expect(m.downloadUpdate(update)).rejects.toThrow(/no answer within 300 ms/);
    expect(downloadTimes(from)).toHaveLength(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(600);
    expect(Date.now() - started).toBeLessThan(2500);
  });

  it('an attempt that stalls after progress is resumed from where it was, and does not count against the retries', async () => {
    const piece = 64 * 1024;
    let stalls = 0;
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url) || stalls === 2) return undefined;
      stalls++;
      // A piece of what was asked for (the whole file, then the rest of it), then silence.
      return { ...(await upstream()), cutAfter: piece, hold: true };
    };
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    // One retry: only because the stalled attempts made progress is the download not given up.
    const done = await manager(stateDir, { ...deadlines, retry: { retries: 1, baseDelayMs: 10 } }).downloadUpdate(
      update,
    );
    expect(fs.readFileSync(done.file).equals(content)).toBe(true);
    const requests = s.proxy.seen.slice(from).filter((r) => isDownload(r.url));
    expect(requests.map((r) => r.headers.range)).toEqual([undefined, `bytes=${piece}-`, `bytes=${2 * piece}-`]);
    expect(requests[1]!.at - requests[0]!.at).toBeGreaterThanOrEqual(WINDOW);
    expect(done.downloadedBytes).toBe(SIZE);
  });

  it('a download slower than the timeouts but above the floor is never cut', async () => {
    const pkg = await launcherPackage(s.t, 'slow-launcher');
    const published = await publishVersion(s.t, pkg, 2, {}, 8192);
    const answer = await (
      await fetch(`${s.proxy.url}/api/software/check-update?slug=slow-launcher&versionCode=1`)
    ).json();
    const slow: UpdateInfo = { kind: 'full', slug: 'slow-launcher', downgrade: false, changelog: '', ...answer.latest };
    // 256 bytes every 50 ms (about 5 KiB/s, 1.6 s in all): every 1 000 ms window holds more than 1 024 bytes.
    s.proxy.rule = async (seen, upstream) => {
      if (!isDownload(seen.url)) return undefined;
      const whole = await upstream();
      return {
        ...whole,
        stream: async function* () {
          for (let at = 0; at < whole.body.length; at += 256) {
            yield whole.body.subarray(at, at + 256);
            await sleep(50);
          }
        },
      };
    };
    const started = Date.now();
    const m = manager(s.stateDir(), {
      stallTimeoutMs: 1000,
      minBytesPerSecond: 1024,
      timeoutMs: 300,
      retry: { retries: 0 },
    });
    const done = await m.downloadUpdate(slow);
    expect(Date.now() - started).toBeGreaterThan(1000);
    expect(fs.readFileSync(done.file).equals(published.content)).toBe(true);
  });

  it('a delta and then its full file share one bound: a dripping server fails the call after retries + 2 attempts', async () => {
    s.proxy.rule = (seen) => (isDownload(seen.url) ? drip(100) : undefined);
    const stateDir = s.stateDir();
    const currentFile = path.join(stateDir, 'current');
    fs.writeFileSync(currentFile, 'the installed file');
    const delta = {
      fromVersionCode: 1,
      downloadUrl: `${update.downloadUrl}-delta`,
      fileSize: 1000,
      sha256: 'd'.repeat(64),
    };
    const from = s.proxy.seen.length;
    const started = Date.now();
    const m = manager(stateDir, { ...deadlines, retry: { retries: 2, baseDelayMs: 10 } });
    await expect(m.downloadUpdate({ ...update, delta }, { currentFile })).rejects.toThrow(/the speed floor/);
    const urls = s.proxy.seen
      .slice(from)
      .filter((r) => isDownload(r.url))
      .map((r) => r.url.endsWith('-delta'));
    // Three attempts of the delta, then one of the full file: the count was spent.
    expect(urls).toEqual([true, true, true, false]);
    expect(Date.now() - started).toBeLessThan(4 * WINDOW + 30 + 1200);
  });
});

describe('chunk downloads', () => {
  it('collect the young generation every 8 MiB received: the socket reads of a 40 MiB download do not wait for V8 to collect them', async () => {
    const MiB = 1024 * 1024;
    const body = Buffer.alloc(MiB, 7);
    s.proxy.rule = (seen) =>
      seen.url.startsWith('/api/game/chunks/')
        ? { status: 200, headers: { 'content-type': 'application/octet-stream' }, body }
        : undefined;
    const forced: PerformanceEntry[] = [];
    const observer = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        // A gc entry's detail (typed in later @types/node than the package's Node 20 ones).
        const { kind, flags } = (entry as unknown as { detail: { kind: number; flags: number } }).detail;
        if (kind === constants.NODE_PERFORMANCE_GC_MINOR && (flags & constants.NODE_PERFORMANCE_GC_FLAGS_FORCED) !== 0)
          forced.push(entry);
      }
    });
    observer.observe({ entryTypes: ['gc'] });
    const dispatcher = await chunkConnections(4);
    try {
      const into = Buffer.alloc(MiB);
      const deadlines = { timeoutMs: 10_000, minBytesPerSecond: 1024, stallTimeoutMs: 10_000 };
      for (let i = 0; i < 40; i++) {
        const got = await downloadInto(
          dispatcher,
          `${s.proxy.url}/api/game/chunks/${i}`,
          MiB,
          into,
          deadlines,
          undefined,
        );
        expect(got.equals(body)).toBe(true);
      }
      await sleep(50); // the observer hears of collections after them
    } finally {
      observer.disconnect();
      await dispatcher.destroy();
    }
    // 40 MiB received: a collection after each 8 MiB (the count may carry a few MiB from an earlier test).
    expect(forced.length).toBeGreaterThanOrEqual(4);
    expect(forced.length).toBeLessThanOrEqual(6);
    // No context of the process gained a `gc` (the flag was on only while the collector was taken).
    expect(typeof globalThis.gc).toBe('undefined');
  });
});
