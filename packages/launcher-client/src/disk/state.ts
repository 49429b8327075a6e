/**
 * The client's state folder: the device id, the keys adopted through endorsement, the newest accepted
 * answer's `created` (replay protection), the install lifecycle, the addon manifests and the
 * downloads. Every file is replaced durably (`writeDurably`: written beside, flushed to disk, renamed,
 * the folder flushed), so neither a crash nor a power cut leaves half a file: a reader finds the old
 * file or the new one, and a temporary file a cut left beside it is never read.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { StateError } from '../errors.js';

const DEVICE_ID = /^[\x21-\x7e]{1,128}$/;

/** A warning an operation reports and goes on (a work folder it could not remove): its message and fields. */
export type Warn = (message: string, fields: Record<string, unknown>) => void;

export class StateFolder {
  readonly downloads: string;

  /** `warn` hears the warnings of the operations on this state folder's game (the command prints them). */
  constructor(
    readonly dir: string,
    readonly warn: Warn = () => undefined,
  ) {
    this.downloads = path.join(dir, 'downloads');
  }

  /** The device id, made once (a random UUID) and kept in `device-id`. */
  async deviceId(): Promise<string> {
    const file = path.join(this.dir, 'device-id');
    const kept = await this.readText(file);
    if (kept !== null) {
      const id = kept.trim();
      if (!DEVICE_ID.test(id)) throw new StateError(`${file} does not hold a device id`);
      return id;
    }
    const id = randomUUID();
    await this.writeText(file, `${id}\n`);
    return id;
  }

  /** A JSON file of the folder, or `fallback` when there is none. */
  async readJson<T>(name: string, fallback: T): Promise<T> {
    const file = path.join(this.dir, name);
    const text = await this.readText(file);
    if (text === null) return fallback;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new StateError(`${file} is not valid JSON`);
    }
  }

  async writeJson(name: string, value: unknown): Promise<void> {
    await this.writeText(path.join(this.dir, name), `${JSON.stringify(value, null, 2)}\n`);
  }

  private async readText(file: string): Promise<string | null> {
    try {
      return await fs.readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new StateError(`cannot read ${file}: ${(err as Error).message}`);
    }
  }

  private async writeText(file: string, text: string): Promise<void> {
    try {
      await writeDurably(file, text);
    } catch (err) {
      throw new StateError(`cannot write ${file}: ${(err as Error).message}`);
    }
  }
}

/**
 * Flushes a folder's entries to disk (a file renamed into it, created or deleted there), as SQLite
 * and PostgreSQL do before they trust a rename. Windows cannot open a folder to flush it (NTFS
 * journals its renames): skipped there, as on a file system that cannot flush one (`EINVAL`).
 */
export async function syncFolder(dir: string): Promise<void> {
  if (process.platform === 'win32') return;
  let handle;
  try {
    handle = await fs.open(dir, 'r');
    await handle.sync();
  } catch (err) {
    // EINVAL: a file system that cannot flush a folder; ENOENT: a folder gone since has nothing to flush.
    if (!['EINVAL', 'ENOENT'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
  } finally {
    await handle?.close();
  }
}

/** Flushes a file's bytes to disk (`fsync`): a rename of it is then never found empty after a power cut. */
export async function syncFile(file: string): Promise<void> {
  const handle = await fs.open(file, 'r+');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Makes `dir` (and its parents), flushing the folder that got the first new one. */
async function makeFolder(dir: string): Promise<void> {
  const made = await fs.mkdir(dir, { recursive: true });
  if (made !== undefined) await syncFolder(path.dirname(made));
}

/** `rename(from, to)`, once `from` is on disk, then the folder of `to` flushed: the one way a file of the state folder is replaced. */
export async function renameDurably(from: string, to: string): Promise<void> {
  await syncFile(from);
  await fs.rename(from, to);
  await syncFolder(path.dirname(to));
}

/**
 * Replaces `file` with `data` so that a crash or power cut at any instant leaves the old file or the
 * new one whole: written beside it (`<file>.<pid>.<uuid>.tmp`), flushed, renamed over it, its folder
 * flushed (`renameDurably`). Every file of the state folder is written through here.
 */
export async function writeDurably(file: string, data: string | Uint8Array): Promise<void> {
  const temp = `${file}.${process.pid}.${randomUUID()}.tmp`;
  try {
    await makeFolder(path.dirname(file));
    // Written and flushed through one handle: on Windows a scanner may open each new file at once,
    // refusing a second open of it for writing (the rename is allowed).
    const handle = await fs.open(temp, 'wx');
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temp, file);
    await syncFolder(path.dirname(file));
  } catch (err) {
    await fs.rm(temp, { force: true });
    throw err;
  }
}

/** Deletes `file` (absent is fine) and flushes its folder: a record deleted stays deleted after a power cut. */
export async function removeDurably(file: string): Promise<void> {
  await fs.rm(file, { force: true });
  await syncFolder(path.dirname(file));
}
