/**
 * `GameManager`: keeps the whole game client current and whole (`game-files.md`, "What a launcher
 * does"), beside `UpdateManager` and `AddonManager` and over their state folder, verifier and retries.
 *
 * An operation plans per file (keep, rebuild, delete) and gathers chunks (from the installed files at
 * the offsets the installed manifest gives, each re-hashed; the rest downloaded over a few keep-alive
 * connections, mirrors first, each chunk checked against its name), writing each straight into its
 * places in work files in `GAME/.patchwell-work/` (same file system). Each work file is checked
 * whole as its places fill (`Hasher`, on a thread of its own, hashes chunks and files); then it
 * records the renames in the state folder (`game/operation.json`), renames them into place and
 * clears the record. A run killed before the record says `renaming` is rolled back (nothing in
 * the game folder changed; what its work files hold is kept and used by the next run); one killed
 * after is finished by the next call.
 *
 * On a player's real machine (`disk/guard.ts`): every operation holds the state folder's lock; every path
 * it writes or deletes is checked before its first write and again before its first rename (no link,
 * no mount point, nothing in the way), and renamed or deleted through the guard. Whether another
 * process holds one of them (the game is running) is asked while the files are assembled and again
 * before the first rename (`InUseError` after 10 s of retries); a file kept whose name on disk differs
 * only in case is renamed to the manifest's spelling. A refusal before the first rename clears the
 * record (nothing under way; the work files kept). A half-done run the next call cannot finish (a
 * file still held) leaves `verify` and `status` answering, and names it. Durability: the state
 * files and the record are written with `writeDurably`; a work file is on disk once `Hasher.whole`
 * has answered for it (the hashing thread flushes each work file once its last byte is hashed), and every
 * work file is checked whole before the record says `renaming`, so nothing is renamed unflushed; the
 * game folder's folders are flushed after the renames, before the state says the build is installed.
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { paths } from '../api.js';
import { snapshotBeforeChange } from '../backups/snapshots.js';
import { reported, type UpdateManager } from '../update/manager.js';
import {
  AbortedError,
  AnswerTooLargeError,
  BlockedError,
  DiskSpaceError,
  HttpError,
  InUseError,
  IntegrityError,
  type LockHolder,
  ManifestError,
  NetworkError,
  RollbackError,
  StateError,
} from '../errors.js';
import { checkManifest, type GameManifest, globMatcher, type ManifestFile, pathFault } from './manifest.js';
import { chunkConnections, downloadInto } from '../net/download.js';
import { FolderGuard, lockHolder, withLock } from '../disk/guard.js';
import { Chunker, chunkFile, GAME_CHUNK_SIZES } from './fastcdc.js';
import { ChunkBuffer, Hasher } from './hasher.js';
import { withRetries } from '../net/http.js';
import { gameTrustedComment, prehash } from '../trust/minisign.js';
import { removeDurably, writeDurably } from '../disk/state.js';

/** The verified answer of `GET /api/game/check-update`. */
export type GameCheckAnswer = paths['/api/game/check-update']['get']['responses'][200]['content']['application/json'];
/** The build `check-update` offers. */
export type GameBuild = NonNullable<GameCheckAnswer['latest']>;

/** The largest manifest read: what `manifestSize` declares, never above 64 MiB. */
export const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;

export interface GameManagerOptions {
  /** Answers, retries, publisher keys and the state folder are this manager's. */
  readonly updates: UpdateManager;
  /** The game folder. */
  readonly gameDir: string;
  /** The launcher's app name: a manifest of another app is refused. */
  readonly app: string;
  /** Mirrors of the chunk store (`<mirror>/<2 hex>/<sha256>`), tried in order before the service. */
  readonly mirrors?: readonly string[];
  /** Chunk downloads at once (default 4). */
  readonly connections?: number;
}

export type GameProgress =
  | { readonly phase: 'plan'; readonly files: number; readonly done: number }
  | { readonly phase: 'download'; readonly bytes: number; readonly total: number; readonly rate: number }
  | { readonly phase: 'assemble'; readonly files: number; readonly done: number };

export interface GameOperationOptions {
  readonly onProgress?: (progress: GameProgress) => void;
  readonly signal?: AbortSignal;
  /** Automatic settings snapshots kept (`snapshotBeforeChange`, taken before the first change); default 20. */
  readonly keep?: number;
}

export interface MirrorReport {
  readonly url: string;
  /** Chunks it served that were used. */
  chunks: number;
  /** Chunks it failed to serve or served wrong. */
  failures: number;
}

export interface GameUpdateResult {
  readonly result: 'up-to-date' | 'updated' | 'installed';
  readonly from: number | null;
  readonly to: number;
  readonly files: { added: number; changed: number; removed: number; unchanged: number };
  /**
   * Files the installed build listed and this one does not, left in place because they changed since
   * they were installed (an `initial` file, the player's, is never deleted and not named here).
   */
  readonly left: string[];
  readonly downloadedBytes: number;
  /**
   * Bytes taken from files already on disk for the files rebuilt (kept files not counted): from the
   * game's files, and from the work files an earlier run (cut short) kept.
   */
  readonly reusedBytes: number;
  readonly mirrors: MirrorReport[];
}

export interface GameVerifyResult {
  readonly ok: boolean;
  /**
   * Only when an operation a run left half done could not be finished now (a file it renames or
   * deletes is held: see `InUseError`): the builds it goes between and the paths held. The files are
   * then compared with the installed build, which is still `from`'s.
   */
  readonly underWay?: { from: number | null; to: number; inUse: readonly string[] };
  readonly buildCode: number;
  readonly missing: string[];
  readonly damaged: string[];
  /** Files matching the manifest's `remove` patterns. */
  readonly extra: string[];
}

export interface GameRepairResult {
  readonly repaired: string[];
  readonly removed: string[];
  readonly downloadedBytes: number;
  readonly mirrors: MirrorReport[];
}

export interface GameStatus {
  readonly installed: { version: string; buildCode: number } | null;
  readonly underWay: { from: number | null; to: number } | null;
  /**
   * The installed build's files another process holds right now (the game is running): an update
   * or repair would stop with `InUseError` on them. Always empty where files are not held so (not Windows).
   */
  readonly inUse: string[];
  /** Only while another operation holds the state folder's lock: who (the game may be changing right now). */
  readonly busy?: LockHolder;
}

