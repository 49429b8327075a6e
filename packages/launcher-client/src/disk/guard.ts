/**
 * "May I touch this path?": the one place that answers it for every manager that changes the game
 * folder (`GameManager`, `AddonManager`, the settings snapshots), after `game-files.md`, "On a
 * player's real machine".
 *
 * - Links are not followed (`FolderGuard`, one per operation). A path is written, renamed or deleted
 *   only inside the game folder, and never when it, or a folder on the way to it, is a symbolic link,
 *   a junction (Windows reports it as a link) or a mount point (a folder on another device than the
 *   game folder); the game folder itself may be a link. An operation asks `check`/`checkAll` at plan
 *   time, before its first write, for every path it will write or delete (folders on the way are
 *   looked at once per operation, so thousands of files in a few folders cost one `lstat` each);
 *   `beforeRenames` asks again, afresh, just before the first rename (a link may have appeared while
 *   it downloaded); every rename and delete then goes through `replace`, `remove`, `move` or
 *   `removeTree`, which look at the path itself once more. A path refused is `UnsafePathError`; a
 *   folder with files in it (or a file where a folder must be) where a file goes is answered as "in
 *   the way", for the caller to report (`BlockedError`); an empty folder there is removed when the
 *   file is renamed in. Node has no `openat`/`O_NOFOLLOW` walk, so a link made between that last
 *   look and the rename is not seen: the looks narrow the window to one system call.
 * - One operation at a time (`withLock`): every operation that changes the game folder or the state
 *   folder holds `STATE/operation.lock` (`{pid, processStart, operation, since}`) while it runs; a
 *   second stops at once with `BusyError` naming the process. A call made inside an operation (a
 *   game update taking a settings snapshot) runs under the lock its operation holds (the holder is
 *   known per asynchronous context), so it never waits for itself. A lock whose process is gone is
 *   taken over. Against a process id used again by another program: on Linux the lock records the
 *   process's start (the boot's id and the start time in `/proc/<pid>/stat`), and a lock whose pid
 *   runs with another start is stale; other systems give no start time to a program without a native
 *   module, so there a lock is stale only when no process has its id (a reused id keeps it busy until
 *   that program ends; `BusyError` names the pid, and the lock file may be deleted by hand).
 *
 * - Files in use (Windows: the game is running, a scanner reads a new file). A file or folder another
 *   process holds cannot be replaced, renamed or deleted (a sharing violation: `EBUSY`, `EPERM`,
 *   `EACCES`). `held` answers which paths are held right now (an exclusive open: share mode none, as
 *   libuv's `UV_FS_O_EXLOCK`; a folder with everything in it, as NTFS refuses to rename a folder that
 *   holds an open file); `replaceable` asks again with backoff for up to 10 s in all, then stops
 *   with `InUseError` naming the paths still held: `beforeRenames` asks it of every path to be
 *   replaced or deleted, so a held file stops the operation before anything is renamed. Every
 *   rename and delete (`alter`) is tried again the same way on a sharing violation before it becomes
 *   `InUseError`, and a file with the read-only attribute is made writable before it is replaced or
 *   deleted. A launcher's own work folder that cannot be removed (a file in it still held) is left
 *   with a warning (`removeWork`): the next operation removes it. Elsewhere nothing holds a file
 *   this way, and none of this costs a system call.
 * - Case: a file kept whose name differs from the managed path only in case is renamed to the
 *   manifest's spelling through `respell`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { BlockedError, BusyError, InUseError, type LockHolder, StateError, UnsafePathError } from '../errors.js';
import { syncFolder, type Warn } from './state.js';

/**
 * What an operation means to do at a path: write a `file` there (a work file renamed over what is
 * there), `delete` the file there, or rename a whole `folder` there or away.
 */
export type Intent = 'file' | 'delete' | 'folder';

/** Synchronous looks are made in slices of this many paths, with a turn of the event loop between. */
const SLICE = 1024;
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

const lstat = (file: string) => fs.lstatSync(file, { throwIfNoEntry: false }) ?? null;

