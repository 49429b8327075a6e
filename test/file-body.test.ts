import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { PassThrough } from 'node:stream';
import { text } from 'node:stream/consumers';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pooledBuffers } from '../src/storage/file-body.js';
import { LocalStorage } from '../src/storage/local.js';
import { buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** Every byte of a GET over a real socket; a slow reader pauses after each chunk. */
function download(url: string, options: { slow?: boolean; range?: string } = {}) {
  return new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
    const req = http.get(url, { headers: options.range ? { range: options.range } : {} }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        if (options.slow) {
          res.pause();
          setTimeout(() => res.resume(), 2);
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

/** How many descriptors of this process have files of `folder` open. */
function openFilesIn(folder: string): number {
  return fs.readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(folder);
    } catch {
      return false; // closed meanwhile
    }
  }).length;
}

/**
 * How many files of `folder` are open once those closing have closed (they close moments after
 * their answer's last byte, asynchronously): waits up to 5 s for none, calling `step` between looks.
 */
async function openFilesSettled(folder: string, step: () => void = () => undefined): Promise<number> {
  const deadline = Date.now() + 5000;
  while (openFilesIn(folder) > 0 && Date.now() < deadline) {
    step();
    await new Promise((r) => setTimeout(r, 10));
  }
  return openFilesIn(folder);
}

describe('downloads through recycled read buffers (src/storage/file-body.ts)', () => {
  let t: TestApp;
  let base: string;
  const files: Array<{ content: Buffer; versionId: string }> = [];

  beforeAll(async () => {
    t = await buildTestApp();
    const pkg = await createPackage(t, { slug: 'pooled', name: '缓冲' });
    // Sizes that are not multiples of the 256 KiB read: every download ends on a short chunk.
    for (const [i, size] of [3 * 1024 * 1024 + 17, 1024 * 1024 + 5, 700_001].entries()) {
      const content = randomBytes(size);
      const file = await upload(t, `pooled-${i}.bin`, content);
      const version = await createVersion(t, pkg.id, { version: `${i}`, versionCode: i + 1, filePath: file.filePath });
      files.push({ content, versionId: version.id });
    }
    await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(t.app.server.server.address() as AddressInfo).port}`;
  });
  afterAll(() => t.close());

  it('sends every byte right to many concurrent fast and slow readers, and reuses its buffers', async () => {
    const runs = Array.from({ length: 24 }, (_, i) => {
      const file = files[i % files.length]!;
      return download(`${base}/api/software/download/${file.versionId}`, { slow: i % 3 === 0 }).then((answer) => ({
        answer,
        file,
      }));
    });
    for (const { answer, file } of await Promise.all(runs)) {
      expect(answer.status).toBe(200);
      expect(answer.body.length).toBe(file.content.length);
      expect(sha256(answer.body)).toBe(sha256(file.content));
    }
    // The buffers came back once written, bounded in number.
    expect(pooledBuffers()).toBeGreaterThan(0);
    expect(pooledBuffers()).toBeLessThanOrEqual(64);
  });

  it('sends ranges exactly, across chunk boundaries', async () => {
    const file = files[0]!;
    const chunk = 256 * 1024;
    for (const [start, end] of [
      [0, 0],
      [chunk - 1, chunk],
      [chunk + 3, 3 * chunk + 10],
      [file.content.length - 5, file.content.length - 1],
    ] as const) {
      const answer = await download(`${base}/api/software/download/${file.versionId}`, {
        range: `bytes=${start}-${end}`,
      });
      expect(answer.status).toBe(206);
      expect(answer.body.equals(file.content.subarray(start, end + 1))).toBe(true);
    }
  });

  it('closes the file of every download a client abandons', async () => {
    const store = fs.realpathSync(path.join(t.dir, 'uploads'));
    // The files of earlier tests' answers may still be closing.
    expect(await openFilesSettled(store)).toBe(0);
    const file = files[0]!;
    await Promise.all(
      Array.from(
        { length: 20 },
        () =>
          new Promise<void>((resolve, reject) => {
            const req = http.get(`${base}/api/software/download/${file.versionId}`, (res) => {
              res.once('data', () => {
                req.destroy();
                resolve();
              });
            });
            req.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve() : reject(err)));
          }),
      ),
    );
    // The server notices each closed socket and closes the file within moments.
    expect(await openFilesSettled(store)).toBe(0);
    // And keeps serving.
    const after = await download(`${base}/api/software/download/${file.versionId}`);
    expect(sha256(after.body)).toBe(sha256(file.content));
  });
});

describe("a stored file's stream used directly", () => {
  let dir: string;
  let storage: LocalStorage;
  const content = Buffer.from(randomBytes(600_000));

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-file-body-'));
    storage = new LocalStorage(dir);
    await storage.write('a/file.bin', PassThrough.from([content]));
    await storage.write('a/empty.txt', PassThrough.from([]));
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('streams the whole file or a range to any writable, in fresh chunks', async () => {
    const chunks: Buffer[] = [];
    for await (const chunk of await storage.read('a/file.bin')) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(content)).toBe(true);
    // Chunks kept by a consumer stay what they were (no buffer is reused under it).
    expect(new Set(chunks.map((c) => c.buffer)).size).toBe(chunks.length);

    const copy = new PassThrough();
    const collected: Buffer[] = [];
    copy.on('data', (c: Buffer) => collected.push(c));
    await pipeline(await storage.read('a/file.bin', { start: 100, end: 300_099 }), copy);
    expect(Buffer.concat(collected).equals(content.subarray(100, 300_100))).toBe(true);

    expect(await text(await storage.read('a/empty.txt'))).toBe('');
  });

  it('cuts an HTTP answer off when the stream is destroyed midway, rather than ending it short', async () => {
    const server = http.createServer((_req, res) => {
      void storage.read('a/file.bin').then((body) => {
        res.setHeader('content-length', content.length);
        body.pipe(res);
        setImmediate(() => body.destroy());
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const outcome = await new Promise<string>((resolve) => {
        const timer = setTimeout(() => resolve('left waiting'), 3000);
        const settle = (how: string) => {
          clearTimeout(timer);
          resolve(how);
        };
        http
          .get(`http://127.0.0.1:${port}/`, (res) => {
            res.on('data', () => undefined);
            res.on('end', () => settle(res.complete ? 'complete' : 'cut off'));
            res.on('error', () => settle('cut off'));
            res.on('aborted', () => settle('cut off'));
          })
          .on('error', () => settle('cut off'));
      });
      expect(outcome).toBe('cut off');
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('closes its file when read to the end, when destroyed unread, and when dropped unread', async () => {
    const store = fs.realpathSync(dir);
    expect(await openFilesSettled(store)).toBe(0);

    await text(await storage.read('a/file.bin'));
    expect(await openFilesSettled(store)).toBe(0);

    const unread = await storage.read('a/file.bin');
    expect(openFilesIn(store)).toBe(1);
    unread.destroy();
    expect(await openFilesSettled(store)).toBe(0);

    // A body nobody ends or destroys (an error on a path that never sends it) is closed once collected.
    const drop = async () => {
      expect(await storage.read('a/file.bin')).toBeDefined();
      expect(openFilesIn(store)).toBe(1);
    };
    await drop();
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    expect(await openFilesSettled(store, gc)).toBe(0);
  });

  it('fails a read whose file is shorter than the range it was opened for', async () => {
    const stream = await storage.read('a/file.bin', { start: 0, end: content.length + 1000 });
    await expect(text(stream)).rejects.toThrow(/ended before the range/);
  });
});
