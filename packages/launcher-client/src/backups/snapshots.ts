/**
 * Settings snapshots: copies of `GAME/WTF` (key bindings, macros, SavedVariables: what a player
 * cannot download again), optionally with `Interface/AddOns` and the addon manifests, kept in the
 * state folder as `backups/<id>.zip`, each with `backups/<id>.json` (its summary and the SHA-256 of
 * every file), listed in `backups/index.json`.
 *
 * - `snapshotBeforeChange` is what every change of the game folder calls first (the `AddonManager`
 *   before an install, update or remove; a game updater before an update or repair): it takes an
 *   automatic snapshot only when `WTF` changed since the newest snapshot of the same scope (a
 *   fingerprint of its names, sizes and modification times), and keeps the newest `keep` automatic
 *   ones. Manual snapshots (`createSnapshot`) are never pruned.
 * - A zip is written under the rules the addon extractor enforces (`disk/archive.ts`): every name a safe
 *   segment on every system, no two differing only by case, within the default limits; so a
 *   snapshot is always restorable by this client.
 * - `restoreSnapshot` extracts beside `WTF` (same file system), checks every file against the hashes
 *   its index recorded (a zip edited by hand is refused, `ArchiveError`, nothing changed), keeps the
 *   current `WTF` as a new automatic snapshot, then swaps the folders in whole. The swap is journalled
 *   (`backups-restore.json`) as the addon swap is: a process killed midway is rolled back, or once
 *   the swap completed finished, by the next snapshot operation (`recoverRestore`).
 * - On a player's real machine (`disk/guard.ts`): every function here that writes holds the state folder's
 *   lock (a call inside a game or addon operation runs under the lock its operation holds); a restore
 *   checks `WTF` (and with addons `Interface/AddOns`) before its first write: a link or a mount point
 *   there, or a mount point inside what it replaces, is `UnsafePathError`; its renames and deletes in
 *   the game folder go through the guard, flushed before the journal says `done`. Before its first
 *   write a restore also checks that no other process holds what it replaces (`WTF` or a file in it
 *   while the game runs: `InUseError`, nothing restored, nothing left behind); a work folder it
 *   cannot remove afterwards is a warning, removed by the next snapshot operation. A snapshot only
 *   reads `WTF`, through a link too (a `WTF` kept elsewhere and linked is the player's choice). The
 *   zip and every record are written durably.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import yazl from 'yazl';
import { badSegment, DEFAULT_ARCHIVE_LIMITS, extractArchive } from '../disk/archive.js';
import { ArchiveError, NotFoundError, StateError, UsageError } from '../errors.js';
import { FolderGuard, withLock } from '../disk/guard.js';
import { removeDurably, renameDurably, type StateFolder } from '../disk/state.js';

/** Why a snapshot was taken: by hand, or before which change. */
export type BackupReason =
  'manual' | 'addons-install' | 'addons-update' | 'addons-remove' | 'game-update' | 'game-repair' | 'restore';

/** Why an automatic snapshot was taken. */
export type AutomaticReason = Exclude<BackupReason, 'manual'>;

/** A snapshot as `backup list` shows it. */
export interface BackupSummary {
  readonly id: string;
  readonly createdAt: string;
  readonly reason: BackupReason;
  readonly label: string | null;
  /** Files in the snapshot. */
  readonly files: number;
  /** Their bytes, unpacked. */
  readonly bytes: number;
  /** Whether it holds `Interface/AddOns` and the addon manifests too. */
  readonly withAddons: boolean;
}

/** What `backups/index.json` keeps of a snapshot: its summary and the fingerprint of what it copied. */
interface IndexEntry extends BackupSummary {
  readonly fingerprint: string;
}

/** `backups/<id>.json`: the summary and each file's SHA-256, by its path in the zip. */
interface SnapshotRecord extends IndexEntry {
  readonly hashes: Record<string, string>;
}

/** A restore's work folder in the game folder: this, then a random suffix. */
const WORK_PREFIX = '.patchwell-restore-';

