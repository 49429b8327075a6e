import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import {
  CreateMultipartUploadCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/index.js';
import { setClock } from '../src/domain/clock.js';
import { LocalStorage } from '../src/storage/local.js';
import { S3Storage } from '../src/storage/s3.js';
import type { Storage } from '../src/storage/storage.js';
import { admin, buildTestApp, createPackage, type TestApp } from './helpers/app.js';
import { S3RVER_CREDENTIALS, startS3, type TestS3 } from './helpers/s3.js';
import { apiToken, listen, tusUpload } from './helpers/tus.js';

/**
 * Resumable uploads (issue 27): tus 1.0.0 at /api/admin/uploads through a real tus client
 * (tus-js-client) against the service on loopback, on the local store and on S3.
 */

const MAX = 8 * 1024 * 1024;
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
const TUS = { 'tus-resumable': '1.0.0' };

function bytes(size: number, seed = 1): Buffer {
  const data = Buffer.alloc(size);
  for (let i = 0; i < size; i += 1) data[i] = (i * 31 + seed * 7 + (i >> 8)) & 0xff;
  return data;
}

interface Store {
  /** A store for one app (a fresh prefix on S3), and what is left in its resumable place. */
  open(dir: string): Storage;
  /** Everything kept in the store's resumable place: file or object names, and (S3) pending multipart uploads. */
  leftovers(dir: string): Promise<string[]>;
  /** Makes storing a finished upload fail until the answered function repairs the store. */
  breakStore(dir: string): () => void;
  /** What a creation stopped half-way leaves of upload `id`: bytes without a record. */
  orphan(dir: string, id: string): Promise<void>;
}

/** How pending multipart uploads appear among the leftovers. */
const MULTIPART = ' (multipart upload)';

function localStore(): Store {
  const tus = (dir: string) => path.join(dir, 'uploads', '.tus');
  return {
    open: (dir) => new LocalStorage(path.join(dir, 'uploads')),
    leftovers: async (dir) => fs.readdirSync(tus(dir)),
    // A file where the month's folder of stored files goes (the folder itself set aside).
    breakStore: (dir) => {
      const now = Date.now();
      const months = new Set([now, now + 60_000].map((at) => new Date(at).toISOString().slice(0, 7)));
      const folders = [...months].map((month) => path.join(dir, 'uploads', month));
      for (const folder of folders) {
        if (fs.existsSync(folder)) fs.renameSync(folder, `${folder}.aside`);
        fs.writeFileSync(folder, 'not a folder');
      }
      return () => {
        for (const folder of folders) {
          fs.rmSync(folder);
          if (fs.existsSync(`${folder}.aside`)) fs.renameSync(`${folder}.aside`, folder);
        }
      };
    },
    // The datastore creates an upload's bytes file, then its record.
    orphan: async (dir, id) => fs.writeFileSync(path.join(tus(dir), id), ''),
  };
}

function s3Store(s3: () => TestS3): Store {
  const prefixes = new Map<string, string>();
  const configFor = (dir: string) => {
    const prefix = prefixes.get(dir) ?? `p${prefixes.size}`;
    prefixes.set(dir, prefix);
    const storage = loadConfig({ DATA_DIR: dir, ...s3().env(prefix) }).storage;
    if (storage.kind !== 's3') throw new Error('expected S3 storage');
    return storage;
  };
  const withClient = async <T>(dir: string, use: (client: S3Client, tus: string) => Promise<T>): Promise<T> => {
    const storage = new S3Storage(configFor(dir), { credentials: S3RVER_CREDENTIALS });
    try {
      return await use(storage.client, `${prefixes.get(dir)}/.tus/`);
    } finally {
      await storage.close();
    }
  };
  return {
    open: (dir) => new S3Storage(configFor(dir), { credentials: S3RVER_CREDENTIALS }),
    leftovers: (dir) =>
      withClient(dir, async (client, tus) => {
        const Bucket = s3().bucket;
        const objects = await client.send(new ListObjectsV2Command({ Bucket, Prefix: tus }));
        const pending = await client.send(new ListMultipartUploadsCommand({ Bucket, Prefix: tus }));
        return [
          ...(objects.Contents ?? []).map((object) => (object.Key ?? '').slice(tus.length)),
          ...(pending.Uploads ?? []).map((upload) => (upload.Key ?? '').slice(tus.length) + MULTIPART),
        ];
      }),
    // S3 fails to complete the multipart uploads of resumable uploads (their last part is in).
    breakStore: () => {
      s3().fail((request) => request.method === 'POST' && request.query.uploadId !== undefined);
      return () => s3().fail(null);
    },
    // The datastore begins a multipart upload, then writes its `.info` record.
    orphan: (dir, id) =>
      withClient(dir, async (client, tus) => {
        const Bucket = s3().bucket;
        const Key = tus + id;
        const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket, Key }));
        await client.send(new UploadPartCommand({ Bucket, Key, UploadId, PartNumber: 1, Body: bytes(1000) }));
      }),
  };
}

