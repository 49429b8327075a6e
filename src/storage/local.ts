import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type ByteRange, isSafeKey, type ObjectInfo, type Storage, type WrittenObject } from './storage.js';

/** Passes bytes through while counting and hashing them. */
export function hashingCounter(): Transform & { digest(): WrittenObject } {
  const hash = createHash('sha256');
  let size = 0;
  const transform = new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      hash.update(chunk);
      done(null, chunk);
    },
  });
  return Object.assign(transform, { digest: () => ({ size, sha256: hash.digest('hex') }) });
}

/**
 * Bytes per read of a streamed download. Node's 64 KiB default costs a read and a socket write per
 * 64 KiB; 256 KiB measured 1.2–1.5× the requests per second on 1 MiB files at 32 connections.
 */
export const READ_CHUNK_BYTES = 256 * 1024;

export class LocalStorage implements Storage {
  readonly kind = 'local' as const;
  private readonly tmpDir: string;

  constructor(private readonly root: string) {
    this.tmpDir = path.join(root, '.tmp');
    fs.mkdirSync(this.tmpDir, { recursive: true });
  }

  private resolve(key: string): string {
    if (!isSafeKey(key)) throw new Error(`unsafe storage key: ${key}`);
    return path.join(this.root, ...key.split('/'));
  }

  async write(key: string, source: Readable): Promise<WrittenObject> {
    const target = this.resolve(key);
    const tmp = path.join(this.tmpDir, randomUUID());
    const counter = hashingCounter();
    try {
      await pipeline(source, counter, fs.createWriteStream(tmp, { flags: 'wx' }));
      await fs.promises.mkdir(path.dirname(target), { recursive: true });
      await fs.promises.rename(tmp, target);
    } catch (err) {
      await fs.promises.rm(tmp, { force: true });
      throw err;
    }
    return counter.digest();
  }

  async stat(key: string): Promise<ObjectInfo | null> {
    try {
      const st = await fs.promises.stat(this.resolve(key));
      return st.isFile() ? { size: st.size, lastModified: st.mtime } : null;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async read(key: string, range?: ByteRange): Promise<Readable> {
    const stream = fs.createReadStream(this.resolve(key), {
      highWaterMark: READ_CHUNK_BYTES,
      ...(range ? { start: range.start, end: range.end } : {}),
    });
    await new Promise<void>((resolve, reject) => {
      stream.once('open', () => resolve());
      stream.once('error', reject);
    });
    return stream;
  }

  async delete(key: string): Promise<void> {
    await fs.promises.rm(this.resolve(key), { force: true });
  }
}
