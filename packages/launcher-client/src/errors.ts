/**
 * Every failure the library reports is one of these, with a `kind` a program can switch on (the CLI
 * prints it). Verification failures (`signature`, `digest`, `stale`, `rollback`, `integrity`,
 * `publisher-signature`, `archive`, `manifest`) mean the answer or file was refused and nothing from it was used or kept.
 * `clock` is a refusal too, but of an answer the server holds fresh: this computer's clock is wrong.
 */
export type ErrorKind =
  | 'signature'
  | 'digest'
  | 'stale'
  | 'clock'
  | 'rollback'
  | 'integrity'
  | 'publisher-signature'
  | 'too-large'
  | 'http'
  | 'network'
  | 'aborted'
  | 'state'
  | 'usage'
  | 'archive'
  | 'conflict'
  | 'not-found'
  | 'manifest'
  | 'disk-space'
  | 'busy'
  | 'unsafe-path'
  | 'blocked'
  | 'in-use';

export abstract class LauncherClientError extends Error {
  abstract readonly kind: ErrorKind;
  /** True for a refused answer or file (a possible attack), false for an ordinary failure. */
  get verification(): boolean {
    return isVerificationKind(this.kind);
  }
  /** The fields a program acts on besides `kind` (the command prints them beside `error` and `kind`). */
  get details(): Record<string, unknown> {
    return {};
  }
}

/** Whether failures of `kind` are refusals by verification (a possible attack). */
export function isVerificationKind(kind: string): boolean {
  return VERIFICATION_KINDS.has(kind as ErrorKind);
}

const VERIFICATION_KINDS: ReadonlySet<ErrorKind> = new Set([
  'signature',
  'digest',
  'stale',
  'rollback',
  'integrity',
  'publisher-signature',
  'archive',
  'manifest',
]);

/** A `LauncherClientError` class of one `name` and `kind`. */
type Failure<N extends string, K extends ErrorKind> = new (
  message?: string,
  options?: ErrorOptions,
) => LauncherClientError & { readonly name: N; readonly kind: K };

/** The base of each error below: its `name` and `kind`. */
function failure<N extends string, K extends ErrorKind>(name: N, kind: K): Failure<N, K> {
  return class extends LauncherClientError {
    override readonly name = name;
    readonly kind = kind;
  };
}

/** The answer has no valid RFC 9421 signature by a trusted key (missing, malformed, untrusted, wrong). */
export class SignatureError extends failure('SignatureError', 'signature') {}

/** The answer's `Content-Digest` is missing, malformed, or not the SHA-256 of the bytes received. */
export class DigestError extends failure('DigestError', 'digest') {}

/**
 * The answer's signature has expired (its `expires` is past, or before an answer already accepted
 * was signed: a replay to a device whose clock was set back), or was made in the future.
 */
export class StaleAnswerError extends failure('StaleAnswerError', 'stale') {}

/** "6 minutes", "1 hour", "3 days": a clock's offset as a person reads it (rounded). */
function readableDuration(ms: number): string {
  const minutes = Math.round(Math.abs(ms) / 60_000);
  const [count, unit] =
    minutes < 60
      ? [minutes, 'minute']
      : minutes < 48 * 60
        ? [Math.round(minutes / 60), 'hour']
        : [Math.round(minutes / (24 * 60)), 'day'];
  return `${count} ${unit}${count === 1 ? '' : 's'}`;
}

/**
 * An answer refused only because its signature's `created`/`expires` disagree with this computer's
 * clock by more than the allowance, while the answer's own `Date` (the server's time, unsigned) falls
 * between them: the server holds it fresh, so the clock here is wrong. Still refused (nothing is
 * accepted on an unsigned word about time), but no sign of an attack. The message is a sentence a
 * launcher can show ("this computer's clock is 6 minutes behind; set it and try again").
 */
export class ClockError extends failure('ClockError', 'clock') {
  constructor(
    /** This computer's clock minus the answer's `Date`, in ms: negative when it is behind. */
    readonly offsetMs: number,
    options?: ErrorOptions,
  ) {
    super(
      `this computer's clock is ${readableDuration(offsetMs)} ${offsetMs < 0 ? 'behind' : 'ahead'}; set it and try again`,
      options,
    );
  }
  override get details(): Record<string, unknown> {
    return { offsetMs: this.offsetMs };
  }
}

/**
 * A verified answer offers a version that is not above the one the launcher runs (full package,
 * without `downgrade: true`) or the patch code it sent (patch): a rollback, refused whatever its
 * signature; nothing was downloaded.
 */
export class RollbackError extends failure('RollbackError', 'rollback') {}

/** The answer is larger than `maxAnswerBytes`: refused as soon as that was known, the rest never read. */
export class AnswerTooLargeError extends failure('AnswerTooLargeError', 'too-large') {}

/** A downloaded file's size or SHA-256 is not what the verified answer said (the file is deleted). */
export class IntegrityError extends failure('IntegrityError', 'integrity') {}

/**
 * With publisher keys pinned: the downloaded file has no minisign signature by one of them, or its
 * trusted comment does not name this package, versionCode and SHA-256 (the file is deleted).
 */
export class PublisherSignatureError extends failure('PublisherSignatureError', 'publisher-signature') {}