export type GameManagerEvents = {
  'checking-for-update': [];
  'update-available': [build: GameBuild];
  'update-not-available': [];
  progress: [progress: GameProgress];
  updated: [result: GameUpdateResult];
  error: [error: Error];
};

/** The size and modification time last verified, per managed path (`game/files.json`). */
type QuickState = Record<string, { size: number; mtimeMs: number }>;

/** An operation under way (`game/operation.json`). */
interface OperationRecord {
  readonly from: number | null;
  readonly to: number;
  /** `assembling`: nothing in the game folder changed yet; `renaming`: every file is ready in `work`. */
  readonly phase: 'assembling' | 'renaming';
  /** Work files (names inside the work folder), the managed path each becomes, and whether it is new there. */
  readonly renames: readonly { readonly work: string; readonly path: string; readonly kind?: Build['kind'] }[];
  readonly deletes: readonly string[];
  /** The files the update left (see `GameUpdateResult.left`), told by the run that finishes it. */
  readonly left?: readonly string[];
}

const DIR = 'game';
const MANIFEST = `${DIR}/manifest.json`;
const FILES = `${DIR}/files.json`;
const OPERATION = `${DIR}/operation.json`;
const WORK = '.patchwell-work';
/** The most places on disk a chunk is looked for. */
const SOURCES_PER_CHUNK = 8;

/** Where a chunk may be read in a file already on disk. */
interface Source {
  readonly path: string;
  readonly offset: number;
}

/** A file to (re)build. */
interface Build {
  readonly file: ManifestFile;
  readonly kind: 'added' | 'changed';
}

interface Plan {
  readonly builds: Build[];
  readonly deletes: string[];
  /** Files the installed build listed and the target does not, left in place: changed since installed. */
  readonly left: string[];
  readonly unchanged: number;
  readonly quick: QuickState;
  /** Files kept whose execute bit is not the manifest's. */
  readonly modes: ManifestFile[];
  /** Files kept whose name on disk differs from the manifest's only in case: that name, relative. */
  readonly spellings: { readonly file: ManifestFile; readonly onDisk: string }[];
}

/** Whether names differing only in case may be one file here (Windows' and macOS's file systems, as made). */
const CASE_INSENSITIVE = process.platform === 'win32' || process.platform === 'darwin';

const key = (p: string) => p.toLowerCase();

async function statOrNull(file: string): Promise<fs.Stats | null> {
  try {
    return await fs.promises.lstat(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
      return null;
    throw err;
  }
}

/** Synchronous file calls are made in slices of this many, with a turn of the event loop between. */
const SLICE = 1024;
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * `lstat` of each file (null when absent), answered synchronously in slices: metadata the system has
 * cached comes back many times faster so than through the thread pool, one promise per file.
 */
async function statAll(files: readonly string[]): Promise<(fs.Stats | null)[]> {
  const stats: (fs.Stats | null)[] = [];
  for (const [i, file] of files.entries()) {
    if (i % SLICE === SLICE - 1) await turn();
    try {
      stats.push(fs.lstatSync(file, { throwIfNoEntry: false }) ?? null);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOTDIR') throw err;
      stats.push(null);
    }
  }
  return stats;
}

/**
 * Makes each work file `size` bytes long, created or (`keep`) kept with what it holds: synchronous
 * calls in slices, as `statAll` (through the thread pool, three round trips a file took 0.6 ms each).
 */
async function sizeAll(files: readonly { file: string; size: number; keep: boolean }[]): Promise<void> {
  for (const [i, { file, size, keep }] of files.entries()) {
    if (i % SLICE === SLICE - 1) await turn();
    const fd = fs.openSync(file, keep ? 'r+' : 'w');
    try {
      fs.ftruncateSync(fd, size);
    } finally {
      fs.closeSync(fd);
    }
  }
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

const open = promisify(fs.open);
const close = promisify(fs.close);
const read = promisify(fs.read);

/**
 * Whether the bytes of `file` at `offset`, read into `into` (lent to `hasher`), hash to the chunk's
 * `name`: they are then written at `write` and counted at `present` (see `Hasher.chunk`); false when
 * fewer bytes, another chunk or no file.
 */
async function chunkAt(
  file: string,
  offset: number,
  chunk: { readonly name: string; readonly size: number },
  places: { readonly write?: readonly Place[]; readonly present?: readonly Place[] },
  into: ChunkBuffer,
  hasher: Hasher,
): Promise<boolean> {
  const { name, size } = chunk;
  let fd;
  try {
    fd = await open(file, 'r');
  } catch {
    return false;
  }
  let bytesRead;
  try {
    ({ bytesRead } = await read(fd, into.bytes, 0, size, offset));
  } finally {
    await close(fd);
  }
  return bytesRead === size && (await hasher.chunk(into, size, name, places)) === name;
}

/** A place a chunk goes: a work file (`size` bytes whole; `partial` when an earlier run left it) at an offset. */
interface Place {
  readonly file: string;
  readonly offset: number;
  readonly size: number;
  readonly partial: boolean;
}

/** A work file's name: the same for the same path (any case) and content, so that a cut run is resumed. */
const workName = (file: ManifestFile) => sha256(Buffer.from(`${key(file.path)}\n${file.sha256}`)).slice(0, 32);

/** Whether `onDisk` holds `file` (its size and SHA-256), read through one buffer of up to 1 MiB. */
async function matchesWhole(onDisk: string, file: ManifestFile): Promise<boolean> {
  let handle;
  try {
    handle = await fs.promises.open(onDisk, 'r');
  } catch {
    return false;
  }
  const hash = createHash('sha256');
  const buffer = Buffer.allocUnsafe(Math.max(1, Math.min(1 << 20, file.size)));
  let size = 0;
  try {
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, size);
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
      size += bytesRead;
      if (size > file.size) return false;
    }
  } catch {
    return false;
  } finally {
    await handle.close();
  }
  return size === file.size && hash.digest('hex') === file.sha256;
}

function checkAbort(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new AbortedError('the game operation was cancelled');
}

export class GameManager extends EventEmitter<GameManagerEvents> {
  private readonly updates: UpdateManager;
  readonly gameDir: string;
  private readonly workDir: string;
  private readonly app: string;
  private readonly mirrors: readonly string[];
  private readonly connections: number;