/** A restore under way (`backups-restore.json`). */
interface RestoreRecord {
  readonly id: string;
  readonly game: string;
  /** The extraction folder, beside `WTF`. */
  readonly work: string;
  /** `staging`: extracting and checking; `swapping`: renaming; `done`: only work folders are left. */
  readonly phase: 'staging' | 'swapping' | 'done';
  /** Each folder swapped: the live one, its replacement staged beside it, where the live one goes. */
  readonly parts: readonly { live: string; staged: string; aside: string }[];
}

export interface SnapshotOptions {
  readonly label?: string;
  /** Also `Interface/AddOns` and the addon manifests. */
  readonly withAddons?: boolean;
}

/** How many automatic snapshots are kept by default. */
export const DEFAULT_KEEP = 20;
const DIR = 'backups';
const INDEX = `${DIR}/index.json`;
const JOURNAL = 'backups-restore.json';
const ID = /^\d{8}T\d{9}Z-[0-9a-f]{8}$/;
/**
 * Files from this size are deflated, smaller ones stored: yazl deflates each entry as its own zlib
 * job, which for thousands of small files costs seconds and saves little.
 */
const COMPRESS_FROM = 64 * 1024;
/** Top-level folders of a snapshot zip. */
const WTF = 'WTF';
const ADDONS = 'Interface';
const MANIFESTS = 'addons';

interface FoundFile {
  /** `/`-separated, under the zip's top-level folder. */
  readonly name: string;
  readonly file: string;
  readonly size: number;
  readonly mtimeMs: number;
}

interface Scope {
  /** The files, sorted by name, and the folders without files (to keep them). */
  readonly files: FoundFile[];
  readonly emptyFolders: string[];
  readonly fingerprint: string;
}

async function isMissing(file: string): Promise<boolean> {
  try {
    await fs.promises.lstat(file);
    return false;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw err;
  }
}

