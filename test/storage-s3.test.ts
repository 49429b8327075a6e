import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { S3Storage, type S3StorageConfig } from '../src/storage/s3.js';
import {
  admin,
  buildTestApp,
  createPackage,
  createVersion,
  multipartBody,
  type TestApp,
  upload,
} from './helpers/app.js';
import { S3RVER_CREDENTIALS, startS3, type TestS3 } from './helpers/s3.js';

let s3: TestS3;
beforeAll(async () => {
  s3 = await startS3();
});
afterAll(() => s3?.close());

/** A driver for `prefix` on the test server, configured exactly as the service would from its environment. */
function storageFor(prefix: string, extra: Record<string, string> = {}): S3Storage {
  const config = loadConfig({ DATA_DIR: '/nonexistent', ...s3.env(prefix, extra) }).storage as S3StorageConfig;
  return new S3Storage(config, { credentials: S3RVER_CREDENTIALS });
}

/** `size` bytes in chunks of at most 1 MiB, generated as they are read. */
function generated(size: number, seed = 7): { stream: Readable; sha256: string; bytes: Buffer } {
  const bytes = Buffer.alloc(size);
  for (let i = 0; i < size; i++) bytes[i] = (i * 31 + seed) & 0xff;
  const chunks: Buffer[] = [];
  for (let at = 0; at < size; at += 1024 * 1024) chunks.push(bytes.subarray(at, at + 1024 * 1024));
  return { stream: Readable.from(chunks), sha256: createHash('sha256').update(bytes).digest('hex'), bytes };
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

describe('S3Storage driver on a real S3-compatible server (s3rver)', () => {
  let storage: S3Storage;
  beforeAll(() => {
    storage = storageFor('driver');
  });
  afterAll(() => storage.close());

  it('config: STORAGE=s3://bucket/prefix with S3_ENDPOINT and path style', () => {
    const config = loadConfig({ ...s3.env('a/b/') }).storage;
    expect(config).toMatchObject({ kind: 's3', bucket: s3.bucket, prefix: 'a/b', endpoint: s3.endpoint });
  });

  it('streams a multipart upload (larger than one part), then stat, range read and delete', async () => {
    const size = 20 * 1024 * 1024 + 123; // three 8 MiB parts
    const { stream, sha256, bytes } = generated(size);
    const written = await storage.write('big/file.bin', stream, 'application/octet-stream');
    expect(written).toEqual({ size, sha256 });

    const info = await storage.stat('big/file.bin');
    expect(info?.size).toBe(size);
    expect(info?.lastModified).toBeInstanceOf(Date);

    const whole = await readAll(await storage.read('big/file.bin'));
    expect(createHash('sha256').update(whole).digest('hex')).toBe(sha256);
    const start = 8 * 1024 * 1024 - 5;
    const part = await readAll(await storage.read('big/file.bin', { start, end: start + 9 }));
    expect(part).toEqual(bytes.subarray(start, start + 10));

    await storage.delete('big/file.bin');
    expect(await storage.stat('big/file.bin')).toBeNull();
    await storage.delete('big/file.bin'); // deleting what is gone is fine
  });

  it('a small object is one PUT; keys live under the prefix', async () => {
    const written = await storage.write('small.txt', Readable.from([Buffer.from('hello')]), 'text/plain');
    expect(written.size).toBe(5);
    const other = storageFor('elsewhere');
    expect(await other.stat('small.txt')).toBeNull();
    await other.close();
    expect((await readAll(await storage.read('small.txt'))).toString()).toBe('hello');
  });

  it('an interrupted upload leaves no object behind', async () => {
    const failing = new Readable({ read() {} });
    failing.push(randomBytes(9 * 1024 * 1024)); // more than one part
    setTimeout(() => failing.destroy(new Error('client went away')), 50);
    await expect(storage.write('broken.bin', failing, 'application/octet-stream')).rejects.toThrow();
    expect(await storage.stat('broken.bin')).toBeNull();
  });

  it('stat of a missing key is null; unsafe keys are refused', async () => {
    expect(await storage.stat('no/such/key')).toBeNull();
    await expect(storage.stat('../escape')).rejects.toThrow(/unsafe/);
  });

  it('presignedUrl is null unless S3_PRESIGN_DOWNLOADS is on', async () => {
    expect(await storage.presignedUrl('small.txt', 'x.txt')).toBeNull();
    const presigning = storageFor('driver', { S3_PRESIGN_DOWNLOADS: 'true', S3_PRESIGN_SECONDS: '60' });
    const url = new URL((await presigning.presignedUrl('small.txt', '说明 v1.txt')) ?? '');
    await presigning.close();
    expect(url.origin).toBe(s3.endpoint);
    expect(url.pathname).toBe(`/${s3.bucket}/driver/small.txt`);
    expect(url.searchParams.get('X-Amz-Expires')).toBe('60');
    expect(url.searchParams.get('response-content-disposition')).toMatch(/^attachment; filename=.*UTF-8''/);
  });

  it('names S3_PUBLIC_ENDPOINT in presigned URLs when the instances reach the store under another name', async () => {
    const presigning = storageFor('driver', {
      S3_PRESIGN_DOWNLOADS: 'true',
      S3_PUBLIC_ENDPOINT: 'https://files.example.test',
    });
    const url = new URL((await presigning.presignedUrl('small.txt', 'x.txt')) ?? '');
    // The store itself is still reached at its own endpoint.
    expect((await presigning.stat('small.txt'))?.size).toBeGreaterThan(0);
    await presigning.close();
    expect(url.origin).toBe('https://files.example.test');
    expect(url.pathname).toBe(`/${s3.bucket}/driver/small.txt`);
  });
});

describe('the service on S3 storage, streaming downloads', () => {
  let t: TestApp;
  let storage: S3Storage;
  beforeAll(async () => {
    storage = storageFor('api');
    t = await buildTestApp({ MAX_UPLOAD_BYTES: String(3 * 1024 * 1024) }, { storage });
  });
  afterAll(async () => {
    await t?.close();
    await storage?.close();
  });

  it('upload, download, range, HEAD, conditional GET, and a file deleted from the store', async () => {
    const content = randomBytes(2 * 1024 * 1024 + 17);
    const file = await upload(t, 'launcher setup.exe', content);
    expect(file.filePath).toMatch(/^\/uploads\//);
    expect(file.size).toBe(content.length);
    expect(file.sha256).toBe(createHash('sha256').update(content).digest('hex'));
    expect(await storage.stat(file.filePath.slice('/uploads/'.length))).not.toBeNull();

    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器' });
    const version = await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath });
    const url = `/api/software/download/${version.id}`;

    const full = await t.inject({ url });
    expect(full.statusCode).toBe(200);
    expect(full.rawPayload.equals(content)).toBe(true);
    expect(full.headers['content-length']).toBe(String(content.length));
    expect(full.headers['content-type']).toBe('application/octet-stream');
    expect(full.headers['content-disposition']).toContain('filename="launcher setup.exe"');
    expect(full.headers.etag).toBe(`"${file.sha256}"`);

    const ranged = await t.inject({ url, headers: { range: 'bytes=1048570-1048579' } });
    expect(ranged.statusCode).toBe(206);
    expect(ranged.headers['content-range']).toBe(`bytes 1048570-1048579/${content.length}`);
    expect(ranged.rawPayload).toEqual(content.subarray(1048570, 1048580));

    const tail = await t.inject({ url, headers: { range: 'bytes=-5' } });
    expect(tail.statusCode).toBe(206);
    expect(tail.rawPayload).toEqual(content.subarray(content.length - 5));

    const unsatisfiable = await t.inject({ url, headers: { range: `bytes=${content.length + 10}-` } });
    expect(unsatisfiable.statusCode).toBe(416);

    const head = await t.inject({ method: 'HEAD', url });
    expect(head.statusCode).toBe(200);
    expect(head.headers['content-length']).toBe(String(content.length));
    expect(head.rawPayload.length).toBe(0);

    const notModified = await t.inject({ url, headers: { 'if-none-match': `"${file.sha256}"` } });
    expect(notModified.statusCode).toBe(304);

    // Only the full GET started at byte 0; ranges after it, HEAD and the 304 are not counted.
    const detail = (await t.inject({ url: `/api/software/${pkg.id}` })).json();
    expect(detail.versions[0].downloadCount).toBe(1);

    const served = await t.inject({ url: file.filePath });
    expect(served.statusCode).toBe(200);
    expect(served.rawPayload.equals(content)).toBe(true);

    await storage.delete(file.filePath.slice('/uploads/'.length));
    expect((await t.inject({ url })).statusCode).toBe(404);
    expect((await t.inject({ url: file.filePath })).statusCode).toBe(404);
  });

  it('an upload over MAX_UPLOAD_BYTES is 413 and removed from the bucket', async () => {
    const { payload, headers } = multipartBody('too-big.bin', randomBytes(3 * 1024 * 1024 + 1));
    const res = await t.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { ...headers, cookie: t.cookie },
      payload,
    });
    expect(res.statusCode).toBe(413);
    const rows = await t.database.db
      .selectFrom('files')
      .select('key')
      .where('originalName', '=', 'too-big.bin')
      .execute();
    expect(rows).toEqual([]);
  });
});