let s3: TestS3;
beforeAll(async () => {
  s3 = await startS3();
});
afterAll(() => s3.close());

describe.each([
  ['local folder', localStore()],
  ['S3', s3Store(() => s3)],
])('resumable uploads on the %s store', (storeName, store) => {
  let t: TestApp;
  let storage: Storage;
  let base: string;
  let token: string;
  const auth = () => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    const dir = fs.mkdtempSync(path.join(process.env.TMPDIR ?? '/tmp', 'lds-tus-'));
    storage = store.open(dir);
    t = await buildTestApp({ MAX_UPLOAD_BYTES: String(MAX) }, { storage });
    // The store was opened on `dir`; the app's own data folder is t.dir.
    Object.assign(t, { storeDir: dir });
    base = await listen(t);
    token = await apiToken(t);
  });
  afterAll(async () => {
    await t.close();
    await storage.close?.();
    fs.rmSync(storeDir(), { recursive: true, force: true });
  });
  afterEach(() => setClock(null));

  const storeDir = () => (t as TestApp & { storeDir: string }).storeDir;

  async function create(size: number, name = 'file.bin', headers: Record<string, string> = {}) {
    const metadata = `filename ${Buffer.from(name).toString('base64')}`;
    const res = await fetch(`${base}/api/admin/uploads`, {
      method: 'POST',
      headers: { ...auth(), ...TUS, 'upload-length': String(size), 'upload-metadata': metadata, ...headers },
    });
    return res;
  }

  /** What the store keeps of upload `id`. */
  const kept = async (id: string) => (await store.leftovers(storeDir())).filter((name) => name.startsWith(id));

  /** Runs `use` with a second instance on the same store and database (as after a restart): its base URL. */
  async function secondInstance(use: (base: string) => Promise<void>): Promise<void> {
    const second = await buildApp({
      config: t.app.ctx.config,
      database: await openDatabase(t.testDb.config),
      storage: store.open(storeDir()),
      logger: false,
    });
    try {
      await second.server.listen({ port: 0, host: '127.0.0.1' });
      const { port } = second.server.server.address() as AddressInfo;
      await use(`http://127.0.0.1:${port}`);
    } finally {
      await second.close();
      await second.ctx.storage.close?.();
    }
  }

  async function offsetOf(url: string): Promise<number> {
    const res = await fetch(url, { method: 'HEAD', headers: { ...auth(), ...TUS } });
    expect(res.status).toBe(200);
    return Number(res.headers.get('upload-offset'));
  }

  it('OPTIONS advertises tus 1.0.0 with creation, termination and expiration, and Tus-Max-Size', async () => {
    const res = await fetch(`${base}/api/admin/uploads`, { method: 'OPTIONS', headers: auth() });
    expect(res.status).toBe(204);
    expect(res.headers.get('tus-version')).toBe('1.0.0');
    const extensions = (res.headers.get('tus-extension') ?? '').split(',');
    expect(extensions).toEqual(expect.arrayContaining(['creation', 'termination', 'expiration']));
    expect(extensions).not.toContain('creation-defer-length');
    expect(res.headers.get('tus-max-size')).toBe(String(MAX));
  });

  it('takes a file in chunks; GET on its URL answers {filePath, originalName, size, sha256}; the file serves and makes a version', async () => {
    const data = bytes(700_000);
    const url = await tusUpload(base, token, data, '启动器 Setup 1.2.exe', { chunkSize: 100_000 });
    expect(url).toMatch(/\/api\/admin\/uploads\/[0-9a-f-]{36}$/);
    const res = await fetch(url, { headers: auth() });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { filePath: string };
    expect(body).toEqual({
      filePath: expect.stringMatching(/^\/uploads\/\d{4}-\d{2}\/[0-9a-f-]{36}-Setup_1\.2\.exe$/),
      originalName: '启动器 Setup 1.2.exe',
      size: data.length,
      sha256: sha256(data),
    });
    const served = await t.inject(body.filePath);
    expect(served.statusCode).toBe(200);
    expect(served.rawPayload.equals(data)).toBe(true);
    expect(await store.leftovers(storeDir())).toEqual([]);

    const pkg = await createPackage(t, { slug: `tus-${store === undefined ? '' : Date.now()}`, name: 'Tus' });
    const version = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
      version: '1.2.0',
      versionCode: 120,
      filePath: body.filePath,
    });
    expect(version.statusCode, version.body).toBe(201);
    expect(version.json()).toMatchObject({ fileSize: data.length, sha256: sha256(data) });
  });

  it('creation-with-upload: the first chunk rides on the POST', async () => {
    const data = bytes(250_000, 2);
    const accepted: number[] = [];
    const url = await tusUpload(base, token, data, 'with-creation.bin', {
      chunkSize: 200_000,
      withCreation: true,
      onChunk: (a) => accepted.push(a),
    });
    expect(accepted).toEqual([200_000, 250_000]);
    const res = await fetch(url, { headers: auth() });
    expect(await res.json()).toMatchObject({ size: data.length, sha256: sha256(data) });
  });

  it('keeps what arrived of a chunk whose connection was cut, and a resumed upload sends only the rest', async () => {
    const data = bytes(1_500_000, 3);
    const created = await create(data.length, 'cut.bin');
    expect(created.status).toBe(201);
    const url = new URL(created.headers.get('location') ?? '', base).href;
    // One PATCH announcing the whole file; 600 kB of it go out, then the connection drops.
    await new Promise<void>((resolve) => {
      const req = http.request(url, {
        method: 'PATCH',
        headers: {
          ...auth(),
          ...TUS,
          'upload-offset': '0',
          'content-type': 'application/offset+octet-stream',
          'content-length': String(data.length),
        },
      });
      req.on('error', () => resolve());
      req.write(data.subarray(0, 600_000), () => setTimeout(() => req.destroy(), 300));
    });
    let offset = 0;
    for (let i = 0; i < 50 && offset === 0; i += 1) {
      await new Promise((r) => setTimeout(r, 100));
      offset = await offsetOf(url);
    }
    expect(offset).toBeGreaterThan(0);
    expect(offset).toBeLessThanOrEqual(600_000);
    const accepted: number[] = [];
    await tusUpload(base, token, data, 'cut.bin', {
      uploadUrl: url,
      chunkSize: 200_000,
      onChunk: (a) => accepted.push(a),
    });
    // The first chunk sent after resuming starts at the kept offset.
    expect(accepted[0]).toBe(Math.min(offset + 200_000, data.length));
    const res = await fetch(url, { headers: auth() });
    expect(await res.json()).toMatchObject({ size: data.length, sha256: sha256(data) });
  });

  it('two instances sharing the store and database: started on one, finished on the other', async () => {
    await secondInstance(async (other) => {
      const data = bytes(900_000, 5);
      const url = await tusUpload(base, token, data, 'shared.bin', { chunkSize: 300_000, stopAfter: 300_000 });
      expect(await offsetOf(url)).toBe(300_000);
      await tusUpload(other, token, data, 'shared.bin', { uploadUrl: url.replace(base, other), chunkSize: 300_000 });
      const res = await fetch(url, { headers: auth() });
      expect(await res.json()).toMatchObject({ originalName: 'shared.bin', size: data.length, sha256: sha256(data) });
    });
  });

  it('answers every protocol error as {error}: 412 version, 409 offset, 413 size, 404, 409 unfinished, 401', async () => {
    const json = async (res: Response, status: number) => {
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      const body = (await res.json()) as { error: string };
      expect(body).toEqual({ error: expect.any(String) });
      return body;
    };
    const created = await create(1000);
    const url = new URL(created.headers.get('location') ?? '', base).href;
    const patch = (headers: Record<string, string>, body = Buffer.alloc(10)) =>
      fetch(url, {
        method: 'PATCH',
        headers: { ...auth(), 'content-type': 'application/offset+octet-stream', ...headers },
        body,
      });
    const old = await patch({ 'tus-resumable': '0.2.2', 'upload-offset': '0' });
    expect(old.headers.get('tus-version')).toBe('1.0.0');
    expect((await json(old, 412)).error).toMatch(/0\.2\.2/);
    await json(await patch({ 'upload-offset': '0' }), 412);
    await json(await patch({ ...TUS, 'upload-offset': '5' }), 409);
    expect(await offsetOf(url)).toBe(0);
    await json(await create(MAX + 1), 413);
    await json(await create(10, 'x', { 'upload-length': 'ten' }), 400);
    await json(await create(10, 'x', { 'upload-length': '', 'upload-defer-length': '1' }), 400);
    await json(await fetch(`${base}/api/admin/uploads/00000000-0000-4000-8000-000000000000`, { headers: auth() }), 404);
    await json(await fetch(url, { headers: auth() }), 409);
    await json(
      await fetch(`${base}/api/admin/uploads`, { method: 'POST', headers: { ...TUS, 'upload-length': '1' } }),
      401,
    );
    // A cookie-authenticated write from another site's page is refused (the cross-origin guard).
    const crossSite = await fetch(`${base}/api/admin/uploads`, {
      method: 'POST',
      headers: { cookie: t.cookie, origin: 'https://evil.example', ...TUS, 'upload-length': '1' },
    });
    await json(crossSite, 403);
  });

  it('termination: DELETE cancels an upload and leaves nothing behind (on S3, its multipart upload is aborted)', async () => {
    const data = bytes(400_000, 9);
    const url = await tusUpload(base, token, data, 'cancel.bin', { chunkSize: 100_000, stopAfter: 100_000 });
    const id = url.split('/').pop() ?? '';
    const before = await kept(id);
    expect(before).not.toEqual([]);
    expect(before.includes(id + MULTIPART)).toBe(storeName === 'S3');
    const res = await fetch(url, { method: 'DELETE', headers: { ...auth(), ...TUS } });
    expect(res.status).toBe(204);
    expect(await kept(id)).toEqual([]);
    const head = await fetch(url, { method: 'HEAD', headers: { ...auth(), ...TUS } });
    expect(head.status).toBe(404);
  });

  it('expiry: an unfinished upload older than UPLOAD_EXPIRY_HOURS (24) is deleted with its bytes (on S3, its multipart upload aborted), a young one kept', async () => {
    const created = await create(300_000, 'old.bin');
    expect(created.status).toBe(201);
    expect(Date.parse(created.headers.get('upload-expires') ?? '') - Date.now()).toBeGreaterThan(23.9 * 3600_000);
    const url = new URL(created.headers.get('location') ?? '', base).href;
    const id = url.split('/').pop() ?? '';
    const res = await fetch(url, {
      method: 'PATCH',
      headers: { ...auth(), ...TUS, 'upload-offset': '0', 'content-type': 'application/offset+octet-stream' },
      body: new Uint8Array(bytes(100_000)),
    });
    expect(res.status).toBe(204);
    expect((await kept(id)).includes(id + MULTIPART)).toBe(storeName === 'S3');
    setClock(() => Date.now() + 23 * 3600_000);
    await t.app.ctx.resumable.expire();
    expect(await offsetOf(url)).toBe(100_000);
    setClock(() => Date.now() + 24 * 3600_000 + 60_000);
    expect(await t.app.ctx.resumable.expire()).toBeGreaterThanOrEqual(1);
    expect(await kept(id)).toEqual([]);
    const head = await fetch(url, { method: 'HEAD', headers: { ...auth(), ...TUS } });
    expect(head.status).toBe(404);
    const answer = await fetch(url, { headers: auth() });
    expect(answer.status).toBe(404);
    expect(await answer.json()).toEqual({ error: expect.stringMatching(/expired|cancelled/) });
  });

  it('expiry also removes what a creation stopped half-way left (bytes without a record; on S3 a multipart upload with a part), once old', async () => {
    const id = randomUUID();
    await store.orphan(storeDir(), id);
    expect(await kept(id)).toEqual([storeName === 'S3' ? id + MULTIPART : id]);
    // Young, it may be a creation under way: kept.
    await t.app.ctx.resumable.expire();
    expect(await kept(id)).not.toEqual([]);
    setClock(() => Date.now() + 24 * 3600_000 + 60_000);
    expect(await t.app.ctx.resumable.expire()).toBeGreaterThanOrEqual(1);
    expect(await kept(id)).toEqual([]);
  });

  it('storing a finished upload fails: PATCH and GET answer {error} (GET 503), the bytes stay; GET stores it once the store works, on any instance', async () => {
    const data = bytes(300_000, 13);
    const created = await create(data.length, 'unlucky.bin');
    const url = new URL(created.headers.get('location') ?? '', base).href;
    const id = url.split('/').pop() ?? '';
    const repair = store.breakStore(storeDir());
    try {
      const patch = await fetch(url, {
        method: 'PATCH',
        headers: { ...auth(), ...TUS, 'upload-offset': '0', 'content-type': 'application/offset+octet-stream' },
        body: new Uint8Array(data),
      });
      expect(patch.status).toBe(500);
      expect(await patch.json()).toEqual({ error: expect.any(String) });
      // Every byte is in: a client that asks for the offset is done, and asks for the stored file.
      expect(await offsetOf(url)).toBe(data.length);
      for (let i = 0; i < 2; i += 1) {
        const failed = await fetch(url, { headers: auth() });
        expect(failed.status).toBe(503);
        expect(failed.headers.get('retry-after')).toBe('10');
        expect(await failed.json()).toEqual({ error: expect.stringMatching(/bytes are kept: try again/) });
      }
      expect(await kept(id)).not.toEqual([]);
    } finally {
      repair();
    }
    // The store works again. Asked of this instance and at once of a new one (as after a restart,
    // nothing of the upload in memory), which race to store it: each stores it or, having read it
    // while the other was at it, answers 503; asked again, both answer the one stored file.
    let stored: { filePath: string } = { filePath: '' };
    await secondInstance(async (other) => {
      const urls = [url, url.replace(base, other)];
      const raced = await Promise.all(urls.map((at) => fetch(at, { headers: auth() })));
      expect(raced.map((res) => res.status)).toEqual([expect.toBeOneOf([200, 503]), expect.toBeOneOf([200, 503])]);
      const answers = await Promise.all(urls.map((at) => fetch(at, { headers: auth() })));
      expect(answers.map((res) => res.status)).toEqual([200, 200]);
      const [one, two] = await Promise.all(answers.map(async (res) => (await res.json()) as { filePath: string }));
      expect(two).toEqual(one);
      stored = one ?? stored;
    });
    expect(stored).toEqual({
      filePath: expect.stringMatching(new RegExp(`^/uploads/\\d{4}-\\d{2}/${id}-unlucky\\.bin$`)),
      originalName: 'unlucky.bin',
      size: data.length,
      sha256: sha256(data),
    });
    expect((await t.inject(stored.filePath)).rawPayload.equals(data)).toBe(true);
    expect(await kept(id)).toEqual([]);
    const again = await fetch(url, { headers: auth() });
    expect(await again.json()).toEqual(stored);
  });
});