  constructor(options: GameManagerOptions) {
    super();
    this.updates = options.updates;
    this.gameDir = path.resolve(options.gameDir);
    this.workDir = path.join(this.gameDir, WORK);
    this.app = options.app;
    this.mirrors = (options.mirrors ?? []).map((m) => m.replace(/\/+$/, ''));
    const connections = options.connections ?? 4;
    if (!Number.isSafeInteger(connections) || connections < 1 || connections > 64) {
      throw new TypeError('connections must be an integer from 1 to 64');
    }
    this.connections = connections;
  }

  private get state() {
    return this.updates.state;
  }

  /**
   * The installed build, an operation under way (a killed run the next call finishes or undoes) and,
   * while another process runs one, who (`busy`). Takes no lock: it answers while an operation runs.
   */
  async status(): Promise<GameStatus> {
    const installed = await this.installed();
    const op = await this.state.readJson<OperationRecord | null>(OPERATION, null);
    const busy = await lockHolder(this.state.dir);
    const inUse = await new FolderGuard(this.gameDir).held(
      (installed?.files ?? []).map((f) => path.join(this.gameDir, f.path)),
    );
    return {
      installed: installed && { version: installed.version, buildCode: installed.buildCode },
      underWay: op && { from: op.from, to: op.to },
      inUse,
      ...(busy === null ? {} : { busy }),
    };
  }

  /** A verified `check-update` for the installed build; a lower `latest` without `downgrade` is a rollback. */
  async check(signal?: AbortSignal): Promise<GameCheckAnswer> {
    return reported(this, async () => {
      this.emit('checking-for-update');
      const installed = await this.installed();
      const buildCode = installed?.buildCode ?? 0;
      const url = this.updates.url('/api/game/check-update', { buildCode });
      const answer = JSON.parse((await this.updates.verifiedBody(url, { signal })).toString('utf8')) as GameCheckAnswer;
      const latest = answer.latest;
      if (latest !== null && latest.buildCode < buildCode && !answer.downgrade) {
        throw new RollbackError(
          `the service offers build ${latest.buildCode}, below the installed ${buildCode}: a rollback`,
        );
      }
      if (latest !== null && latest.buildCode !== buildCode) this.emit('update-available', latest);
      else this.emit('update-not-available');
      return answer;
    });
  }

  /**
   * Brings the game folder to the latest build (`buildCode`, when given, must be it): a signed
   * check-update, the signed manifest checked against it, then only what changed.
   */
  async update(options: GameOperationOptions & { buildCode?: number } = {}): Promise<GameUpdateResult> {
    return this.locked('game-update', async (guard) => {
      const finished = await this.recover(guard);
      const answer = await this.check(options.signal);
      const latest = answer.latest;
      if (latest === null)
        throw new HttpError(404, this.updates.url('/api/game/check-update'), 'no game build is published');
      if (options.buildCode !== undefined && options.buildCode !== latest.buildCode) {
        throw new StateError(`build ${options.buildCode} was asked for; the service's latest is ${latest.buildCode}`);
      }
      const installed = await this.installed();
      // The installed build's manifest is already verified and kept: it is not fetched (nor counted) again.
      const current = installed?.buildCode === latest.buildCode;
      const text = current ? await this.installedText() : await this.fetchManifest(latest, options.signal);
      const manifest = current ? installed : await this.checkAgainst(text, latest);
      const outcome = await this.apply(manifest, text, installed, false, options, guard);
      // A killed run this call finished counts as this update's: from the build installed before it.
      const from = finished === null ? (installed?.buildCode ?? null) : finished.from;
      const earlier = finished?.to === manifest.buildCode ? finished : null;
      const kinds = new Map((earlier?.renames ?? []).map((r) => [r.path, r.kind ?? 'changed']));
      for (const b of outcome.builds) kinds.set(b.file.path, b.kind);
      const removed = new Set([...(earlier?.deletes ?? []), ...outcome.deletes]);
      const count = (kind: Build['kind']) => [...kinds.values()].filter((k) => k === kind).length;
      const result: GameUpdateResult = {
        result:
          from === null
            ? 'installed'
            : from === manifest.buildCode && kinds.size + removed.size === 0
              ? 'up-to-date'
              : 'updated',
        from,
        to: manifest.buildCode,
        files: {
          added: count('added'),
          changed: count('changed'),
          removed: removed.size,
          unchanged: manifest.files.length - kinds.size,
        },
        left: [...new Set([...(earlier?.left ?? []), ...outcome.left])].sort(),
        downloadedBytes: outcome.downloadedBytes,
        reusedBytes: outcome.reusedBytes,
        mirrors: outcome.mirrors,
      };
      this.emit('updated', result);
      return result;
    });
  }

  /** Compares every managed file with the installed manifest: quick (size and time recorded), or `full` (every byte hashed). */
  async verify(options: { full?: boolean; signal?: AbortSignal } = {}): Promise<GameVerifyResult> {
    return this.locked('game-verify', async (guard) => {
      // A half-done operation held up by a file in use does not stop the verify: it is named.
      let underWay: GameVerifyResult['underWay'];
      try {
        await this.recover(guard);
      } catch (err) {
        if (!(err instanceof InUseError)) throw err;
        const op = await this.state.readJson<OperationRecord | null>(OPERATION, null);
        if (op === null) throw err;
        underWay = { from: op.from, to: op.to, inUse: err.paths };
      }
      const manifest = await this.requireInstalled();
      const quick = await this.quickState();
      const missing: string[] = [];
      const damaged: string[] = [];
      let recorded = false;
      const stats = await statAll(manifest.files.map((f) => path.join(this.gameDir, f.path)));
      for (const [i, file] of manifest.files.entries()) {
        checkAbort(options.signal);
        const stat = stats[i] ?? null;
        if (stat === null || !stat.isFile()) {
          if (stat === null) missing.push(file.path);
          else if (file.policy === 'exact') damaged.push(file.path);
          continue;
        }
        if (file.policy === 'initial') continue;
        const seen = quick[file.path];
        if (!(await this.matches(file, stat, quick, options.full === true))) damaged.push(file.path);
        else if (quick[file.path] !== seen) recorded = true;
      }
      // Written only when a file was hashed: a quick verify of an unchanged folder writes nothing.
      if (recorded) await this.state.writeJson(FILES, quick);
      const extra = await this.removeMatches(manifest);
      const ok = missing.length + damaged.length + extra.length === 0;
      return { ok, buildCode: manifest.buildCode, missing, damaged, extra, ...(underWay && { underWay }) };
    });
  }