/** Whether files can be held by another process so that they cannot be replaced (Windows' sharing modes). */
const SHARING = process.platform === 'win32';
/** How long a path in use is tried again, in all, before the operation stops with `InUseError`. */
const IN_USE_MS = 10_000;
/** libuv's `UV_FS_O_EXLOCK` (Windows): open with share mode none, refused while any other process holds the path. */
const EXCLUSIVE = 0x10000000;

/** Whether `err` is a sharing violation: another process holds the path (Windows only; never elsewhere). */
export function sharingViolation(err: unknown): boolean {
  return SHARING && ['EBUSY', 'EPERM', 'EACCES'].includes((err as NodeJS.ErrnoException).code ?? '');
}

/**
 * Runs `attempt` until it ends without a sharing violation, waiting between tries (50 ms doubling,
 * at most 1 s) for up to `IN_USE_MS` in all; then `InUseError` naming `paths()`. `busy` may answer
 * other failures that mean the same (a folder not empty yet while a held file in it is deleted);
 * `signal` ends the waiting (its reason thrown).
 */
async function whileInUse<T>(
  paths: () => readonly string[] | Promise<readonly string[]>,
  attempt: () => Promise<T>,
  busy: (err: unknown) => boolean = sharingViolation,
  signal?: AbortSignal,
): Promise<T> {
  const until = Date.now() + IN_USE_MS;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
    try {
      return await attempt();
    } catch (err) {
      if (!busy(err)) throw err;
      if (Date.now() >= until) throw new InUseError(await paths(), { cause: err });
    }
    await sleep(Math.min(delay, Math.max(0, until - Date.now())), undefined, { signal });
  }
}

/** Whether another process holds `file` (a file or folder) right now: it cannot be opened exclusively. */
function heldNow(file: string): boolean {
  try {
    fs.closeSync(fs.openSync(file, fs.constants.O_RDONLY | EXCLUSIVE));
    return false;
  } catch (err) {
    if (sharingViolation(err)) return true;
    if (['ENOENT', 'ENOTDIR'].includes((err as NodeJS.ErrnoException).code ?? '')) return false;
    throw err;
  }
}

/** The guard of one operation on the game folder `root`. */
export class FolderGuard {
  readonly root: string;
  /** Folders on the way (relative) found to be real folders of the game folder's device, in this operation. */
  private readonly folders = new Map<string, true | { inTheWay: string }>();
  /** Folders whose entries this operation changed: flushed by `flush`. */
  private readonly touched = new Set<string>();

  /** `warn` hears what is left behind and goes on (`removeWork`). */
  constructor(
    root: string,
    private readonly warn: Warn = () => undefined,
  ) {
    this.root = path.resolve(root);
  }

  /** `file` relative to the game folder, `/`-separated (`UnsafePathError` when it is outside). */
  relative(file: string): string {
    const rel = path.relative(this.root, path.resolve(file));
    if (rel === '' || rel.startsWith('..') || path.isAbsolute(rel)) {
      throw new UnsafePathError(file, 'is outside the game folder');
    }
    return rel.split(path.sep).join('/');
  }

  /** The device of the game folder (through a link, if it is one), or null while it does not exist. */
  private device(): number | null {
    return fs.statSync(this.root, { throwIfNoEntry: false })?.dev ?? null;
  }

  /** What the folder `rel` on the way is: a real folder (`true`), absent (`false`), or a file in the way. */
  private folder(rel: string): boolean | { inTheWay: string } {
    if (rel === '.' || rel === '') return true;
    const known = this.folders.get(rel);
    if (known !== undefined) return known;
    const parent = this.folder(path.posix.dirname(rel));
    if (parent !== true) return parent;
    const stat = lstat(path.join(this.root, rel));
    if (stat === null) return false; // made by the operation itself later: not cached
    const found = this.kind(rel, stat) === 'folder' ? true : { inTheWay: rel };
    this.folders.set(rel, found);
    return found;
  }

