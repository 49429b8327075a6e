import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { FileStore } from '@tus/file-store';
import { FileBody } from './file-body.js';
import { RESUMABLE_FOLDER, type ResumableStore } from './resumable.js';
import {
  type ByteRange,
  type FailedDelete,
  isSafeKey,
  type ListedObject,
  type ObjectInfo,
  type Storage,
  type WrittenObject,
} from './storage.js';

/**
 * File system calls a sweep keeps in flight at once (deletes, a listing's lstat): one after another,
 * each waits its turn in libuv's thread pool and the disk's journal; a few at once share both.
 */
const AT_ONCE = 16;

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

export class LocalStorage implements Storage {
  readonly kind = 'local' as const;
  private readonly tmpDir: string;
  /** The root with every link resolved: nothing outside it is ever read, written or deleted. */
  private readonly realRoot: string;
  /** Where `stat` found each answer's file (resolved and checked), for the `read` that follows it. */
  private readonly located = new WeakMap<ObjectInfo, { key: string; file: string }>();

  constructor(private readonly root: string) {
    this.tmpDir = path.join(root, '.tmp');
    fs.mkdirSync(this.tmpDir, { recursive: true });
    this.realRoot = fs.realpathSync(root);
  }

  private resolve(key: string): string {
    if (!isSafeKey(key)) throw new Error(`unsafe storage key: ${key}`);
    return path.join(this.root, ...key.split('/'));
  }

  private isInside(realPath: string): boolean {
    return realPath.startsWith(this.realRoot + path.sep);
  }

  /**
   * Where a key's bytes really are, following links, or null when there is nothing there or when
   * a link leads out of the store (a link to `/etc/passwd` or to the data folder names nothing).
   *
   * Synchronous, like `stat` below: the kernel answers both from its caches in about 2 µs, where each
   * trip through libuv's thread pool cost a download about 20 µs of CPU (wake a thread, hand the
   * answer back to the loop). The bytes themselves are still read off the event loop (`FileBody`).
   */
  private locate(key: string): string | null {
    let real: string;
    try {
      real = fs.realpathSync.native(this.resolve(key));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') return null;
      throw err;
    }
    return this.isInside(real) ? real : null;
  }