  /**
   * Restores every missing or damaged file of the installed build (only the chunks that differ are
   * fetched) and deletes `remove` matches; a killed run it finishes counts as repaired. A managed
   * path an empty folder occupies is restored (the folder removed); one a folder with files in it
   * occupies is left, and once everything else is repaired, `BlockedError` names it (with what was
   * repaired and removed); a link there is `UnsafePathError`, before anything is written.
   */
  async repair(options: GameOperationOptions = {}): Promise<GameRepairResult> {
    return this.locked('game-repair', async (guard) => {
      const finished = await this.recover(guard);
      const manifest = await this.requireInstalled();
      const text = await this.installedText();
      const outcome = await this.apply(manifest, text, manifest, true, options, guard);
      const done = {
        repaired: [
          ...new Set([...(finished?.renames ?? []).map((r) => r.path), ...outcome.builds.map((b) => b.file.path)]),
        ],
        removed: [...new Set([...(finished?.deletes ?? []), ...outcome.deletes])],
      };
      if (outcome.blocked.length > 0) throw new BlockedError(outcome.blocked, done);
      return { ...done, downloadedBytes: outcome.downloadedBytes, mirrors: outcome.mirrors };
    });
  }

  /** `work` holding the state folder's lock (`BusyError` when another operation holds it), with a guard of its own. */
  private locked<T>(operation: string, work: (guard: FolderGuard) => Promise<T>): Promise<T> {
    return reported(this, () =>
      withLock(this.state.dir, operation, () => work(new FolderGuard(this.gameDir, this.state.warn))),
    );
  }

  /** The manifest's exact bytes, read up to its signed `manifestSize` (at most 64 MiB). */
  private async fetchManifest(latest: GameBuild, signal: AbortSignal | undefined): Promise<Buffer> {
    if (
      !Number.isSafeInteger(latest.manifestSize) ||
      latest.manifestSize < 1 ||
      latest.manifestSize > MAX_MANIFEST_BYTES
    ) {
      throw new ManifestError(`manifestSize ${latest.manifestSize} is not from 1 byte to ${MAX_MANIFEST_BYTES}`);
    }
    const url = this.updates.url(`/api/game/builds/${latest.buildCode}/manifest`);
    try {
      return await this.updates.verifiedBody(url, { maxBytes: latest.manifestSize, signal });
    } catch (err) {
      // Longer than its signed size: not the signed manifest (a verification refusal, as a wrong hash is).
      if (err instanceof AnswerTooLargeError) {
        throw new ManifestError(`the manifest answer is longer than its signed manifestSize ${latest.manifestSize}`);
      }
      throw err;
    }
  }

  /** The manifest, checked against the rules and the verified check-update that named it. */
  private async checkAgainst(text: Buffer, latest: GameBuild): Promise<GameManifest> {
    if (text.length !== latest.manifestSize) {
      throw new ManifestError(`the manifest is ${text.length} bytes, check-update says ${latest.manifestSize}`);
    }
    const digest = sha256(text);
    if (digest !== latest.manifestSha256.toLowerCase()) {
      throw new ManifestError(`the manifest's SHA-256 is ${digest}, check-update says ${latest.manifestSha256}`);
    }
    const manifest = GameManager.parse(text);
    if (manifest.buildCode !== latest.buildCode || manifest.version !== latest.version) {
      throw new ManifestError(
        `the manifest is build ${manifest.buildCode} (${manifest.version}), check-update offers ${latest.buildCode} (${latest.version})`,
      );
    }
    if (manifest.app !== this.app) throw new ManifestError(`the manifest is of app ${manifest.app}, not ${this.app}`);
    if (this.updates.hasPublisherKeys) {
      this.updates.checkPublisherSignature(
        `game build ${manifest.buildCode}`,
        latest.manifestSignature,
        await prehash([text]),
        gameTrustedComment({ app: this.app, buildCode: manifest.buildCode, sha256: digest }),
      );
    }
    return manifest;
  }

  /**
   * The manifest's rules checked; `accepted` for a manifest this launcher already accepted (installed,
   * or under way), read even when it predates the player-safety rules (`checkManifest`).
   */
  private static parse(text: Buffer, accepted = false): GameManifest {
    const checked = checkManifest(text.toString('utf8'), { accepted });
    if (!checked.ok) throw new ManifestError(`the manifest breaks the rules: ${checked.error}`);
    return checked.manifest;
  }

  private async installedText(): Promise<Buffer> {
    try {
      return await fs.promises.readFile(path.join(this.state.dir, MANIFEST));
    } catch (err) {
      throw new StateError(`cannot read ${MANIFEST}: ${(err as Error).message}`);
    }
  }

  /** The installed build's manifest (checked again: the state folder is read, not trusted), or null. */
  private async installed(): Promise<GameManifest | null> {
    if ((await statOrNull(path.join(this.state.dir, MANIFEST))) === null) return null;
    try {
      return GameManager.parse(await this.installedText(), true);
    } catch (err) {
      if (err instanceof ManifestError) throw new StateError(`${MANIFEST}: ${err.message}`);
      throw err;
    }
  }

  private async requireInstalled(): Promise<GameManifest> {
    const manifest = await this.installed();
    if (manifest === null) throw new StateError('no game build is installed: run game update first');
    return manifest;
  }

  private async quickState(): Promise<QuickState> {
    const quick = await this.state.readJson<QuickState>(FILES, {});
    return typeof quick === 'object' && quick !== null && !Array.isArray(quick) ? quick : {};
  }

  /**
   * Whether the file on disk (`stat`) is `file`: by the size and time recorded (unless `full`), else
   * by its hash (the record then updated).
   */
  private async matches(file: ManifestFile, stat: fs.Stats, quick: QuickState, full: boolean): Promise<boolean> {
    if (stat.size !== file.size) return false;
    const seen = quick[file.path];
    if (!full && seen !== undefined && seen.size === stat.size && seen.mtimeMs === stat.mtimeMs) return true;
    if (!(await matchesWhole(path.join(this.gameDir, file.path), file))) return false;
    quick[file.path] = { size: stat.size, mtimeMs: stat.mtimeMs };
    return true;
  }