/** Every file under `dir` (none when it does not exist), named `<prefix>/<relative path>`. */
async function walk(dir: string, prefix: string, files: FoundFile[], emptyFolders: string[]): Promise<void> {
  let entries: fs.Dirent[];
  try {
    entries = await fs.promises.readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if (entries.length === 0) emptyFolders.push(prefix);
  // A folder's entries at once: thousands of files are stat'ed in a few milliseconds.
  await Promise.all(
    entries.map(async (entry) => {
      const why = badSegment(entry.name);
      const name = `${prefix}/${entry.name}`;
      if (why !== null) throw new ArchiveError(`${name} cannot be kept in a snapshot: it has ${why}`);
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(file, name, files, emptyFolders);
      else if (entry.isFile()) {
        const stat = await fs.promises.stat(file);
        files.push({ name, file, size: stat.size, mtimeMs: stat.mtimeMs });
      } else throw new ArchiveError(`${name} cannot be kept in a snapshot: it is not a file or folder`);
    }),
  );
}

/** What a snapshot of this scope copies, and its fingerprint (names, sizes, modification times). */
async function scopeOf(state: StateFolder, game: string, withAddons: boolean): Promise<Scope> {
  const files: FoundFile[] = [];
  const emptyFolders: string[] = [];
  await walk(path.join(game, WTF), WTF, files, emptyFolders);
  if (withAddons) {
    await walk(path.join(game, ADDONS, 'AddOns'), `${ADDONS}/AddOns`, files, emptyFolders);
    await walk(path.join(state.dir, MANIFESTS), MANIFESTS, files, emptyFolders);
  }
  files.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const seen = new Set<string>();
  const hash = createHash('sha256').update(withAddons ? 'with-addons\n' : 'wtf\n');
  for (const f of files) {
    const key = f.name.normalize('NFC').toLowerCase();
    if (seen.has(key))
      throw new ArchiveError(`${f.name} cannot be kept in a snapshot: another name differs only by case`);
    seen.add(key);
    hash.update(`${f.name}\0${f.size}\0${f.mtimeMs}\n`);
  }
  emptyFolders.sort();
  for (const folder of emptyFolders) hash.update(`${folder}/\n`);
  const limits = DEFAULT_ARCHIVE_LIMITS;
  const bytes = files.reduce((sum, f) => sum + f.size, 0);
  if (files.length + emptyFolders.length > limits.maxEntries || bytes > limits.maxTotalBytes) {
    throw new ArchiveError(`a snapshot of ${files.length} files (${bytes} bytes) would exceed the archive limits`);
  }
  return { files, emptyFolders, fingerprint: hash.digest('hex') };
}

async function readIndex(state: StateFolder): Promise<IndexEntry[]> {
  const index = await state.readJson<{ backups?: unknown }>(INDEX, { backups: [] });
  if (!Array.isArray(index.backups)) throw new StateError(`${path.join(state.dir, INDEX)} is not a snapshot index`);
  return index.backups as IndexEntry[];
}

function writeIndex(state: StateFolder, entries: readonly IndexEntry[]): Promise<void> {
  return state.writeJson(INDEX, { backups: entries });
}

const summary = ({ id, createdAt, reason, label, files, bytes, withAddons }: IndexEntry): BackupSummary => ({
  id,
  createdAt,
  reason,
  label,
  files,
  bytes,
  withAddons,
});

function checkId(id: string): void {
  if (!ID.test(id)) throw new UsageError(`${JSON.stringify(id)} is not a snapshot id`);
}

async function deleteSnapshot(state: StateFolder, id: string): Promise<void> {
  for (const ext of ['zip', 'json']) await fs.promises.rm(path.join(state.dir, DIR, `${id}.${ext}`), { force: true });
}

/** Writes the zip of `scope` and its record, then lists it in the index (newest first). */
async function takeSnapshot(
  state: StateFolder,
  scope: Scope,
  reason: BackupReason,
  options: SnapshotOptions,
): Promise<IndexEntry> {
  const now = new Date();
  const id = `${now.toISOString().replace(/[-:.]/g, '')}-${randomBytes(4).toString('hex')}`;
  const zip = new yazl.ZipFile();
  const hashes: Record<string, string> = {};
  // Read 64 files at a time: thousands of small settings files are read in a fraction of the time.
  for (let at = 0; at < scope.files.length; at += 64) {
    const batch = scope.files.slice(at, at + 64);
    const read = await Promise.all(batch.map((f) => fs.promises.readFile(f.file)));
    batch.forEach((f, k) => {
      const data = read[k]!;
      hashes[f.name] = createHash('sha256').update(data).digest('hex');
      zip.addBuffer(data, f.name, { mtime: new Date(f.mtimeMs), compress: data.length >= COMPRESS_FROM });
    });
  }
  for (const folder of scope.emptyFolders) zip.addEmptyDirectory(folder);
  const dir = path.join(state.dir, DIR);
  await fs.promises.mkdir(dir, { recursive: true });
  const temp = path.join(dir, `${id}.zip.tmp`);
  zip.end();
  try {
    await pipeline(zip.outputStream, fs.createWriteStream(temp, { flags: 'wx' }));
    await renameDurably(temp, path.join(dir, `${id}.zip`));
  } finally {
    await fs.promises.rm(temp, { force: true });
  }
  const entry: IndexEntry = {
    id,
    createdAt: now.toISOString(),
    reason,
    label: options.label ?? null,
    files: scope.files.length,
    bytes: scope.files.reduce((sum, f) => sum + f.size, 0),
    withAddons: options.withAddons === true,
    fingerprint: scope.fingerprint,
  };
  await state.writeJson(`${DIR}/${id}.json`, { ...entry, hashes } satisfies SnapshotRecord);
  await writeIndex(state, [entry, ...(await readIndex(state))]);
  return entry;
}

/** The snapshots, newest first. */
export async function listSnapshots(state: StateFolder): Promise<BackupSummary[]> {
  return (await readIndex(state)).map(summary);
}

/** A manual snapshot (never pruned), taken whether or not anything changed. */
export async function createSnapshot(
  state: StateFolder,
  gameDir: string,
  options: SnapshotOptions = {},
): Promise<BackupSummary> {
  return withLock(state.dir, 'backup-create', async () => {
    const game = path.resolve(gameDir);
    await recoverRestore(state, game);
    if (await isMissing(path.join(game, WTF))) throw new NotFoundError(`there is no ${path.join(game, WTF)}`);
    const scope = await scopeOf(state, game, options.withAddons === true);
    return summary(await takeSnapshot(state, scope, 'manual', options));
  });
}

/**
 * Call before any change of the game folder (an addon install, update or remove; a game update or
 * repair; a restore): snapshots `GAME/WTF` (with `withAddons`, also `Interface/AddOns` and the addon
 * manifests) as an automatic snapshot of `reason`, unless it is unchanged since the newest snapshot
 * of the same scope (names, sizes and modification times), and then keeps only the newest `keep`
 * automatic snapshots (manual ones are never pruned). Finishes or rolls back a restore a killed
 * process left first. Answers the new snapshot, or null when none was needed (nothing changed, or
 * there is no `WTF`).
 */
export async function snapshotBeforeChange(
  state: StateFolder,
  gameDir: string,
  reason: AutomaticReason,
  keep: number = DEFAULT_KEEP,
  options: Pick<SnapshotOptions, 'withAddons'> = {},
): Promise<BackupSummary | null> {
  if (!Number.isSafeInteger(keep) || keep < 1) throw new UsageError('--keep must be a positive integer');
  return withLock(state.dir, 'backup-automatic', async () => {
    const game = path.resolve(gameDir);
    await recoverRestore(state, game);
    return autoSnapshot(state, game, reason, keep, options.withAddons === true);
  });
}

/** `snapshotBeforeChange` once no restore is left to recover. */
async function autoSnapshot(
  state: StateFolder,
  game: string,
  reason: AutomaticReason,
  keep: number,
  withAddons: boolean,
): Promise<BackupSummary | null> {
  if (await isMissing(path.join(game, WTF))) return null;
  const scope = await scopeOf(state, game, withAddons);
  const index = await readIndex(state);
  const newest = index.find((e) => e.withAddons === withAddons);
  if (newest?.fingerprint === scope.fingerprint) return null;
  const taken = await takeSnapshot(state, scope, reason, { withAddons });
  const all = await readIndex(state);
  const automatic = all.filter((e) => e.reason !== 'manual');
  const pruned = new Set(automatic.slice(keep).map((e) => e.id));
  if (pruned.size > 0) {
    await writeIndex(
      state,
      all.filter((e) => !pruned.has(e.id)),
    );
    for (const id of pruned) await deleteSnapshot(state, id);
  }
  return summary(taken);
}

/** Deletes a snapshot (manual or automatic). */
export async function removeSnapshot(state: StateFolder, id: string): Promise<void> {
  checkId(id);
  await withLock(state.dir, 'backup-remove', async () => {
    const index = await readIndex(state);
    if (!index.some((e) => e.id === id)) throw new NotFoundError(`there is no snapshot ${id}`);
    await writeIndex(
      state,
      index.filter((e) => e.id !== id),
    );
    await deleteSnapshot(state, id);
  });
}

/**
 * Puts snapshot `id` back: extracted beside `WTF`, every file checked against its recorded SHA-256
 * (a missing, changed or extra file is an `ArchiveError` and nothing changes), the current state kept
 * as an automatic snapshot, then the folders swapped in whole (a snapshot with addons also replaces
 * `Interface/AddOns` and the addon manifests).
 */
export async function restoreSnapshot(
  state: StateFolder,
  gameDir: string,
  id: string,
  keep: number = DEFAULT_KEEP,
): Promise<void> {
  checkId(id);
  await withLock(state.dir, 'backup-restore', () => restoreLocked(state, path.resolve(gameDir), id, keep));
}

async function restoreLocked(state: StateFolder, game: string, id: string, keep: number): Promise<void> {
  await recoverRestore(state, game);
  const entry = (await readIndex(state)).find((e) => e.id === id);
  if (entry === undefined) throw new NotFoundError(`there is no snapshot ${id}`);
  if (entry.withAddons && !(await isMissing(path.join(state.dir, 'addons-operation.json')))) {
    throw new StateError('an addon change was interrupted: run an addons command first, then restore');
  }
  const record = await state.readJson<SnapshotRecord | null>(`${DIR}/${id}.json`, null);
  if (record?.hashes === undefined || record.hashes === null) throw new StateError(`${DIR}/${id}.json is missing`);
  const work = path.join(game, `${WORK_PREFIX}${randomBytes(4).toString('hex')}`);
  const parts = [{ live: path.join(game, WTF), staged: path.join(work, WTF), aside: path.join(work, 'old', WTF) }];
  if (entry.withAddons) {
    const live = path.join(game, ADDONS, 'AddOns');
    parts.push({ live, staged: path.join(work, ADDONS, 'AddOns'), aside: path.join(work, 'old', 'AddOns') });
    const manifests = path.join(state.dir, MANIFESTS);
    const manifestWork = path.join(state.dir, DIR, `restore-${path.basename(work)}`);
    parts.push({ live: manifests, staged: path.join(manifestWork, 'new'), aside: path.join(manifestWork, 'old') });
  }
  // What is replaced (and then deleted) is no link, holds no mount point and is not held by another
  // process (the game): checked before the first write.
  const guard = new FolderGuard(game, state.warn);
  guard.check(work, 'folder');
  const inGame = parts.filter((part) => part.live.startsWith(game + path.sep)).map((part) => part.live);
  for (const live of inGame) await guard.checkTree(live);
  await guard.replaceable(inGame);
  const journal: RestoreRecord = { id, game, work, phase: 'staging', parts };
  await state.writeJson(JOURNAL, journal);
  try {
    const extracted = await extractArchive(path.join(state.dir, DIR, `${id}.zip`), work);
    await checkExtracted(work, extracted.folders, extracted.files, record.hashes);
    for (const part of parts) {
      await fs.promises.mkdir(path.dirname(part.aside), { recursive: true });
      if (!part.staged.startsWith(work + path.sep)) {
        // The manifests live in the state folder, perhaps on another file system: copied beside them.
        if (extracted.folders.includes(MANIFESTS)) {
          await fs.promises.cp(path.join(work, MANIFESTS), part.staged, { recursive: true });
        }
      }
      await fs.promises.mkdir(part.staged, { recursive: true });
    }
    await autoSnapshot(state, game, 'restore', keep, entry.withAddons);
  } catch (err) {
    await rollback(state, journal);
    throw err;
  }
  await swap(state, { ...journal, phase: 'swapping' });
}

/** The extracted snapshot holds exactly the files its record lists, each with its recorded SHA-256. */
async function checkExtracted(
  work: string,
  folders: readonly string[],
  files: readonly string[],
  hashes: Readonly<Record<string, string>>,
): Promise<void> {
  const outside = folders.find((f) => f !== WTF && f !== ADDONS && f !== MANIFESTS);
  if (outside !== undefined) throw new ArchiveError(`the snapshot holds ${outside}, outside WTF`);
  const expected = new Set(Object.keys(hashes));
  for (const file of files) {
    if (!expected.delete(file)) throw new ArchiveError(`the snapshot holds ${file}, which its index does not list`);
    const hash = createHash('sha256');
    for await (const chunk of fs.createReadStream(path.join(work, ...file.split('/')))) hash.update(chunk as Buffer);
    if (hash.digest('hex') !== hashes[file]) throw new ArchiveError(`${file} in the snapshot was changed`);
  }
  const missing = [...expected][0];
  if (missing !== undefined) throw new ArchiveError(`${missing} is missing from the snapshot`);
}

/** Renames a folder of the restore: through `guard` in the game folder, as it is in the state folder (the addon manifests). */
function move(guard: FolderGuard, from: string, to: string): Promise<void> {
  return from.startsWith(guard.root + path.sep) ? guard.move(from, to) : fs.promises.rename(from, to);
}

async function swap(state: StateFolder, journal: RestoreRecord): Promise<void> {
  await state.writeJson(JOURNAL, journal);
  const guard = new FolderGuard(journal.game, state.warn);
  try {
    for (const part of journal.parts) {
      if (!(await isMissing(part.live))) await move(guard, part.live, part.aside);
      await fs.promises.mkdir(path.dirname(part.live), { recursive: true });
      await move(guard, part.staged, part.live);
    }
    await guard.flush();
    await state.writeJson(JOURNAL, { ...journal, phase: 'done' });
  } catch (err) {
    await rollback(state, journal);
    throw err;
  }
  await finish(state, journal);
}

/** Puts back every folder the journal says may have moved. */
async function rollback(state: StateFolder, journal: RestoreRecord): Promise<void> {
  const guard = new FolderGuard(journal.game, state.warn);
  // While staging nothing live has moved; while swapping, a staged folder gone is one moved in.
  for (const part of journal.phase === 'swapping' ? [...journal.parts].reverse() : []) {
    if ((await isMissing(part.staged)) && !(await isMissing(part.live))) await move(guard, part.live, part.staged);
    if (!(await isMissing(part.aside))) await move(guard, part.aside, part.live);
  }
  await guard.flush();
  await finish(state, journal);
}

async function finish(state: StateFolder, journal: RestoreRecord): Promise<void> {
  await new FolderGuard(journal.game, state.warn).removeWork(journal.work);
  await fs.promises.rm(path.join(state.dir, DIR, `restore-${path.basename(journal.work)}`), {
    recursive: true,
    force: true,
  });
  await removeDurably(path.join(state.dir, JOURNAL));
}

/**
 * Finishes (once swapped) or rolls back a restore a killed process left in the journal. Every
 * snapshot operation with a game folder runs this first.
 */
export async function recoverRestore(state: StateFolder, gameDir: string): Promise<void> {
  await withLock(state.dir, 'backup-recover', () => recoverLocked(state, gameDir));
}

async function recoverLocked(state: StateFolder, gameDir: string): Promise<void> {
  const journal = await state.readJson<RestoreRecord | null>(JOURNAL, null);
  const game = path.resolve(gameDir);
  if (journal === null) {
    // Work folders a finished restore could not remove (a file in one was held) go now.
    const guard = new FolderGuard(game, state.warn);
    const entries = await fs.promises.readdir(game).catch(() => []);
    for (const entry of entries.filter((e) => e.startsWith(WORK_PREFIX)))
      await guard.removeWork(path.join(game, entry));
    return;
  }
  const work = typeof journal.work === 'string' ? journal.work : '';
  const expected = [path.join(game, WTF), path.join(game, ADDONS, 'AddOns'), path.join(state.dir, MANIFESTS)];
  const manifestWork = path.join(state.dir, DIR, `restore-${path.basename(work)}`);
  const inWork = (file: unknown) =>
    typeof file === 'string' &&
    path.resolve(file) === file &&
    [work, manifestWork].some((root) => file.startsWith(root + path.sep));
  if (
    journal.game !== game ||
    path.dirname(work) !== game ||
    !path.basename(work).startsWith(WORK_PREFIX) ||
    !Array.isArray(journal.parts) ||
    journal.parts.some((p) => !expected.includes(p.live) || !inWork(p.staged) || !inWork(p.aside))
  ) {
    throw new StateError(`${path.join(state.dir, JOURNAL)} names a restore of another game folder`);
  }
  if (journal.phase === 'done') await finish(state, journal);
  else await rollback(state, journal);
}
