import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import * as tus from 'tus-js-client';
import { Upload, type UrlStorage } from 'tus-js-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { setClock } from '../src/domain/clock.js';
import { buildTestApp, type TestApp } from './helpers/app.js';
import { referenceToolWanted } from './helpers/reference-tools.js';
import { apiToken, listen, tusUpload } from './helpers/tus.js';

/**
 * tus 1.0 to the letter (issue 38), as clients nobody here wrote see it: Debian's python3-tuspy and
 * tus-js-client with its own resume logic (a URL storage keyed by the file's fingerprint). Between
 * them and the service a proxy counts the bytes each PATCH carries and the uploads created.
 */

const TUS = { 'tus-resumable': '1.0.0' };
const SIZE = 3 * 1024 * 1024;
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
const run = promisify(execFile);

function bytes(size: number, seed: number): Buffer {
  const data = Buffer.alloc(size);
  for (let i = 0; i < size; i += 1) data[i] = (i * 131 + seed * 17 + (i >> 9)) & 0xff;
  return data;
}

interface Traffic {
  patched: number;
  created: number;
}

/** A proxy in front of `target` counting PATCH body bytes and POSTs (creations): its URL and counts. */
async function countingProxy(target: string): Promise<{ url: string; traffic: Traffic; close(): Promise<void> }> {
  const traffic: Traffic = { patched: 0, created: 0 };
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    if (req.method === 'POST') traffic.created += 1;
    const forward = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forward.on('error', () => res.destroy());
    req.on('data', (chunk: Buffer) => {
      if (req.method === 'PATCH') traffic.patched += chunk.length;
    });
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    traffic,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** tus-js-client's URL storage in a JSON file (its Node build has it; its type declarations do not). */
const { FileUrlStorage } = tus as unknown as { FileUrlStorage: new (file: string) => UrlStorage };

let t: TestApp;
let base: string;
let token: string;
let proxy: Awaited<ReturnType<typeof countingProxy>>;
const auth = () => ({ authorization: `Bearer ${token}` });

beforeAll(async () => {
  t = await buildTestApp({ MAX_UPLOAD_BYTES: String(64 * 1024 * 1024), CORS_ORIGIN: 'https://site.example' });
  base = await listen(t);
  token = await apiToken(t);
  proxy = await countingProxy(base);
});
afterAll(async () => {
  await proxy.close();
  await t.close();
});
afterEach(() => setClock(null));

function reset(): Traffic {
  proxy.traffic.patched = 0;
  proxy.traffic.created = 0;
  return proxy.traffic;
}

describe('a finished upload, as tus 1.0 has it', () => {
  it('HEAD answers 200 with Upload-Offset = Upload-Length; PATCH at that offset without bytes 204; until it expires (410)', async () => {
    const data = bytes(300_000, 1);
    const url = await tusUpload(base, token, data, 'done.bin', { chunkSize: 100_000 });
    for (let i = 0; i < 2; i += 1) {
      const head = await fetch(url, { method: 'HEAD', headers: { ...auth(), ...TUS } });
      expect(head.status).toBe(200);
      expect(head.headers.get('upload-offset')).toBe(String(data.length));
      expect(head.headers.get('upload-length')).toBe(String(data.length));
      expect(head.headers.get('cache-control')).toBe('no-store');
      expect(head.headers.get('tus-resumable')).toBe('1.0.0');
      // GET (the stored file's answer) changes nothing.
      expect((await fetch(url, { headers: auth() })).status).toBe(200);
    }
    const patch = (offset: number, body = '') =>
      fetch(url, {
        method: 'PATCH',
        headers: {
          ...auth(),
          ...TUS,
          'content-type': 'application/offset+octet-stream',
          'upload-offset': String(offset),
        },
        body,
      });
    const empty = await patch(data.length);
    expect(empty.status).toBe(204);
    expect(empty.headers.get('upload-offset')).toBe(String(data.length));
    const wrong = await patch(100);
    expect(wrong.status).toBe(409);
    expect(await wrong.json()).toEqual({ error: expect.stringContaining('complete') });
    const more = await patch(data.length, 'extra');
    expect(more.status).toBe(413);
    expect(await more.json()).toEqual({ error: expect.any(String) });

    const later = Date.now() + 25 * 3600 * 1000;
    setClock(() => later);
    const expired = await fetch(url, { method: 'HEAD', headers: { ...auth(), ...TUS } });
    expect(expired.status).toBe(410);
  });

  it('an unknown upload is still a 404', async () => {
    const res = await fetch(`${base}/api/admin/uploads/00000000-0000-4000-8000-000000000000`, {
      method: 'HEAD',
      headers: { ...auth(), ...TUS },
    });
    expect(res.status).toBe(404);
  });
});

describe('CORS preflight of the creation URL', () => {
  const preflight = (url: string) =>
    fetch(`${base}${url}`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://site.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, tus-resumable, upload-length, upload-metadata',
      },
    });
  const corsHeaders = (res: Response) =>
    Object.fromEntries([...res.headers].filter(([name]) => name.startsWith('access-control-') || name === 'vary'));

  it('answers like every other admin route (no credentials needed), and tus discovery still needs them', async () => {
    const uploads = await preflight('/api/admin/uploads');
    const tokens = await preflight('/api/admin/tokens');
    expect(tokens.status).toBe(204);
    expect(uploads.status).toBe(tokens.status);
    expect(corsHeaders(uploads)).toEqual(corsHeaders(tokens));
    expect(uploads.headers.get('access-control-allow-origin')).toBe('https://site.example');

    const discovery = await fetch(`${base}/api/admin/uploads`, { method: 'OPTIONS', headers: auth() });
    expect(discovery.status).toBe(204);
    expect(discovery.headers.get('tus-version')).toBe('1.0.0');
    expect((await fetch(`${base}/api/admin/uploads`, { method: 'OPTIONS' })).status).toBe(401);
  });
});