  /** Files of the game folder matching a `remove` pattern and not listed (pattern segments walked, nothing else read). */
  private async removeMatches(manifest: GameManifest): Promise<string[]> {
    const listed = new Set(manifest.files.map((f) => key(f.path)));
    const found = new Set<string>();
    for (const pattern of manifest.remove) {
      const segments = pattern.split('/');
      let dirs = [''];
      for (const [i, segment] of segments.entries()) {
        const last = i === segments.length - 1;
        const matches = globMatcher(segment);
        const next: string[] = [];
        for (const dir of dirs) {
          let entries: fs.Dirent[];
          try {
            entries = await fs.promises.readdir(path.join(this.gameDir, dir), { withFileTypes: true });
          } catch {
            continue;
          }
          for (const entry of entries) {
            const rel = dir === '' ? entry.name : `${dir}/${entry.name}`;
            if (rel === WORK || !matches(entry.name)) continue;
            if (last ? entry.isFile() || entry.isSymbolicLink() : entry.isDirectory()) next.push(rel);
          }
        }
        dirs = next;
      }
      for (const file of dirs) if (!listed.has(key(file))) found.add(file);
    }
    return [...found].sort();
  }

  /** Plans `target` over what is on disk: which files to build, which to delete, how many kept. */
  private async plan(
    target: GameManifest,
    installed: GameManifest | null,
    full: boolean,
    options: GameOperationOptions,
  ): Promise<Plan> {
    const quick = await this.quickState();
    const before = new Map((installed?.files ?? []).map((f) => [key(f.path), f]));
    const builds: Build[] = [];
    const modes: ManifestFile[] = [];
    const kept: ManifestFile[] = [];
    const stats = await statAll(target.files.map((f) => path.join(this.gameDir, f.path)));
    for (const [done, file] of target.files.entries()) {
      checkAbort(options.signal);
      options.onProgress?.({ phase: 'plan', files: target.files.length, done });
      const stat = stats[done] ?? null;
      const kind = before.has(key(file.path)) ? 'changed' : 'added';
      if (file.policy === 'initial') {
        if (stat === null) builds.push({ file, kind });
        else kept.push(file);
        continue;
      }
      const old = before.get(key(file.path));
      const seen = old && quick[old.path];
      if (
        !full &&
        old !== undefined &&
        old.sha256 !== file.sha256 &&
        seen?.size === stat?.size &&
        seen?.mtimeMs === stat?.mtimeMs
      ) {
        // The installed version, as last verified (its size and time): not the new content, and not hashed to learn so.
        builds.push({ file, kind });
        continue;
      }
      const sameQuick = !full && old?.sha256 === file.sha256;
      if (stat !== null && stat.isFile() && (await this.matches(file, stat, sameQuick ? quick : {}, !sameQuick))) {
        quick[file.path] = { size: stat.size, mtimeMs: stat.mtimeMs };
        kept.push(file);
        // Kept (an old copy's file adopted, say), with the execute bit the manifest asks where there is one.
        if (process.platform !== 'win32' && ((stat.mode & 0o111) !== 0) !== file.executable) modes.push(file);
      } else {
        builds.push({ file, kind });
      }
    }
    // A file the installed build listed and the target does not is deleted only when it was `exact` there
    // and is still what that build installed; an `initial` file is the player's; a changed one is left.
    const listed = new Set(target.files.map((f) => key(f.path)));
    const deletes = new Set<string>();
    const left: string[] = [];
    for (const old of installed?.files ?? []) {
      if (listed.has(key(old.path)) || old.policy === 'initial') continue;
      const stat = await statOrNull(path.join(this.gameDir, old.path));
      if (stat === null) continue;
      if (stat.isFile() && (await this.matches(old, stat, quick, full))) deletes.add(old.path);
      else left.push(old.path);
    }
    for (const file of await this.removeMatches(target)) deletes.add(file);
    const spellings = await this.misspelt(kept);
    return {
      builds,
      deletes: [...deletes].sort(),
      left: left.sort(),
      unchanged: kept.length,
      quick,
      modes,
      spellings,
    };
  }

  /**
   * The files of `kept` whose name on disk differs from the manifest's only in case (a case-insensitive
   * file system found them), each with that name: renamed to the manifest's spelling. Each folder is
   * listed once; a folder's own spelling is left as it is.
   */
  private async misspelt(kept: readonly ManifestFile[]): Promise<Plan['spellings']> {
    if (!CASE_INSENSITIVE) return [];
    const listings = new Map<string, string[]>();
    const found: Plan['spellings'] = [];
    for (const file of kept) {
      const dir = path.posix.dirname(file.path);
      const name = path.posix.basename(file.path);
      let names = listings.get(key(dir));
      if (names === undefined) {
        names = await fs.promises.readdir(path.join(this.gameDir, dir)).catch(() => []);
        listings.set(key(dir), names);
      }
      if (names.includes(name)) continue;
      const onDisk = names.find((entry) => key(entry) === key(name));
      if (onDisk !== undefined) found.push({ file, onDisk: path.posix.join(dir, onDisk) });
    }
    return found;
  }

  /**
   * Where each chunk the builds need may already be on disk: in the installed files at the installed
   * manifest's offsets, and (a folder holding an unpacked copy, or a damaged file) at the target's
   * offsets of the same path. Every source is re-hashed when read.
   */
  private async sources(target: GameManifest, installed: GameManifest | null): Promise<Map<string, Source[]>> {
    const files = [...(installed?.files ?? []), ...target.files];
    const stats = await statAll(files.map((f) => path.join(this.gameDir, f.path)));
    const found = new Map<string, Source[]>();
    for (const [i, file] of files.entries()) {
      // A file not on disk holds nothing to read.
      if (!stats[i]?.isFile()) continue;
      let offset = 0;
      for (const [name, size] of file.chunks) {
        const list = found.get(name) ?? [];
        // A few places are enough (a chunk repeated thousands of times in one file is tried a few times, not each).
        if (list.length < SOURCES_PER_CHUNK && !list.some((s) => s.path === file.path && s.offset === offset)) {
          list.push({ path: file.path, offset });
        }
        found.set(name, list);
        offset += size;
      }
    }
    return found;
  }

