/**
 * Where unfinished uploads are remembered between runs: a small JSON file mapping a file's identity
 * (server, size and SHA-256) to its upload URL, used as tus-js-client's URL storage.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { PreviousUpload, UrlStorage } from 'tus-js-client';

/** `$LAUNCHER_PUBLISH_STATE`, else `$XDG_STATE_HOME/launcher-publish/uploads.json` (`~/.local/state/…`). */
export function stateFile(env: NodeJS.ProcessEnv): string {
  if (env.LAUNCHER_PUBLISH_STATE) return path.resolve(env.LAUNCHER_PUBLISH_STATE);
  const base = env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state');
  return path.join(base, 'launcher-publish', 'uploads.json');
}

type Entries = Record<string, PreviousUpload>;

export class FileUrlStorage implements UrlStorage {
  constructor(readonly file: string) {}

  private read(): Entries {
    try {
      return JSON.parse(fs.readFileSync(this.file, 'utf8')) as Entries;
    } catch {
      return {};
    }
  }

  private write(entries: Entries): void {
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    const tmp = `${this.file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify(entries, null, 2) + '\n', { mode: 0o600 });
    fs.renameSync(tmp, this.file);
  }

  async findAllUploads(): Promise<PreviousUpload[]> {
    return Object.entries(this.read()).map(([key, entry]) => ({ ...entry, urlStorageKey: key }));
  }

  async findUploadsByFingerprint(fingerprint: string): Promise<PreviousUpload[]> {
    const entry = this.read()[fingerprint];
    return entry === undefined ? [] : [{ ...entry, urlStorageKey: fingerprint }];
  }

  async removeUpload(urlStorageKey: string): Promise<void> {
    const entries = this.read();
    if (!(urlStorageKey in entries)) return;
    delete entries[urlStorageKey];
    this.write(entries);
  }

  /** One entry per file identity: a new upload of the same file replaces the old one. */
  async addUpload(fingerprint: string, upload: PreviousUpload): Promise<string> {
    const entries = this.read();
    entries[fingerprint] = upload;
    this.write(entries);
    return fingerprint;
  }

  /** The remembered upload URL of a file, if any. */
  urlOf(fingerprint: string): string | null {
    return this.read()[fingerprint]?.uploadUrl ?? null;
  }
}