  /** The real folder an entry lives in, or null when it is missing or leads out of the store. */
  private async realFolder(entry: string): Promise<string | null> {
    const folder = await fs.promises.realpath(path.dirname(entry)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
      throw err;
    });
    return folder !== null && (folder === this.realRoot || this.isInside(folder)) ? folder : null;
  }

  async write(key: string, source: Readable): Promise<WrittenObject> {
    const entry = this.resolve(key);
    const tmp = path.join(this.tmpDir, randomUUID());
    const counter = hashingCounter();
    try {
      await pipeline(source, counter, fs.createWriteStream(tmp, { flags: 'wx' }));
      await fs.promises.mkdir(path.dirname(entry), { recursive: true });
      const folder = await this.realFolder(entry);
      if (folder === null) throw new Error(`storage folder leads out of the store: ${key}`);
      await fs.promises.rename(tmp, path.join(folder, path.basename(entry)));
    } catch (err) {
      await fs.promises.rm(tmp, { force: true });
      throw err;
    }
    return counter.digest();
  }

  async stat(key: string): Promise<ObjectInfo | null> {
    const file = this.locate(key);
    if (file === null) return null;
    const st = fs.statSync(file, { throwIfNoEntry: false });
    if (st === undefined || !st.isFile()) return null;
    const info = { size: st.size, lastModified: st.mtime };
    this.located.set(info, { key, file });
    return info;
  }

  async read(key: string, range?: ByteRange, checked?: ObjectInfo): Promise<Readable> {
    // Resolving links costs a system call per folder: a download resolves its file once.
    const known = checked === undefined ? undefined : this.located.get(checked);
    const file = known?.key === key ? known.file : this.locate(key);
    if (file === null) throw Object.assign(new Error(`no such object: ${key}`), { code: 'ENOENT' });
    // Opened at once, as `stat` looks up: the kernel answers from its caches (see `locate`).
    const fd = fs.openSync(file, 'r');
    if (range) return new FileBody(fd, range);
    try {
      return new FileBody(fd, { start: 0, end: fs.fstatSync(fd).size - 1 });
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
  }

  localPath(key: string): string | null {
    return this.locate(key);
  }

  async delete(key: string): Promise<void> {
    const failed = await this.deleteMany([key]);
    if (failed[0] !== undefined) throw failed[0].error;
  }

  /** Each entry itself goes (a link, not what it points to), and only from a folder inside the store. */
  async deleteMany(keys: readonly string[]): Promise<FailedDelete[]> {
    const failed: FailedDelete[] = [];
    // Each folder's links resolved once, however many of its files go.
    const folders = new Map<string, Promise<string | null>>();
    let next = 0;
    const deleter = async () => {
      for (let key = keys[next++]; key !== undefined; key = keys[next++]) {
        try {
          const entry = this.resolve(key);
          const parent = path.dirname(entry);
          let folder = folders.get(parent);
          if (folder === undefined) folders.set(parent, (folder = this.realFolder(entry)));
          const real = await folder;
          if (real !== null) await fs.promises.unlink(path.join(real, path.basename(entry)));
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') failed.push({ key, error });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(AT_ONCE, keys.length) }, deleter));
    return failed;
  }

  /**
   * Walks the folders a directory handle at a time (never a whole folder's names at once), skipping
   * entries whose name starts with a dot (`.tmp`, `.tus`) and anything not a plain file (links too);
   * a few files' times asked at once.
   */
  async *list(except?: string): AsyncIterable<ListedObject> {
    const folders: string[] = [''];
    for (let folder = folders.pop(); folder !== undefined; folder = folders.pop()) {
      let files: string[] = [];
      for await (const entry of await fs.promises.opendir(path.join(this.root, ...folder.split('/')))) {
        if (entry.name.startsWith('.')) continue;
        const key = folder === '' ? entry.name : `${folder}/${entry.name}`;
        if (entry.isDirectory()) {
          if (`${key}/` !== except) folders.push(key);
        } else if (entry.isFile() && isSafeKey(key)) {
          files.push(key);
          if (files.length < AT_ONCE) continue;
          yield* this.listed(files);
          files = [];
        }
      }
      yield* this.listed(files);
    }
  }

  /** `keys` with their modification times (asked at once); those gone meanwhile left out. */
  private async *listed(keys: readonly string[]): AsyncIterable<ListedObject> {
    const stats = await Promise.all(
      keys.map((key) => fs.promises.lstat(path.join(this.root, ...key.split('/'))).catch(() => null)),
    );
    for (const [i, stat] of stats.entries()) {
      if (stat !== null) yield { key: keys[i] as string, lastModified: stat.mtime };
    }
  }

  resumable(expiryMs: number): ResumableStore {
    const directory = path.join(this.root, RESUMABLE_FOLDER);
    fs.mkdirSync(directory, { recursive: true });
    const datastore = new FileStore({ directory, expirationPeriodInMilliseconds: expiryMs });
    return {
      datastore,
      idPrefix: '',
      read: async (id) => datastore.read(id),
      // Each upload has its bytes and a `<id>.json` record, made in this order: bytes alone (a creation
      // stopped between the two) or a record alone count as an upload too. A record never changes.
      begunBefore: async (before) => {
        const ids = new Set<string>();
        for (const name of await fs.promises.readdir(directory)) {
          const stat = await fs.promises.stat(path.join(directory, name)).catch(() => null);
          if (stat?.isFile() && stat.mtimeMs < before) ids.add(name.endsWith('.json') ? name.slice(0, -5) : name);
        }
        return [...ids];
      },
      remove: async (id) => {
        await fs.promises.rm(path.join(directory, id), { force: true });
        await fs.promises.rm(path.join(directory, `${id}.json`), { force: true });
      },
    };
  }
}