  /**
   * Adopting an old copy (a first install, no build recorded): each file to build that is on disk
   * (the old copy's file of the same name) is cut as the publisher cuts (FastCDC, `GAME_CHUNK_SIZES`),
   * and every chunk of it that a place needs becomes a source, ahead of the guesses at manifest
   * offsets (an insertion shifts them); as every source, re-hashed when read. So an old copy with
   * edits is reused wherever its bytes moved, as casync's seeds are.
   */
  private async adopt(
    builds: readonly Build[],
    needed: ReadonlyMap<string, unknown>,
    sources: Map<string, Source[]>,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const chunker = new Chunker(GAME_CHUNK_SIZES);
    const stats = await statAll(builds.map((b) => path.join(this.gameDir, b.file.path)));
    for (const [i, { file }] of builds.entries()) {
      checkAbort(signal);
      if (!stats[i]?.isFile()) continue;
      let cut;
      try {
        cut = await chunkFile(path.join(this.gameDir, file.path), chunker);
      } catch {
        continue; // unreadable now (in use, gone): nothing to adopt from it
      }
      const found = new Map<string, Source[]>();
      let offset = 0;
      for (const [name, size] of cut.chunks) {
        const list = found.get(name) ?? [];
        if (needed.has(name) && list.length < SOURCES_PER_CHUNK)
          found.set(name, [...list, { path: file.path, offset }]);
        offset += size;
      }
      for (const [name, list] of found) {
        const known = sources.get(name) ?? [];
        const fresh = known.filter((s) => !list.some((l) => l.path === s.path && l.offset === s.offset));
        sources.set(name, [...list, ...fresh].slice(0, SOURCES_PER_CHUNK));
      }
    }
  }

  /** Whether a source on disk held the chunk (its bytes then written at `places`): the first whose bytes hash to its name. */
  private async fromDisk(
    chunk: { readonly name: string; readonly size: number },
    places: readonly Place[],
    sources: readonly Source[],
    into: ChunkBuffer,
    hasher: Hasher,
  ): Promise<boolean> {
    for (const source of sources) {
      const file = path.join(this.gameDir, source.path);
      if (await chunkAt(file, source.offset, chunk, { write: places }, into, hasher)) return true;
    }
    return false;
  }

  /**
   * Plans, gathers and swaps in `target`; the state then records it as installed. Each file to build
   * is a work file (its name stable for its path and content, so that a run cut short is resumed
   * from what it wrote); every chunk is hashed once as it is read or downloaded and written straight
   * to each place the builds need it, then each work file is checked whole. Every path to write or
   * delete is checked by `guard` before the first write and again before the first rename: a link is
   * `UnsafePathError`; one another process holds is `InUseError` (asked while assembling, its retries
   * overlapping the download, and again just before the first rename); a path in the way (a folder with files in it) stops an update (`BlockedError`,
   * nothing renamed) and is left out of a repair (answered in `blocked`). A failure before the first
   * rename clears the record: nothing is under way, the work files are kept for the next run; a
   * cancel (`AbortedError`) keeps it, as a kill does, and the next call resumes.
   */
  private async apply(
    target: GameManifest,
    text: Buffer,
    installed: GameManifest | null,
    full: boolean,
    options: GameOperationOptions,
    guard: FolderGuard,
  ) {
    const plan = await this.plan(target, installed, full, options);
    const filesDir = path.join(this.workDir, 'files');
    const inGame = (file: string) => path.join(this.gameDir, file);
    // May each path be touched? Before the first write (the snapshot, the work folder).
    const workInTheWay = guard.check(filesDir, 'folder');
    if (workInTheWay !== null) throw new BlockedError([workInTheWay]);
    // A dropped file left in place (changed since installed) is still refused when it is a link.
    await guard.checkAll([...plan.deletes, ...plan.left].map(inGame), 'delete');
    await guard.checkAll(
      [...plan.modes, ...plan.spellings.map((s) => s.file)].map((f) => inGame(f.path)),
      'file',
    );
    const inTheWay = await guard.checkAll(
      plan.builds.map((b) => inGame(b.file.path)),
      'file',
    );
    const blocked = new Set(inTheWay.filter((p) => p !== null));
    if (blocked.size > 0 && !full) throw new BlockedError([...blocked].sort());
    const builds = plan.builds.filter((_, i) => inTheWay[i] === null);
    const mirrors: MirrorReport[] = this.mirrors.map((url) => ({ url, chunks: 0, failures: 0 }));
    const done = {
      builds: builds as readonly Build[],
      deletes: plan.deletes,
      unchanged: plan.unchanged,
      left: plan.left,
      mirrors,
      downloadedBytes: 0,
      reusedBytes: 0,
      blocked: [...blocked].sort(),
    };
    // Files kept: named as the manifest spells them, with the execute bit it asks.
    const modes = async () => {
      for (const { file, onDisk } of plan.spellings) await guard.respell(inGame(onDisk), inGame(file.path));
      for (const file of plan.modes) {
        const stat = await statOrNull(inGame(file.path));
        if (stat === null) continue;
        const mode = stat.mode & 0o7777;
        await guard.chmod(inGame(file.path), file.executable ? mode | 0o111 : mode & ~0o111);
      }
    };
    if (builds.length === 0 && plan.deletes.length === 0 && installed?.buildCode === target.buildCode) {
      await modes();
      await this.state.writeJson(FILES, plan.quick);
      // A work folder an earlier run could not remove (a file in it was held) is of no use now.
      if ((await statOrNull(this.workDir)) !== null) await guard.removeWork(this.workDir);
      return done;
    }
    // WTF is kept before anything of the game folder changes (an `initial` file may be written there).
    await snapshotBeforeChange(this.state, this.gameDir, full ? 'game-repair' : 'game-update', options.keep);
    await fs.promises.mkdir(filesDir, { recursive: true });
    const renames = builds.map(({ file, kind }) => ({ work: workName(file), path: file.path, kind }));
    const wanted = new Set(renames.map((r) => r.work));
    // Work files of another target (an earlier run toward another build) are of no use.
    for (const entry of await fs.promises.readdir(filesDir)) {
      if (!wanted.has(entry)) await guard.removeTree(path.join(filesDir, entry));
    }
    const record: OperationRecord = {
      from: installed?.buildCode ?? null,
      to: target.buildCode,
      phase: 'assembling',
      renames,
      deletes: plan.deletes,
      left: plan.left,
    };
    await this.state.writeJson(OPERATION, record);
    // Can every path to replace or delete be (no other process holds it)? Asked while the files are
    // assembled, so that the 10 s a held one is tried again overlap the download; answered once the
    // work files are whole (kept for the rerun when it is `InUseError`).
    const asking = new AbortController();
    const replaceable = guard.replaceable(
      [
        ...renames.map((r) => inGame(r.path)),
        ...plan.deletes.map(inGame),
        ...plan.spellings.map((s) => inGame(s.onDisk)),
      ],
      asking.signal,
    );
    replaceable.catch(() => undefined);
    let ready: OperationRecord;
    try {
      const assembled = await this.assemble({ target, installed, record, builds }, options, done.mirrors);
      done.downloadedBytes = assembled.downloadedBytes;
      done.reusedBytes = assembled.reusedBytes;
      await replaceable;
      // Every path to replace or delete, once more, just before the first rename.
      const late = await guard.beforeRenames(
        renames.map((r) => inGame(r.path)),
        plan.deletes.map(inGame),
      );
      const lateBlocked = new Set(late.filter((p) => p !== null));
      if (lateBlocked.size > 0 && !full) throw new BlockedError([...lateBlocked].sort());
      done.blocked = [...new Set([...done.blocked, ...lateBlocked])].sort();
      done.builds = builds.filter((_, i) => late[i] === null);
      ready = { ...record, phase: 'renaming', renames: renames.filter((_, i) => late[i] === null) };
      await writeDurably(path.join(this.workDir, 'manifest.json'), text);
    } catch (err) {
      asking.abort();
      if (!(err instanceof AbortedError)) await removeDurably(path.join(this.state.dir, OPERATION));
      throw err;
    }
    await this.state.writeJson(OPERATION, ready);
    await this.finish(ready, guard);
    await modes();
    return done;
  }

