import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { DownloadCounter, type DownloadKind } from '../src/modules/downloads/counting.js';
import { contentDisposition } from '../src/modules/downloads/service.js';
import {
  admin,
  buildTestApp,
  createPackage,
  createVersion,
  type TestApp,
  upload,
  versionCounters,
} from './helpers/app.js';

let t: TestApp;
const content = randomBytes(10_000);
let file: { filePath: string; sha256: string };
let packageId: string;

beforeAll(async () => {
  t = await buildTestApp();
  file = await upload(t, '启动器 Setup (x64).exe', content);
  packageId = (await createPackage(t, { slug: 'dl', name: '下载' })).id;
});
afterAll(() => t.close());

const counters = (versionId: string) => versionCounters(t, versionId);

async function rollUp() {
  const rows = await t.database.db.selectFrom('downloadDaily').select(['kind', 'count']).execute();
  return Object.fromEntries(rows.map((r) => [r.kind, r.count]));
}

describe('GET /api/software/download/{versionId}', () => {
  it('streams the file with attachment headers, ETag, Accept-Ranges and Content-Length, and counts once', async () => {
    const v = await createVersion(t, packageId, { version: '1', versionCode: 1, filePath: file.filePath });
    const res = await t.inject(`/api/software/download/${v.id}`);
    expect(res.statusCode).toBe(200);
    expect(res.rawPayload.equals(content)).toBe(true);
    expect(res.headers['content-type']).toBe('application/octet-stream');
    expect(res.headers['content-length']).toBe(String(content.length));
    expect(res.headers['accept-ranges']).toBe('bytes');
    expect(res.headers.etag).toBe(`"${file.sha256}"`);
    expect(res.headers['content-disposition']).toBe(
      `attachment; filename="___ Setup (x64).exe"; filename*=UTF-8''${encodeURIComponent('启动器 Setup ')}%28x64%29.exe`,
    );
    expect(await counters(v.id)).toEqual({ total: 1, launcher: 0 });
  });

  it('counts source=launcher in both the total and the launcher counter, and in the daily roll-up', async () => {
    const before = await rollUp();
    const v = await createVersion(t, packageId, { version: '2', versionCode: 2, filePath: file.filePath });
    await t.inject(`/api/software/download/${v.id}?source=launcher`);
    await t.inject(`/api/software/download/${v.id}?source=website`);
    expect(await counters(v.id)).toEqual({ total: 2, launcher: 1 });
    const after = await rollUp();
    expect((after.launcher ?? 0) - (before.launcher ?? 0)).toBe(1);
    expect((after.installer ?? 0) - (before.installer ?? 0)).toBe(1);
  });

  it('answers a Range with 206 and the right bytes; a resume after byte 0 does not count, a range from 0 does', async () => {
    const v = await createVersion(t, packageId, { version: '3', versionCode: 3, filePath: file.filePath });
    const part = await t.inject({ url: `/api/software/download/${v.id}`, headers: { range: 'bytes=5000-5999' } });
    expect(part.statusCode).toBe(206);
    expect(part.headers['content-range']).toBe(`bytes 5000-5999/${content.length}`);
    expect(part.headers['content-length']).toBe('1000');
    expect(part.rawPayload.equals(content.subarray(5000, 6000))).toBe(true);
    const suffix = await t.inject({ url: `/api/software/download/${v.id}`, headers: { range: 'bytes=-100' } });
    expect(suffix.rawPayload.equals(content.subarray(content.length - 100))).toBe(true);
    const open = await t.inject({ url: `/api/software/download/${v.id}`, headers: { range: 'bytes=9000-' } });
    expect(open.rawPayload.equals(content.subarray(9000))).toBe(true);
    expect(await counters(v.id)).toEqual({ total: 0, launcher: 0 });
    const fromZero = await t.inject({ url: `/api/software/download/${v.id}`, headers: { range: 'bytes=0-99' } });
    expect(fromZero.statusCode).toBe(206);
    expect(await counters(v.id)).toEqual({ total: 1, launcher: 0 });
  });

  it('answers 416 for an unsatisfiable range, without counting', async () => {
    const v = await createVersion(t, packageId, { version: '4', versionCode: 4, filePath: file.filePath });
    const res = await t.inject({ url: `/api/software/download/${v.id}`, headers: { range: 'bytes=20000-30000' } });
    expect(res.statusCode).toBe(416);
    expect(res.headers['content-range']).toBe(`bytes */${content.length}`);
    expect(res.json()).toEqual({ error: expect.any(String) });
    expect(await counters(v.id)).toEqual({ total: 0, launcher: 0 });
  });

  it('honours If-Range: a matching ETag resumes, a stale one gets the whole file (and counts)', async () => {
    const v = await createVersion(t, packageId, { version: '5', versionCode: 5, filePath: file.filePath });
    const matching = await t.inject({
      url: `/api/software/download/${v.id}`,
      headers: { range: 'bytes=100-199', 'if-range': `"${file.sha256}"` },
    });
    expect(matching.statusCode).toBe(206);
    const stale = await t.inject({
      url: `/api/software/download/${v.id}`,
      headers: { range: 'bytes=100-199', 'if-range': '"something-else"' },
    });
    expect(stale.statusCode).toBe(200);
    expect(stale.rawPayload.length).toBe(content.length);
    expect(await counters(v.id)).toEqual({ total: 1, launcher: 0 });
  });

  it('answers HEAD with headers only and 304 to a matching If-None-Match; neither counts', async () => {
    const v = await createVersion(t, packageId, { version: '6', versionCode: 6, filePath: file.filePath });
    const head = await t.inject({ method: 'HEAD', url: `/api/software/download/${v.id}` });
    expect(head.statusCode).toBe(200);
    expect(head.headers['content-length']).toBe(String(content.length));
    expect(head.headers['content-disposition']).toMatch(/^attachment;/);
    expect(head.rawPayload.length).toBe(0);
    const cached = await t.inject({
      url: `/api/software/download/${v.id}`,
      headers: { 'if-none-match': `"${file.sha256}"` },
    });
    expect(cached.statusCode).toBe(304);
    expect(cached.rawPayload.length).toBe(0);
    expect(await counters(v.id)).toEqual({ total: 0, launcher: 0 });
  });

  it('redirects an external link with 302 and counts it; HEAD does not count', async () => {
    const v = await createVersion(t, packageId, {
      version: '7',
      versionCode: 7,
      downloadType: 'url',
      externalUrl: 'https://mirror.example.test/setup.exe',
    });
    const res = await t.inject(`/api/software/download/${v.id}?source=launcher`);
    expect(res.statusCode).toBe(302);
    expect(res.headers.location).toBe('https://mirror.example.test/setup.exe');
    await t.inject({ method: 'HEAD', url: `/api/software/download/${v.id}` });
    expect(await counters(v.id)).toEqual({ total: 1, launcher: 1 });
  });

  it('answers 404 for an unknown version, a version without a file, or a file gone from the store', async () => {
    expect((await t.inject('/api/software/download/unknown')).statusCode).toBe(404);
    const noFile = await createVersion(t, packageId, { version: '8', versionCode: 8 });
    expect((await t.inject(`/api/software/download/${noFile.id}`)).statusCode).toBe(404);
    const gone = await upload(t, 'gone.bin', 'soon gone');
    const v = await createVersion(t, packageId, { version: '9', versionCode: 9, filePath: gone.filePath });
    await t.app.ctx.storage.delete(gone.filePath.replace('/uploads/', ''));
    const res = await t.inject(`/api/software/download/${v.id}`);
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'file not found' });
    expect(await counters(v.id)).toEqual({ total: 0, launcher: 0 });
  });

  it('adds exactly N for N concurrent counted downloads', async () => {
    const v = await createVersion(t, packageId, { version: '10', versionCode: 10, filePath: file.filePath });
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        t.inject(`/api/software/download/${v.id}${i % 2 ? '?source=launcher' : ''}`),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(await counters(v.id)).toEqual({ total: 50, launcher: 25 });
    expect(
      (await t.inject('/api/software/dl')).json().versions.find((x: { id: string }) => x.id === v.id),
    ).toMatchObject({
      downloadCount: 50,
      launcherDownloadCount: 25,
    });
  });
});

