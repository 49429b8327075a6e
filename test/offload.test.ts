import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';
import { type NginxProcess, nginxWanted, startNginx } from './helpers/nginx.js';

/** DOWNLOAD_OFFLOAD: the service decides and counts, the proxy sends the bytes. */

const content = randomBytes(50_000);

async function downloads(t: TestApp, versionId: string): Promise<number> {
  const row = await t.database.db
    .selectFrom('softwareVersions')
    .select('downloadCount')
    .where('id', '=', versionId)
    .executeTakeFirstOrThrow();
  return row.downloadCount;
}

async function setUp(env: Record<string, string>) {
  const t = await buildTestApp(env);
  const file = await upload(t, 'Setup 1.0.exe', content);
  const pkg = await createPackage(t, { slug: 'offload', name: '下载' });
  return { t, file, pkg, key: file.filePath.slice('/uploads/'.length) };
}

describe.each([
  ['x-accel-redirect', { DOWNLOAD_OFFLOAD: 'x-accel-redirect' }, (key: string) => `/internal-uploads/${key}`],
  [
    'x-sendfile',
    { DOWNLOAD_OFFLOAD: 'x-sendfile', DOWNLOAD_OFFLOAD_PREFIX: '/var/www/uploads' },
    (key: string) => `/var/www/uploads/${key}`,
  ],
])('DOWNLOAD_OFFLOAD=%s', (header, env, location) => {
  let s: Awaited<ReturnType<typeof setUp>>;
  beforeAll(async () => (s = await setUp(env)));
  afterAll(() => s.t.close());

  it('answers a GET with the header naming the file, the download headers and no body, counted once', async () => {
    const v = await createVersion(s.t, s.pkg.id, { version: '1', versionCode: 1, filePath: s.file.filePath });
    const res = await s.t.inject(`/api/software/download/${v.id}`);
    expect(res.statusCode).toBe(200);
    expect(res.headers[header]).toBe(location(s.key));
    expect(res.headers).toMatchObject({
      etag: `"${s.file.sha256}"`,
      'content-type': 'application/octet-stream',
      'x-content-type-options': 'nosniff',
    });
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="Setup 1.0.exe"/);
    expect(res.rawPayload.length).toBe(0);
    expect(await downloads(s.t, v.id)).toBe(1);
  });

  it('hands a single range over (counted only from byte 0) and answers HEAD, 304 and 416 itself, uncounted', async () => {
    const v = await createVersion(s.t, s.pkg.id, { version: '2', versionCode: 2, filePath: s.file.filePath });
    const url = `/api/software/download/${v.id}`;
    const resumed = await s.t.inject({ url, headers: { range: 'bytes=100-' } });
    expect(resumed.headers[header]).toBe(location(s.key));
    expect(resumed.headers['content-range']).toBeUndefined();
    expect(await downloads(s.t, v.id)).toBe(0);
    const head = await s.t.inject({ method: 'HEAD', url });
    expect(head.headers[header]).toBeUndefined();
    expect(head.headers['content-length']).toBe(String(content.length));
    const cached = await s.t.inject({ url, headers: { 'if-none-match': `"${s.file.sha256}"` } });
    expect(cached.statusCode).toBe(304);
    expect(cached.headers[header]).toBeUndefined();
    const unsatisfiable = await s.t.inject({ url, headers: { range: 'bytes=90000-' } });
    expect(unsatisfiable.statusCode).toBe(416);
    expect(unsatisfiable.headers[header]).toBeUndefined();
    expect(await downloads(s.t, v.id)).toBe(0);
    const fromZero = await s.t.inject({ url, headers: { range: 'bytes=0-99' } });
    expect(fromZero.headers[header]).toBe(location(s.key));
    expect(await downloads(s.t, v.id)).toBe(1);
  });

  it('streams several ranges or a malformed Range itself (a proxy would answer them differently)', async () => {
    const v = await createVersion(s.t, s.pkg.id, { version: '3', versionCode: 3, filePath: s.file.filePath });
    for (const range of ['bytes=0-9,20-29', 'bytes=abc']) {
      const res = await s.t.inject({ url: `/api/software/download/${v.id}`, headers: { range } });
      expect(res.statusCode).toBe(200);
      expect(res.headers[header]).toBeUndefined();
      expect(res.rawPayload.equals(content)).toBe(true);
    }
    expect(await downloads(s.t, v.id)).toBe(2);
  });

  it('percent-encodes each segment of the key in the header', async () => {
    fs.mkdirSync(path.join(s.t.dir, 'uploads', 'manual'), { recursive: true });
    fs.writeFileSync(path.join(s.t.dir, 'uploads', 'manual', '启动器 v2.exe'), 'manual');
    const res = await s.t.inject('/uploads/manual/启动器 v2.exe');
    expect(res.headers[header]).toBe(location(`manual/${encodeURIComponent('启动器 v2.exe')}`));
  });
});

