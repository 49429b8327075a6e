/**
 * The install lifecycle's memory, kept in the state folder's `lifecycle.json` (replaced atomically,
 * so a kill at any instant leaves the record before or after a change, never half of one):
 *
 * - `installed.full`: the launcher version this device runs, with its verified package file (kept
 *   in downloads for the next delta) when the library installed it;
 * - `installed.patch`: the patch applied on that full version;
 * - `pending.install`: a mandatory update whose installer was started (recorded before it starts);
 *   the next start with its version confirms it;
 * - `pending.patch`: a verified patch waiting for the launcher to apply it at its next start.
 *
 * Also: a package file's extension, starting a verified installer detached, and pruning downloads.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { StateFolder } from '../disk/state.js';

/** A package file this device has (or had) installed or is about to. */
export interface PackageFile {
  /** Null when only the running versionCode is known (`startup` of a version the library did not install). */
  readonly version: string | null;
  readonly versionCode: number;
  /** The verified package file in the state folder's downloads; null when the library did not install it. */
  readonly file: string | null;
  readonly sha256: string | null;
}

/** A verified patch waiting for the launcher: apply it at start, then `markPatchApplied`. */
export interface PendingPatch {
  readonly version: string;
  readonly versionCode: number;
  readonly file: string;
  readonly sha256: string;
}

/** A mandatory update whose installer was started; the next start with `versionCode` confirms it. */
export interface PendingInstall {
  readonly version: string;
  readonly versionCode: number;
  /** The installer started: the verified file (`file`, with its extension). */
  readonly installer: string;
  /** The verified download the installer was made from (kept for the next delta). */
  readonly file: string;
  readonly sha256: string;
  readonly args: readonly string[];
  /** ISO 8601. */
  readonly startedAt: string;
}

export interface LifecycleRecord {
  readonly installed: {
    readonly full: PackageFile | null;
    /** The patch applied on the full version `fullVersionCode`. */
    readonly patch: (PendingPatch & { readonly fullVersionCode: number }) | null;
  };
  readonly pending: { readonly install: PendingInstall | null; readonly patch: PendingPatch | null };
}

const EMPTY: LifecycleRecord = { installed: { full: null, patch: null }, pending: { install: null, patch: null } };
const FILE = 'lifecycle.json';

/** Reads and changes `lifecycle.json`, one change at a time within the process. */
export class Lifecycle {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly state: StateFolder) {}

  async read(): Promise<LifecycleRecord> {
    const kept = await this.state.readJson<Partial<LifecycleRecord>>(FILE, EMPTY);
    return {
      installed: { ...EMPTY.installed, ...kept.installed },
      pending: { ...EMPTY.pending, ...kept.pending },
    };
  }

  /** Applies `change` to the record and writes it (temporary file, then rename); answers the new record. */
  change(change: (record: LifecycleRecord) => LifecycleRecord): Promise<LifecycleRecord> {
    const next = this.queue.then(async () => {
      const record = change(await this.read());
      await this.state.writeJson(FILE, record);
      return record;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }
}

/**
 * The extensions a downloaded package file keeps (an installer needs its own to start, a patch its
 * own to be recognised), spelled as their platforms spell them.
 */
export const PACKAGE_EXTENSIONS = [
  '.exe',
  '.msi',
  '.zip',
  '.7z',
  '.AppImage',
  '.dmg',
  '.pkg',
  '.deb',
  '.rpm',
  '.sh',
  '.tar.gz',
  '.tar.xz',
] as const;

/**
 * The extension of `name` (check-update's signed `latest.fileName`) when it is one of
 * `PACKAGE_EXTENSIONS`, compared without regard to case and spelled as listed; '' for any other
 * name (`.bat`, `.cmd`, `.scr`, none) or none.
 */
export function packageExtension(name: string | null): string {
  const lower = name?.toLowerCase();
  return PACKAGE_EXTENSIONS.find((extension) => lower?.endsWith(extension.toLowerCase()) === true) ?? '';
}

/**
 * Starts `file` detached from this process (it outlives the launcher, which quits next) with `args`,
 * no shell; made executable first where the platform needs it. Resolves once it started.
 */
export async function startDetached(file: string, args: readonly string[]): Promise<number | undefined> {
  if (process.platform !== 'win32') await fs.promises.chmod(file, 0o755);
  const child = spawn(file, args, { detached: true, stdio: 'ignore', cwd: path.dirname(file) });
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', reject);
  });
  child.unref();
  return child.pid;
}

/** How long an abandoned partial download is kept for a later resume. */
export const PART_MAX_AGE_MS = 3 * 24 * 3600 * 1000;

/**
 * Deletes from `dir` (the downloads) every verified download whose folder holds none of `keep`
 * (absolute paths), and partial downloads untouched for `partMaxAgeMs`; answers what it deleted.
 */
export async function pruneDownloads(
  dir: string,
  keep: ReadonlySet<string>,
  partMaxAgeMs = PART_MAX_AGE_MS,
  now = Date.now(),
): Promise<string[]> {
  let entries: fs.Dirent[];
  try {
    entries = await fs.promises.readdir(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  const kept = new Set([...keep].map((file) => path.dirname(path.resolve(file))));
  const removed: string[] = [];
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    let stale = false;
    if (entry.isDirectory() && /^[0-9a-f]{64}$/.test(entry.name)) stale = !kept.has(full);
    else if (/^[0-9a-f]{64}\.part(\.json)?$/.test(entry.name)) {
      const stat = await fs.promises.stat(full).catch(() => null);
      stale = stat !== null && now - stat.mtimeMs > partMaxAgeMs;
    }
    if (!stale) continue;
    await fs.promises.rm(full, { recursive: true, force: true });
    removed.push(entry.name);
  }
  return removed;
}
