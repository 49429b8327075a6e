/**
 * The client's state folder: the device id, the keys adopted through endorsement, the newest accepted
 * answer's `created` (replay protection), the install lifecycle, the addon manifests and the
 * downloads. Every file is replaced atomically (written beside, then renamed), so a crash never
 * leaves half a file.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { StateError } from './errors.js';

const DEVICE_ID = /^[\x21-\x7e]{1,128}$/;

export class StateFolder {
  readonly downloads: string;

  constructor(readonly dir: string) {
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
    const temp = `${file}.${process.pid}.${randomUUID()}.tmp`;
    try {
      await fs.mkdir(path.dirname(file), { recursive: true });
      await fs.writeFile(temp, text);
      await fs.rename(temp, file);
    } catch (err) {
      await fs.rm(temp, { force: true });
      throw new StateError(`cannot write ${file}: ${(err as Error).message}`);
    }
  }
}