describe.runIf(nginxWanted())('through a real nginx (x-accel-redirect)', () => {
  let s: Awaited<ReturnType<typeof setUp>>;
  let nginx: NginxProcess;
  beforeAll(async () => {
    s = await setUp({ DOWNLOAD_OFFLOAD: 'x-accel-redirect' });
    await s.t.app.server.listen({ port: 0, host: '127.0.0.1' });
    const address = s.t.app.server.server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    nginx = await startNginx({
      upstream: `127.0.0.1:${port}`,
      storeRoot: path.join(s.t.dir, 'uploads'),
      offloadPrefix: '/internal-uploads/',
    });
  });
  afterAll(async () => {
    await nginx?.stop();
    await s?.t.close();
  });

  it('sends the bytes with the service headers; a GET from byte 0 counts once, HEAD/304/416/resumes never', async () => {
    const v = await createVersion(s.t, s.pkg.id, { version: '10', versionCode: 10, filePath: s.file.filePath });
    const url = `${nginx.url}/api/software/download/${v.id}`;
    const full = await fetch(url);
    expect(full.status).toBe(200);
    expect(Buffer.from(await full.arrayBuffer()).equals(content)).toBe(true);
    expect(full.headers.get('content-length')).toBe(String(content.length));
    expect(full.headers.get('etag')).toBe(`"${s.file.sha256}"`);
    expect(full.headers.get('content-type')).toBe('application/octet-stream');
    expect(full.headers.get('content-disposition')).toMatch(/^attachment; filename="Setup 1.0.exe"/);
    expect(full.headers.get('x-content-type-options')).toBe('nosniff');
    expect(full.headers.get('accept-ranges')).toBe('bytes');
    expect(await downloads(s.t, v.id)).toBe(1);

    const resumed = await fetch(url, { headers: { range: 'bytes=1000-1999' } });
    expect(resumed.status).toBe(206);
    expect(resumed.headers.get('content-range')).toBe(`bytes 1000-1999/${content.length}`);
    expect(Buffer.from(await resumed.arrayBuffer()).equals(content.subarray(1000, 2000))).toBe(true);
    const head = await fetch(url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(content.length));
    const cached = await fetch(url, { headers: { 'if-none-match': `"${s.file.sha256}"` } });
    expect(cached.status).toBe(304);
    const unsatisfiable = await fetch(url, { headers: { range: 'bytes=90000-' } });
    expect(unsatisfiable.status).toBe(416);
    expect(await unsatisfiable.json()).toEqual({ error: expect.any(String) });
    expect(await downloads(s.t, v.id)).toBe(1);

    // The service counts this GET (it ignores If-Modified-Since), so nginx must send the file, not a 304.
    const since = await fetch(url, { headers: { 'if-modified-since': full.headers.get('last-modified') ?? '' } });
    expect(since.status).toBe(200);
    expect(Buffer.from(await since.arrayBuffer()).equals(content)).toBe(true);
    expect(await downloads(s.t, v.id)).toBe(2);
  });

  it('honours If-Range against the service ETag: matching resumes uncounted, stale sends all and counts', async () => {
    const v = await createVersion(s.t, s.pkg.id, { version: '11', versionCode: 11, filePath: s.file.filePath });
    const url = `${nginx.url}/api/software/download/${v.id}`;
    const matching = await fetch(url, { headers: { range: 'bytes=100-199', 'if-range': `"${s.file.sha256}"` } });
    expect(matching.status).toBe(206);
    expect(Buffer.from(await matching.arrayBuffer()).equals(content.subarray(100, 200))).toBe(true);
    expect(await downloads(s.t, v.id)).toBe(0);
    const stale = await fetch(url, { headers: { range: 'bytes=100-199', 'if-range': '"older"' } });
    expect(stale.status).toBe(200);
    expect(Buffer.from(await stale.arrayBuffer()).equals(content)).toBe(true);
    expect(await downloads(s.t, v.id)).toBe(1);
  });

  it('counts exactly N of N concurrent downloads, and the internal location is not reachable from outside', async () => {
    const v = await createVersion(s.t, s.pkg.id, { version: '12', versionCode: 12, filePath: s.file.filePath });
    const bodies = await Promise.all(
      Array.from({ length: 20 }, async () => {
        const res = await fetch(`${nginx.url}/api/software/download/${v.id}`);
        return Buffer.from(await res.arrayBuffer());
      }),
    );
    expect(bodies.every((body) => body.equals(content))).toBe(true);
    expect(await downloads(s.t, v.id)).toBe(20);
    expect((await fetch(`${nginx.url}/internal-uploads/${s.key}`)).status).toBe(404);
  });

  it('serves images inline with their type, and keys that need percent-encoding', async () => {
    const image = await upload(s.t, 'banner.png', Buffer.from('not really a png'));
    const res = await fetch(nginx.url + image.filePath);
    expect(res.headers.get('content-type')).toBe('image/png');
    expect(res.headers.get('content-disposition')).toMatch(/^inline;/);
    expect(await res.text()).toBe('not really a png');
    fs.mkdirSync(path.join(s.t.dir, 'uploads', 'manual'), { recursive: true });
    fs.writeFileSync(path.join(s.t.dir, 'uploads', 'manual', '启动器 v2%.exe'), 'manual');
    const manual = await fetch(`${nginx.url}/uploads/manual/${encodeURIComponent('启动器 v2%.exe')}`);
    expect(manual.status).toBe(200);
    expect(await manual.text()).toBe('manual');
  });
});