describe('the service on S3 storage with S3_PRESIGN_DOWNLOADS', () => {
  let t: TestApp;
  let storage: S3Storage;
  beforeAll(async () => {
    storage = storageFor('presign', { S3_PRESIGN_DOWNLOADS: 'true', S3_PRESIGN_SECONDS: '120' });
    t = await buildTestApp({}, { storage });
  });
  afterAll(async () => {
    await t?.close();
    await storage?.close();
  });

  it('answers 302 to a presigned URL that serves the file, counted exactly like a GET', async () => {
    const content = randomBytes(100_000);
    const file = await upload(t, '插件 addon.zip', content);
    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器' });
    const version = await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath });
    const url = `/api/software/download/${version.id}`;

    const res = await t.inject({ url });
    expect(res.statusCode).toBe(302);
    expect(res.headers['cache-control']).toBe('no-store');
    const location = new URL(String(res.headers.location));
    expect(location.origin).toBe(s3.endpoint);
    expect(location.searchParams.get('X-Amz-Expires')).toBe('120');

    // The client follows the redirect straight to the object store.
    const fetched = await fetch(location);
    expect(fetched.status).toBe(200);
    expect(Buffer.from(await fetched.arrayBuffer()).equals(content)).toBe(true);
    expect(fetched.headers.get('content-disposition')).toContain(`filename*=UTF-8''${encodeURIComponent('插件')}`);
    const ranged = await fetch(location, { headers: { range: 'bytes=10-19' } });
    expect(ranged.status).toBe(206);
    expect(Buffer.from(await ranged.arrayBuffer())).toEqual(content.subarray(10, 20));

    // A launcher self-update counts twice over; HEAD is answered here and not counted;
    // a resumed range redirects without counting; the latest-launcher path redirects too.
    expect((await t.inject({ url: `${url}?source=launcher` })).statusCode).toBe(302);
    const head = await t.inject({ method: 'HEAD', url });
    expect(head.statusCode).toBe(200);
    expect(head.headers['content-length']).toBe(String(content.length));
    expect((await t.inject({ url, headers: { range: 'bytes=500-' } })).statusCode).toBe(302);
    expect((await t.inject({ url, headers: { range: 'bytes=0-99' } })).statusCode).toBe(302);
    expect((await t.inject({ url: '/download/launcher' })).statusCode).toBe(302);

    const detail = (await admin(t, 'GET', `/api/software/${pkg.id}`)).json();
    // GET, launcher GET, range from 0, /download/launcher = 4; HEAD and the resumed range add nothing.
    expect(detail.versions[0].downloadCount).toBe(4);
    expect(detail.versions[0].launcherDownloadCount).toBe(1);
  });

  it('images under /uploads/ are still served inline by the service', async () => {
    const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
    const file = await upload(t, 'banner.png', png);
    const res = await t.inject({ url: file.filePath });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('image/png');
    expect(res.rawPayload).toEqual(png);
  });
});