  /** `UnsafePathError` for a link or a mount point at `rel`; else whether it is a folder or something else. */
  private kind(rel: string, stat: fs.Stats): 'folder' | 'other' {
    if (stat.isSymbolicLink()) throw new UnsafePathError(rel, 'is a symbolic link or junction');
    if (!stat.isDirectory()) return 'other';
    if (stat.dev !== this.device()) throw new UnsafePathError(rel, 'is a mount point (another device)');
    return 'folder';
  }

  /**
   * May `file` be touched as `intent` says? `UnsafePathError` when it or a folder on the way is a link
   * or mount point (or it is outside the game folder); else null, or the path (relative) in the way:
   * a folder with files in it where a file is to be written, a file where a folder must be. An empty
   * folder where a file goes is not in the way (`replace` removes it); nor is a folder where a file
   * was to be deleted (`remove` leaves it).
   */
  check(file: string, intent: Intent): string | null {
    const rel = this.relative(file);
    const on = this.folder(path.posix.dirname(rel));
    if (on === false) return null;
    if (on !== true) return intent === 'delete' ? null : on.inTheWay;
    const stat = lstat(path.join(this.root, rel));
    if (stat === null || this.kind(rel, stat) !== 'folder' || intent !== 'file') return null;
    return fs.readdirSync(path.join(this.root, rel)).length === 0 ? null : rel;
  }

  /** `check` of each file (in slices, the event loop turning between): each answer in order. */
  async checkAll(files: readonly string[], intent: Intent): Promise<(string | null)[]> {
    const answers: (string | null)[] = [];
    for (const [i, file] of files.entries()) {
      if (i % SLICE === SLICE - 1) await turn();
      answers.push(this.check(file, intent));
    }
    return answers;
  }

  /**
   * Just before an operation's first rename: every path to be replaced (`replace`, by a file) and
   * deleted (`remove`) looked at again, afresh. Answers, per path of `replace`, the path in the way
   * or null (see `check`); `UnsafePathError` as `check`.
   */
  async beforeRenames(replace: readonly string[], remove: readonly string[]): Promise<(string | null)[]> {
    this.folders.clear();
    await this.checkAll(remove, 'delete');
    const answers = await this.checkAll(replace, 'file');
    await this.replaceable([...replace, ...remove]);
    return answers;
  }

  /**
   * Which of `paths` (files or folders, absent ones skipped) another process holds right now, relative
   * and sorted; a folder is held when it or anything in it is (as the first held thing in it). Always
   * none where files are not held so (not Windows).
   */
  async held(paths: readonly string[]): Promise<string[]> {
    if (!SHARING) return [];
    const found: string[] = [];
    for (const [i, file] of paths.entries()) {
      if (i % SLICE === SLICE - 1) await turn();
      const inside =
        lstat(file)?.isDirectory() === true ? fs.readdirSync(file, { recursive: true, encoding: 'utf8' }) : [];
      const heldOne = [file, ...inside.map((entry) => path.join(file, entry))].find(heldNow);
      if (heldOne !== undefined) found.push(this.relative(heldOne));
    }
    return found.sort();
  }

  /**
   * Before the first rename: `InUseError` naming the paths of `paths` (files or folders to be
   * replaced, renamed or deleted) another process still holds after trying again for up to 10 s in
   * all (a scanner lets go); nothing is changed. `signal` stops the asking (the caller gave up).
   */
  async replaceable(paths: readonly string[], signal?: AbortSignal): Promise<void> {
    let left = paths;
    let busy: string[] = [];
    const stillHeld = new Error('held');
    await whileInUse(
      () => busy,
      async () => {
        busy = await this.held(left);
        left = left.filter((file) => busy.some((b) => this.covers(file, b)));
        if (busy.length > 0) throw stillHeld;
      },
      (err) => err === stillHeld,
      signal,
    );
  }

  /** Whether the relative path `held` is `file` or inside it. */
  private covers(file: string, held: string): boolean {
    const rel = this.relative(file);
    return held === rel || held.startsWith(`${rel}/`);
  }