  /**
   * Fills and checks every work file of `job.record` (what an earlier run wrote is kept): free space
   * checked first, chunks gathered, each work file checked whole.
   */
  private async assemble(
    job: {
      readonly target: GameManifest;
      readonly installed: GameManifest | null;
      readonly record: OperationRecord;
      readonly builds: readonly Build[];
    },
    options: GameOperationOptions,
    mirrors: MirrorReport[],
  ): Promise<{ downloadedBytes: number; reusedBytes: number }> {
    const { signal } = options;
    const { builds } = job;
    const { renames } = job.record;
    const filesDir = path.join(this.workDir, 'files');
    // What an earlier run wrote is kept; the space still to fill is checked before a byte is written.
    const workStats = await statAll(renames.map(({ work }) => path.join(filesDir, work)));
    const partial = new Set(renames.filter((_, i) => workStats[i]?.isFile()).map(({ work }) => work));
    const allocated = workStats.reduce((sum, stat) => sum + (stat?.isFile() ? stat.blocks * 512 : 0), 0);
    const buildBytes = builds.reduce((sum, b) => sum + b.file.size, 0);
    await this.checkSpace(Math.max(0, buildBytes - allocated));
    // A work file is made by its first write, on the hashing thread; here only the empty ones are
    // made and those an earlier run left are given their size.
    await sizeAll(
      builds
        .map(({ file }, i) => ({
          file: path.join(filesDir, renames[i]!.work),
          size: file.size,
          keep: partial.has(renames[i]!.work),
        }))
        .filter(({ size, keep }) => keep || size === 0),
    );

    // Where each chunk goes: every (work file, offset) of the builds.
    const places = new Map<string, { size: number; at: Place[] }>();
    for (const [i, { file }] of builds.entries()) {
      let offset = 0;
      for (const [name, size] of file.chunks) {
        const entry = places.get(name) ?? { size, at: [] };
        const work = renames[i]!.work;
        entry.at.push({ file: path.join(filesDir, work), offset, size: file.size, partial: partial.has(work) });
        places.set(name, entry);
        offset += size;
      }
    }

    // Each place filled is told to the whole checks, on their thread.
    const hasher = new Hasher();
    try {
      const sources = await this.sources(job.target, job.installed);
      // A first install over an old copy: what its same-named files hold, wherever it is in them.
      if (job.installed === null) await this.adopt(builds, places, sources, signal);
      const gathered = await this.gather(places, sources, mirrors, hasher, options);

      // Each work file checked whole (a chunk list that does not make the file is refused here); once
      // `whole` has answered for a file, the hashing thread has flushed it to disk. Asked a slice of
      // files at a time (one round trip to the thread per file took 0.1 ms each, mostly waiting).
      for (let from = 0; from < builds.length; from += SLICE) {
        checkAbort(signal);
        options.onProgress?.({ phase: 'assemble', files: builds.length, done: from });
        const slice = builds.slice(from, from + SLICE).map(({ file }, i) => ({
          file,
          out: path.join(filesDir, renames[from + i]!.work),
        }));
        const digests = await Promise.all(slice.map(({ file, out }) => hasher.whole(out, file.size)));
        for (const [i, { file, out }] of slice.entries()) {
          if (digests[i] !== file.sha256) {
            await fs.promises.rm(out, { force: true });
            throw new IntegrityError(`${file.path} assembled is not the manifest's (size or SHA-256)`);
          }
          fs.chmodSync(out, file.executable ? 0o755 : 0o644);
        }
      }
      return gathered;
    } finally {
      await hasher.close();
    }
  }

  /** `DiskSpaceError` unless the game folder's file system has `bytes` free. */
  private async checkSpace(bytes: number): Promise<void> {
    const stats = await fs.promises.statfs(this.workDir);
    const free = stats.bavail * stats.bsize;
    if (free < bytes) throw new DiskSpaceError(bytes, free);
  }