describe('group commit of counters', () => {
  it('writes concurrent downloads in few transactions, each call resolving once its count committed', async () => {
    const v = await createVersion(t, packageId, { version: '20', versionCode: 20, filePath: file.filePath });
    const before = await rollUp();
    const commits: [DownloadKind, number][] = [];
    const counter = new DownloadCounter(t.database.db, t.app.ctx.engine, (kind, n) => commits.push([kind, n]));
    const settled: number[] = [];
    await Promise.all(
      Array.from({ length: 120 }, (_, i) =>
        counter.version(v.id, i % 3 === 0).then(async () => {
          // Committed before the call resolves: the row already holds this download.
          settled.push((await counters(v.id)).total);
        }),
      ),
    );
    expect(await counters(v.id)).toEqual({ total: 120, launcher: 40 });
    expect(settled.every((n) => n > 0)).toBe(true);
    const committed = (kind: DownloadKind) => commits.filter(([k]) => k === kind).reduce((a, [, n]) => a + n, 0);
    expect([committed('installer'), committed('launcher')]).toEqual([80, 40]);
    // Called in one turn of the event loop, they share one transaction (told once per kind).
    expect(commits.length).toBe(2);
    const after = await rollUp();
    expect((after.installer ?? 0) - (before.installer ?? 0)).toBe(80);
    expect((after.launcher ?? 0) - (before.launcher ?? 0)).toBe(40);
  });

  it('fails the downloads of a batch whose commit fails, and counts none of them', async () => {
    const v = await createVersion(t, packageId, { version: '21', versionCode: 21, filePath: file.filePath });
    const a = (await admin(t, 'POST', '/api/addons', { slug: 'poisoned', name: '毒', summary: '摘要' })).json<{
      id: string;
    }>();
    // The batch's last statement (the addon's total) fails: the statements before it are undone.
    const trigger =
      t.app.ctx.engine === 'postgres'
        ? [
            sql`create function poisoned() returns trigger language plpgsql as $$ begin raise exception 'poisoned'; end $$`,
            sql`create trigger poisoned before update on addons for each row when (new.slug = 'poisoned') execute function poisoned()`,
          ]
        : [
            sql`create trigger poisoned before update on addons when new.slug = 'poisoned' begin select raise(abort, 'poisoned'); end`,
          ];
    for (const statement of trigger) await statement.execute(t.database.db);
    try {
      const counter = new DownloadCounter(t.database.db, t.app.ctx.engine);
      const calls = [counter.version(v.id, false), counter.release('no-such-release', a.id)];
      const results = await Promise.allSettled(calls);
      expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
      expect(await counters(v.id)).toEqual({ total: 0, launcher: 0 });
      // The next batch is unaffected.
      await counter.version(v.id, false);
      expect(await counters(v.id)).toEqual({ total: 1, launcher: 0 });
    } finally {
      await sql`drop trigger poisoned${sql.raw(t.app.ctx.engine === 'postgres' ? ' on addons' : '')}`.execute(
        t.database.db,
      );
      if (t.app.ctx.engine === 'postgres') await sql`drop function poisoned`.execute(t.database.db);
    }
  });

  it('writes ids with quotes and backslashes as data (the statements of a batch are sent as text)', async () => {
    const v = await createVersion(t, packageId, { version: '22', versionCode: 22, filePath: file.filePath });
    const counter = new DownloadCounter(t.database.db, t.app.ctx.engine);
    const hostile = "x'); update software_versions set download_count = 999; --\\'";
    await Promise.all([counter.release(hostile, hostile), counter.version(v.id, false)]);
    expect(await counters(v.id)).toEqual({ total: 1, launcher: 0 });
  });
});