  /**
   * Checks that no folder under `dir` (inside the game folder) is a mount point, before it is deleted
   * whole: a recursive delete does not follow links, but it goes down into a folder mounted there.
   */
  async checkTree(dir: string): Promise<void> {
    this.check(dir, 'folder');
    const device = this.device();
    const walk = async (folder: string): Promise<void> => {
      let entries: fs.Dirent[];
      try {
        entries = await fs.promises.readdir(folder, { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
          return;
        throw err;
      }
      for (const entry of entries) {
        if (!entry.isDirectory()) continue;
        const sub = path.join(folder, entry.name);
        if ((await fs.promises.lstat(sub)).dev !== device) {
          throw new UnsafePathError(this.relative(sub), 'is a mount point (another device)');
        }
        await walk(sub);
      }
    };
    await walk(dir);
  }

  /**
   * The one rename into place of a file: `from` (a work file) becomes `to`, its folders made, an
   * empty folder there removed first. `to` is looked at once more (`check`): a link is
   * `UnsafePathError`, something in the way (come since `beforeRenames`) `BlockedError`.
   */
  async replace(from: string, to: string): Promise<void> {
    const inTheWay = this.check(to, 'file');
    if (inTheWay !== null) throw new BlockedError([inTheWay]);
    const made = fs.mkdirSync(path.dirname(to), { recursive: true });
    if (made !== undefined) this.touched.add(path.dirname(made));
    if (lstat(to)?.isDirectory() === true) await this.alter({ op: 'rmdir', path: to });
    await this.alter({ op: 'rename', from, to });
  }

  /**
   * Renames the file `from` to `to`, the same path spelt in another case (a case-insensitive file
   * system), through a name of its own beside it: a rename to the same file only in another case is
   * no change on some systems (Wine's). Both ends are looked at first.
   */
  async respell(from: string, to: string): Promise<void> {
    this.check(from, 'file');
    this.check(to, 'file');
    const aside = `${from}.${randomUUID()}.patchwell-case`;
    await this.alter({ op: 'rename', from, to: aside });
    await this.alter({ op: 'rename', from: aside, to });
  }

  /** The one delete of a file: `file` unless it is absent or now a folder (left alone); a link is `UnsafePathError`. */
  async remove(file: string): Promise<void> {
    this.check(file, 'delete');
    const stat = lstat(file);
    if (stat !== null && !stat.isDirectory()) await this.alter({ op: 'unlink', path: file });
  }

  /** The one rename of a folder (an addon's, `WTF`) inside the game folder: both ends looked at first. */
  async move(from: string, to: string): Promise<void> {
    this.check(from, 'folder');
    this.check(to, 'folder');
    await this.alter({ op: 'rename', from, to });
  }

  /** Deletes the folder `dir` (a work folder of the launcher's, or a folder moved aside) whole: no mount point inside. */
  async removeTree(dir: string): Promise<void> {
    await this.checkTree(dir);
    await this.alter({ op: 'rm', path: dir });
  }

  /**
   * Deletes a work folder of the launcher's (`removeTree`); one that cannot be removed because
   * something in it is still held (`InUseError`, after the retries) is left, with a warning: the next
   * operation removes it. Answers whether it is gone.
   */
  async removeWork(dir: string): Promise<boolean> {
    try {
      await this.removeTree(dir);
      return true;
    } catch (err) {
      if (!(err instanceof InUseError)) throw err;
      this.warn(
        `${this.relative(dir)} could not be removed (${err.paths.join(', ')} in use); it is removed next time`,
        {
          kind: err.kind,
          path: this.relative(dir),
          paths: err.paths,
        },
      );
      return false;
    }
  }

  /** Sets the mode bits of `file` (the execute bit the manifest asks), never through a link. */
  async chmod(file: string, mode: number): Promise<void> {
    this.check(file, 'file');
    if (lstat(file)?.isFile() === true) await fs.promises.chmod(file, mode);
  }

  /**
   * Every rename and delete of the game folder, done here: a file replaced or deleted made writable
   * first (Windows' read-only attribute); a sharing violation tried again for up to 10 s, then
   * `InUseError` naming the path (both ends of a rename). The folders it changed are flushed by `flush`.
   * A rename or a file's delete is one synchronous system call (through the thread pool, a game
   * update's 8,000 renames each waited a round trip: 1.5 s in all); a folder's delete, many.
   */
  private async alter(
    change: { op: 'rename'; from: string; to: string } | { op: 'unlink' | 'rmdir' | 'rm'; path: string },
  ): Promise<void> {
    const ends = change.op === 'rename' ? [change.from, change.to] : [change.path];
    // The end another process holds (a folder: the first thing held in it), else both.
    const named = async () => {
      const inGame = ends.filter((end) => end.startsWith(this.root + path.sep));
      const held = await this.held(inGame);
      return held.length > 0 ? held : inGame.map((end) => this.relative(end));
    };
    // A folder whose held file is being deleted is not empty until that file is let go.
    const busy = (err: unknown) =>
      sharingViolation(err) || (SHARING && change.op === 'rm' && (err as NodeJS.ErrnoException).code === 'ENOTEMPTY');
    await whileInUse(
      named,
      async () => {
        if (change.op === 'rename') {
          writable(change.to);
          fs.renameSync(change.from, change.to);
        } else if (change.op === 'unlink') {
          writable(change.path);
          fs.unlinkSync(change.path);
        } else if (change.op === 'rmdir') fs.rmdirSync(change.path);
        else await fs.promises.rm(change.path, { recursive: true, force: true });
      },
      busy,
    );
    for (const end of ends) this.touched.add(path.dirname(end));
  }

  /** Flushes every folder whose entries this operation renamed or deleted (before the state says they are done). */
  async flush(): Promise<void> {
    for (const dir of this.touched) await syncFolder(dir);
    this.touched.clear();
  }
}

/** Makes the file `file` writable when it has Windows' read-only attribute (which refuses its replacement and delete). */
function writable(file: string): void {
  if (!SHARING) return;
  const stat = lstat(file);
  if (stat?.isFile() === true && (stat.mode & 0o200) === 0) fs.chmodSync(file, stat.mode | 0o200);
}

const LOCK = 'operation.lock';

/** `STATE/operation.lock`: who holds it, and (Linux) since when its process runs. */
interface LockRecord extends LockHolder {
  /** `<boot id>:<start time in clock ticks>` on Linux; null where the system does not tell. */
  readonly processStart: string | null;
}

/** The state folders whose lock the current asynchronous context holds (its operation and the calls it makes). */
const holding = new AsyncLocalStorage<ReadonlySet<string>>();
/** The state folders whose lock this process holds, in any context. */
const heldHere = new Set<string>();

/** `<boot id>:<start time>` of process `pid` (Linux), or null. */
function processStart(pid: number): string | null {
  if (process.platform !== 'linux') return null;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const boot = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    return fields[19] === undefined ? null : `${boot}:${fields[19]}`;
  } catch {
    return null;
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** The lock file's text and record (null when it is not one: written by hand, or cut short). */
async function readLock(file: string): Promise<{ text: string; record: LockRecord | null } | null> {
  let text: string;
  try {
    text = await fs.promises.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new StateError(`cannot read ${file}: ${(err as Error).message}`);
  }
  try {
    const record = JSON.parse(text) as LockRecord;
    const valid =
      Number.isSafeInteger(record.pid) &&
      record.pid > 0 &&
      typeof record.operation === 'string' &&
      typeof record.since === 'string' &&
      (record.processStart === null || typeof record.processStart === 'string');
    return { text, record: valid ? record : null };
  } catch {
    return { text, record: null };
  }
}

/** The holder of `record` when its process still runs it (see the header), else null: a stale lock. */
function liveHolder(dir: string, record: LockRecord | null): LockHolder | null {
  if (record === null) return null;
  const holder = { pid: record.pid, operation: record.operation, since: record.since };
  if (record.pid === process.pid) return heldHere.has(dir) ? holder : null;
  if (!processAlive(record.pid)) return null;
  const start = processStart(record.pid);
  if (record.processStart !== null && start !== null && start !== record.processStart) return null;
  return holder;
}

/** Creates `file` holding `text`, or `EEXIST`: written beside and linked in, so the lock is never seen half written. */
async function createExclusive(file: string, text: string): Promise<void> {
  const temp = `${file}.${process.pid}.${randomUUID()}.tmp`;
  await fs.promises.writeFile(temp, text, { flag: 'wx' });
  try {
    await fs.promises.link(temp, file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // A file system without hard links (FAT): created in place, a moment empty.
    if (code === 'EEXIST' || !['EPERM', 'ENOTSUP', 'ENOSYS', 'EXDEV'].includes(code ?? '')) throw err;
    await fs.promises.writeFile(file, text, { flag: 'wx' });
  } finally {
    await fs.promises.rm(temp, { force: true });
  }
}

/** Takes a stale lock (whose text was `stale`) away; one another process took meanwhile is put back. */
async function takeOver(file: string, stale: string): Promise<void> {
  const aside = `${file}.${process.pid}.${randomUUID()}.stale`;
  try {
    await fs.promises.rename(file, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  try {
    if ((await fs.promises.readFile(aside, 'utf8')) !== stale) await fs.promises.link(aside, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    await fs.promises.rm(aside, { force: true });
  }
}

async function acquire(dir: string, operation: string): Promise<LockRecord> {
  const file = path.join(dir, LOCK);
  const record: LockRecord = {
    pid: process.pid,
    processStart: processStart(process.pid),
    operation,
    since: new Date().toISOString(),
  };
  const text = `${JSON.stringify(record)}\n`;
  await fs.promises.mkdir(dir, { recursive: true });
  for (let tries = 0; ; tries++) {
    try {
      await createExclusive(file, text);
      return record;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new StateError(`cannot write ${file}: ${(err as Error).message}`);
      }
    }
    const found = await readLock(file);
    if (found === null) continue; // released meanwhile
    const holder = liveHolder(dir, found.record);
    if (holder !== null) throw new BusyError(holder);
    // Taken over, then tried again; a lock that keeps coming back stale is another's race won, not ours.
    if (tries >= 3) throw new BusyError(found.record ?? { pid: 0, operation: 'unknown', since: 'unknown' });
    await takeOver(file, found.text);
  }
}

/** Deletes the lock when it is still `record`'s (a lock taken over meanwhile is not ours to delete). */
async function release(dir: string, record: LockRecord): Promise<void> {
  const file = path.join(dir, LOCK);
  const found = await readLock(file).catch(() => null);
  if (found?.record?.pid === record.pid && found.record.since === record.since) {
    await fs.promises.rm(file, { force: true });
  }
}

/**
 * Runs `work` holding the operation lock of the state folder `stateDir` (`operation` names it to a
 * second process): `BusyError` at once when another operation holds it. Inside `work`, a call of
 * `withLock` for the same folder runs under the lock already held.
 */
export async function withLock<T>(stateDir: string, operation: string, work: () => Promise<T>): Promise<T> {
  const dir = path.resolve(stateDir);
  const held = holding.getStore();
  if (held?.has(dir) === true) return work();
  const record = await acquire(dir, operation);
  heldHere.add(dir);
  try {
    return await holding.run(new Set([...(held ?? []), dir]), work);
  } finally {
    heldHere.delete(dir);
    // A lock left behind (this folder gone, say) is taken over by the next operation: no failure of its own.
    await release(dir, record).catch(() => undefined);
  }
}

/** `withLock`, or nothing when another operation holds the lock: for what a reader does only when no one else changes things. */
export async function whenUnlocked(stateDir: string, operation: string, work: () => Promise<void>): Promise<void> {
  let ran = false;
  try {
    await withLock(stateDir, operation, () => {
      ran = true;
      return work();
    });
  } catch (err) {
    if (ran || !(err instanceof BusyError)) throw err;
  }
}

/** Who holds the operation lock of `stateDir` now, or null (none, or a stale one). */
export async function lockHolder(stateDir: string): Promise<LockHolder | null> {
  const dir = path.resolve(stateDir);
  const found = await readLock(path.join(dir, LOCK));
  return found === null ? null : liveHolder(dir, found.record);
}