describe('a 2 GiB resumable upload', () => {
  it.runIf(process.env.TEST_ENGINE !== 'postgres')(
    'streams through with flat memory',
    async () => {
      const t = await buildTestApp({});
      try {
        const base = await listen(t);
        const token = await apiToken(t);
        const SIZE = 2 * 1024 ** 3;
        const block = bytes(1024 * 1024, 11);
        const hash = createHash('sha256');
        let produced = 0;
        const source = new Readable({
          read() {
            if (produced >= SIZE) return void this.push(null);
            const chunk = Buffer.from(block);
            chunk.writeUInt32BE(produced / block.length, 0);
            produced += chunk.length;
            hash.update(chunk);
            this.push(chunk);
          },
        });
        global.gc?.();
        const before = process.memoryUsage();
        let peak = before.rss;
        const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
        const started = Date.now();
        const url = await tusUpload(base, token, source, 'big.bin', { chunkSize: 16 * 1024 * 1024, size: SIZE });
        const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
        clearInterval(sampler);
        const body = (await res.json()) as { size: number; sha256: string };
        expect(body).toMatchObject({ size: SIZE, sha256: hash.digest('hex') });
        // The client (in this process) holds a 16 MiB chunk; the service streams: far below the file's 2 GiB.
        const growth = peak - before.rss;
        console.log(`2 GiB upload: ${Date.now() - started} ms, RSS growth ${(growth / 1024 ** 2).toFixed(0)} MiB`);
        expect(growth).toBeLessThan(256 * 1024 ** 2);
      } finally {
        await t.close();
      }
    },
    600_000,
  );
});