describe('tus-js-client, its own resume logic (URL storage by fingerprint)', () => {
  function start(data: Buffer, storage: string, stopAfter?: number): Promise<{ url: string; done: boolean }> {
    return new Promise((resolve, reject) => {
      const upload: Upload = new Upload(data, {
        endpoint: `${proxy.url}/api/admin/uploads`,
        headers: auth(),
        metadata: { filename: 'js-client.bin' },
        chunkSize: 256 * 1024,
        retryDelays: [],
        urlStorage: new FileUrlStorage(storage),
        onChunkComplete: (_chunk, accepted) => {
          if (stopAfter !== undefined && accepted >= stopAfter) {
            void upload.abort().then(() => resolve({ url: upload.url ?? '', done: false }));
          }
        },
        onSuccess: () => resolve({ url: upload.url ?? '', done: true }),
        onError: reject,
      });
      void upload.findPreviousUploads().then((previous) => {
        const [last] = previous;
        if (last !== undefined) upload.resumeFromPreviousUpload(last);
        upload.start();
      }, reject);
    });
  }

  it('an interrupted upload resumes with only the rest; a finished one is never sent again', async () => {
    const data = bytes(SIZE, 2);
    const storage = path.join(t.dir, 'tus-js-urls.json');
    fs.writeFileSync(storage, '{}');
    const traffic = reset();
    const first = await start(data, storage, 1024 * 1024);
    expect(first.done).toBe(false);
    const sentFirst = traffic.patched;
    expect(sentFirst).toBeGreaterThanOrEqual(1024 * 1024);

    const second = await start(data, storage);
    expect(second).toEqual({ url: first.url, done: true });
    expect(traffic.created).toBe(1);
    expect(traffic.patched).toBe(SIZE);

    const third = await start(data, storage);
    expect(third).toEqual({ url: first.url, done: true });
    expect(traffic.created).toBe(1);
    expect(traffic.patched).toBe(SIZE);

    const stored = await fetch(first.url, { headers: auth() });
    expect(await stored.json()).toMatchObject({ size: SIZE, sha256: sha256(data) });
  });
});

// Debian's python3-tuspy: run when Debian's python3 has it, TEST_TUSPY=1 requires it (CI), 0 skips it.
const tuspyWanted = referenceToolWanted(
  'TEST_TUSPY',
  '/usr/bin/python3',
  ['-c', 'import tusclient'],
  'apt-get install python3-tuspy',
);

describe.runIf(tuspyWanted)("Debian's python3-tuspy", () => {
  /** Runs tuspy with a URL storage: uploads the file up to `stopAt` (or whole); prints the URL. */
  async function tuspy(file: string, storage: string, stopAt?: number): Promise<string> {
    const script = [
      'import sys',
      'from tusclient import client',
      'from tusclient.storage import filestorage',
      'c = client.TusClient(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})',
      's = filestorage.FileStorage(sys.argv[4])',
      'u = c.uploader(sys.argv[3], chunk_size=262144, store_url=True, url_storage=s)',
      'u.upload(stop_at=int(sys.argv[5]) if len(sys.argv) > 5 else None)',
      's.close()',
      'print(u.url)',
    ].join('\n');
    const args = [
      `${proxy.url}/api/admin/uploads`,
      token,
      file,
      storage,
      ...(stopAt === undefined ? [] : [String(stopAt)]),
    ];
    const { stdout } = await run('/usr/bin/python3', ['-c', script, ...args]);
    return stdout.trim();
  }

  it('an interrupted upload resumes with only the rest; a finished one is never sent again', async () => {
    const data = bytes(SIZE, 3);
    const file = path.join(t.dir, 'tuspy.bin');
    fs.writeFileSync(file, data);
    const storage = path.join(t.dir, 'tuspy-urls.json');
    const traffic = reset();
    const url = await tuspy(file, storage, 1024 * 1024);
    expect(traffic.patched).toBe(1024 * 1024);
    expect(await tuspy(file, storage)).toBe(url);
    expect(traffic).toEqual({ created: 1, patched: SIZE });
    expect(await tuspy(file, storage)).toBe(url);
    expect(traffic).toEqual({ created: 1, patched: SIZE });

    const stored = await fetch(url.replace(proxy.url, base), { headers: auth() });
    expect(await stored.json()).toMatchObject({ size: SIZE, sha256: sha256(data) });
  });
});