  /**
   * Fills every place, over `connections` workers taking the chunks in order: a chunk already in
   * place (an earlier run) is kept; else read from disk where a source hashes right; else downloaded
   * (from the mirrors in order, each given up for the run at its first wrong answer or network
   * failure, then the service; used only when its bytes hash to its name) over keep-alive
   * connections. Reading from disk and downloading so overlap.
   */
  private async gather(
    places: Map<string, { size: number; at: Place[] }>,
    sources: Map<string, Source[]>,
    mirrors: MirrorReport[],
    hasher: Hasher,
    options: GameOperationOptions,
  ): Promise<{ downloadedBytes: number; reusedBytes: number }> {
    const queue = [...places];
    /** Whether a chunk may be found on disk: in a place an earlier run filled, or a source. */
    const onDisk = (name: string, at: readonly Place[]) => sources.has(name) || at.some((p) => p.partial);
    // What is to be downloaded as far as known: chunks with nowhere on disk to look (a chunk that is not
    // where it was looked for adds to it).
    let total = queue.reduce((sum, [name, { size, at }]) => sum + (onDisk(name, at) ? 0 : size), 0);
    let bytes = 0;
    let reusedBytes = 0;
    const started = Date.now();
    /**
     * Mirrors not asked again this run: one that served a chunk wrong (another hash, too large), or
     * missed a deadline (no answer in time, below the speed floor), or could not be reached or cut the
     * answer: so a mirror that accepts connections and never answers costs one deadline per run, not
     * one per chunk. A mirror that answers otherwise (a 404: a partial copy) is asked for the next chunk.
     */
    const givenUp = new Set<MirrorReport>();
    const report = () =>
      options.onProgress?.({
        phase: 'download',
        bytes,
        total,
        rate: bytes / Math.max(0.001, (Date.now() - started) / 1000),
      });
    /** A chunk downloaded into `into` (a worker's buffer) and written at `places`: from a mirror that has it right, else the service. */
    const fetchOne = async (name: string, size: number, places: readonly Place[], into: ChunkBuffer): Promise<void> => {
      for (const mirror of mirrors) {
        if (givenUp.has(mirror)) continue;
        const url = `${mirror.url}/${name.slice(0, 2)}/${name}`;
        try {
          const body = await downloadInto(dispatcher, url, size, into.bytes, this.updates.deadlines, options.signal);
          if ((await hasher.chunk(into, body.length, name, { write: places })) === name) {
            mirror.chunks++;
            return;
          }
          givenUp.add(mirror);
        } catch (err) {
          if (err instanceof AbortedError) throw err;
          if (err instanceof NetworkError || err instanceof AnswerTooLargeError) givenUp.add(mirror);
        }
        mirror.failures++;
      }
      const url = this.updates.url(`/api/game/chunks/${name}`);
      await withRetries(
        async () => {
          const body = await downloadInto(dispatcher, url, size, into.bytes, this.updates.deadlines, options.signal);
          if ((await hasher.chunk(into, body.length, name, { write: places })) !== name)
            throw new IntegrityError(`the service's chunk ${name} does not hash to its name`);
        },
        this.updates.retry,
        options.signal,
      );
    };
    const largest = queue.reduce((most, [, { size }]) => Math.max(most, size), 1);
    let taken = 0;
    const worker = async () => {
      const into = ChunkBuffer.of(largest);
      for (let next = queue[taken++]; next !== undefined; next = queue[taken++]) {
        checkAbort(options.signal);
        const [name, { size, at }] = next;
        const chunk = { name, size };
        // Places an earlier run filled are kept; the chunk found in one is copied to the others.
        let holder: Place | null = null;
        const empty: Place[] = [];
        for (const place of at) {
          if (place.partial && (await chunkAt(place.file, place.offset, chunk, { present: [place] }, into, hasher)))
            holder ??= place;
          else empty.push(place);
        }
        // Chunks taken from work files an earlier run kept count as reused (kept in place, or copied).
        reusedBytes += size * (at.length - empty.length);
        if (empty.length === 0) continue;
        if (holder !== null && (await chunkAt(holder.file, holder.offset, chunk, { write: empty }, into, hasher))) {
          reusedBytes += size * empty.length;
          continue;
        }
        if (await this.fromDisk(chunk, empty, sources.get(name) ?? [], into, hasher)) {
          reusedBytes += size * empty.length;
          continue;
        }
        if (onDisk(name, at)) total += size;
        await fetchOne(name, size, empty, into);
        bytes += size;
        report();
      }
    };
    const dispatcher = await chunkConnections(this.connections);
    try {
      await Promise.all(Array.from({ length: Math.min(this.connections, Math.max(1, queue.length)) }, worker));
    } finally {
      await dispatcher.destroy();
    }
    return { downloadedBytes: bytes, reusedBytes };
  }

  /**
   * Finishes an operation whose files are all ready: renames them in and deletes (each through the
   * guard), flushes the folders they changed, then records the build (the installed manifest and
   * `files.json` written durably, the record deleted), then deletes the work folder.
   */
  private async finish(record: OperationRecord, guard: FolderGuard): Promise<void> {
    const filesDir = path.join(this.workDir, 'files');
    const works = await statAll(record.renames.map(({ work }) => path.join(filesDir, work)));
    for (const [i, { work, path: target }] of record.renames.entries()) {
      if (i % SLICE === SLICE - 1) await turn();
      if (works[i] === null) continue; // renamed before a kill
      await guard.replace(path.join(filesDir, work), path.join(this.gameDir, target));
    }
    for (const file of record.deletes) await guard.remove(path.join(this.gameDir, file));
    await guard.flush();
    const text = await fs.promises.readFile(path.join(this.workDir, 'manifest.json'));
    const manifest = GameManager.parse(text, true);
    const quick = await this.quickState();
    const listed = new Set(manifest.files.map((f) => f.path));
    for (const old of Object.keys(quick)) if (!listed.has(old)) delete quick[old];
    const renamed = await statAll(record.renames.map(({ path: target }) => path.join(this.gameDir, target)));
    for (const [i, { path: target }] of record.renames.entries()) {
      const stat = renamed[i];
      if (stat) quick[target] = { size: stat.size, mtimeMs: stat.mtimeMs };
    }
    await writeDurably(path.join(this.state.dir, MANIFEST), text);
    await this.state.writeJson(FILES, quick);
    await removeDurably(path.join(this.state.dir, OPERATION));
    await guard.removeWork(this.workDir);
  }

  /**
   * A killed run: finished when it was renaming (answered, for the call to tell), else undone (its
   * downloaded chunks kept for the next run).
   */
  private async recover(guard: FolderGuard): Promise<OperationRecord | null> {
    const record = await this.state.readJson<OperationRecord | null>(OPERATION, null);
    if (record === null) return null;
    if (!Array.isArray(record.renames) || !Array.isArray(record.deletes)) {
      throw new StateError(`${OPERATION} is not an operation record`);
    }
    if (record.renames.some((r) => typeof r.work !== 'string' || !/^[0-9a-f]{32}$/.test(r.work))) {
      throw new StateError(`${OPERATION} names a work file outside ${WORK}/files`);
    }
    for (const p of [...record.renames.map((r) => r.path), ...record.deletes]) {
      if (typeof p !== 'string' || pathFault(p) !== null) throw new StateError(`${OPERATION} names ${String(p)}`);
    }
    if (record.phase === 'renaming') {
      await this.finish(record, guard);
      return record;
    }
    // Nothing of the game folder changed; what the work files hold is kept for the next run.
    await removeDurably(path.join(this.state.dir, OPERATION));
    return null;
  }
}