/** The service answered with an unexpected status. */
export class HttpError extends failure('HttpError', 'http') {
  constructor(
    readonly status: number,
    readonly url: string,
    /** The answer's `{error}` text, when it had one. */
    readonly serverMessage: string | null,
    /** The answer's `Retry-After` in ms, when it had one. */
    readonly retryAfterMs: number | null = null,
  ) {
    super(`${url} answered ${status}${serverMessage ? `: ${serverMessage}` : ''}`);
  }
  override get details(): Record<string, unknown> {
    return { status: this.status, url: this.url, serverMessage: this.serverMessage, retryAfterMs: this.retryAfterMs };
  }
}

/** The request did not get an answer (refused, reset, timed out, cut off). */
export class NetworkError extends failure('NetworkError', 'network') {}

/** The caller's `AbortSignal` fired. */
export class AbortedError extends failure('AbortedError', 'aborted') {}

/** The state folder could not be read or written, or holds something unreadable. */
export class StateError extends failure('StateError', 'state') {}

/** An addon archive was refused (a path out of its folder, a link, a zip bomb, …); nothing was changed. */
export class ArchiveError extends failure('ArchiveError', 'archive') {}

/** Two addons claim one folder, a dependency cycle, or a removal another installed addon needs. */
export class ConflictError extends failure('ConflictError', 'conflict') {}

/** The catalogue has no such addon (or no release of it), or the addon is not installed. */
export class NotFoundError extends failure('NotFoundError', 'not-found') {}

/** The caller asked for something that cannot be done as asked (a malformed option, …). */
export class UsageError extends failure('UsageError', 'usage') {}

/** A game manifest breaks the rules of `game-files.md` or does not match the verified check-update that named it. */
export class ManifestError extends failure('ManifestError', 'manifest') {}

/** The game folder's file system lacks the free space an operation needs (`bytesNeeded` more than is free). */
export class DiskSpaceError extends failure('DiskSpaceError', 'disk-space') {
  constructor(
    readonly bytesNeeded: number,
    readonly bytesFree: number,
  ) {
    super(`${bytesNeeded} bytes are needed in the game folder, ${bytesFree} are free`);
  }
  override get details(): Record<string, unknown> {
    return { bytesNeeded: this.bytesNeeded, bytesFree: this.bytesFree };
  }
}

/** Who holds the operation lock of a state folder (`operation.lock`). */
export interface LockHolder {
  /** The process id. */
  readonly pid: number;
  /** What it is doing (`game-update`, `addons-install`, `backup-restore`, …). */
  readonly operation: string;
  /** When it took the lock (ISO 8601). */
  readonly since: string;
}

/**
 * Another operation on the same state folder (and so the same game folder) is running: this one
 * stopped at once, before reading or writing anything. `pid` names the process that holds the lock.
 */
export class BusyError extends failure('BusyError', 'busy') {
  readonly pid: number;
  readonly operation: string;
  readonly since: string;
  constructor(holder: LockHolder) {
    super(`another launcher-client process (pid ${holder.pid}) is running ${holder.operation} since ${holder.since}`);
    this.pid = holder.pid;
    this.operation = holder.operation;
    this.since = holder.since;
  }
  override get details(): Record<string, unknown> {
    return { pid: this.pid, operation: this.operation, since: this.since };
  }
}

/**
 * A path the operation would write, rename or delete is, or lies behind, a symbolic link, junction
 * or mount point inside the game folder (or lies outside it): the operation stopped before its
 * first write. `path` is relative to the game folder, `/`-separated.
 */
export class UnsafePathError extends failure('UnsafePathError', 'unsafe-path') {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path} ${why}: the launcher never writes, renames or deletes through a link or mount point`);
  }
  override get details(): Record<string, unknown> {
    return { path: this.path };
  }
}

/**
 * A folder that is not empty, or a file where a folder must be, occupies paths the operation must
 * write (`paths`, relative to the game folder). An update stops before its first rename; a repair
 * restores everything else first and answers what it did in `repaired` and `removed`.
 */
export class BlockedError extends failure('BlockedError', 'blocked') {
  constructor(
    readonly paths: readonly string[],
    readonly done: { readonly repaired: readonly string[]; readonly removed: readonly string[] } | null = null,
  ) {
    super(
      `${paths.join(', ')} ${paths.length === 1 ? 'is' : 'are'} in the way of the game's files (a folder with files in it, or a file where a folder must be): move ${paths.length === 1 ? 'it' : 'them'} away and run again`,
    );
  }
  override get details(): Record<string, unknown> {
    return {
      paths: this.paths,
      ...(this.done === null ? {} : { repaired: this.done.repaired, removed: this.done.removed }),
    };
  }
}

/**
 * Files or folders the operation must replace or delete are held by another process (Windows: the
 * game is running, or a scanner will not let go), still after retrying for 10 s: the operation stopped
 * before its first rename (nothing renamed, the work files kept for the rerun), or, during a swap, at
 * that path (the next command finishes it). `paths` are relative to the game folder, `/`-separated.
 */
export class InUseError extends failure('InUseError', 'in-use') {
  constructor(
    readonly paths: readonly string[],
    options?: ErrorOptions,
  ) {
    super(
      `${paths.join(', ')} ${paths.length === 1 ? 'is' : 'are'} in use by another program (is the game running?): close it and run again`,
      options,
    );
  }
  override get details(): Record<string, unknown> {
    return { paths: this.paths };
  }
}