describe('Content-Disposition', () => {
  it('gives an ASCII filename and an RFC 5987 filename*', () => {
    expect(contentDisposition('attachment', 'plain.zip')).toBe(
      `attachment; filename="plain.zip"; filename*=UTF-8''plain.zip`,
    );
    expect(contentDisposition('attachment', 'a"b\\c%.zip')).toBe(
      `attachment; filename="a_b_c_.zip"; filename*=UTF-8''a%22b%5Cc%25.zip`,
    );
    expect(contentDisposition('inline', '图.png')).toBe(`inline; filename="_.png"; filename*=UTF-8''%E5%9B%BE.png`);
  });
});

describe('downloads of a version whose file field changed', () => {
  it('serves the new file after filePath is updated', async () => {
    const first = await upload(t, 'first.bin', 'first');
    const second = await upload(t, 'second.bin', 'second!');
    const v = await createVersion(t, packageId, { version: '11', versionCode: 11, filePath: first.filePath });
    const res = await admin(t, 'PUT', `/api/software/versions/${v.id}`, { filePath: second.filePath });
    expect(res.json()).toMatchObject({ filePath: second.filePath, fileSize: 7, sha256: second.sha256 });
    expect((await t.inject(`/api/software/download/${v.id}`)).body).toBe('second!');
  });

  it("forgets the stored file's size and sha256 when a version or release becomes a link, unless sent", async () => {
    const link = { downloadType: 'url', externalUrl: 'https://mirror.example.test/other.exe' };
    const v = await createVersion(t, packageId, { version: '12', versionCode: 12, filePath: file.filePath });
    const moved = await admin(t, 'PUT', `/api/software/versions/${v.id}`, link);
    expect(moved.json()).toMatchObject({ downloadType: 'url', fileSize: 0, sha256: null });
    const sha256 = 'ab'.repeat(32);
    const told = await createVersion(t, packageId, { version: '13', versionCode: 13, filePath: file.filePath });
    const stated = await admin(t, 'PUT', `/api/software/versions/${told.id}`, { ...link, fileSize: 42, sha256 });
    expect(stated.json()).toMatchObject({ fileSize: 42, sha256 });
    // An update that keeps the file keeps its facts.
    const kept = await admin(t, 'PUT', `/api/software/versions/${told.id}`, { forceUpdate: true });
    expect(kept.json()).toMatchObject({ fileSize: 42, sha256 });

    const addon = (await admin(t, 'POST', '/api/addons', { slug: 'dl-link', name: '链接', summary: '摘要' })).json<{
      id: string;
    }>();
    const release = await admin(t, 'POST', '/api/releases', {
      addonId: addon.id,
      version: '1',
      filePath: file.filePath,
    });
    expect(release.json()).toMatchObject({ sha256: file.sha256, fileSize: content.length });
    const linked = await admin(t, 'PUT', `/api/releases/${release.json<{ id: string }>().id}`, link);
    expect(linked.json()).toMatchObject({ downloadType: 'url', fileSize: 0, sha256: null });
  });
});
