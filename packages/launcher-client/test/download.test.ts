import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AbortedError, IntegrityError, type Progress, type UpdateInfo, UpdateManager } from '../src/index.js';
import { downloadsOf, launcherPackage, publishVersion, type Service, startService } from './helpers.js';

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

function manager(stateDir = s.stateDir()) {
  return new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: [],
    stateDir,
    retry: { baseDelayMs: 10, retries: 3 },
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
