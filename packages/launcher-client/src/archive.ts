/**
 * Safe extraction of an addon archive (a zip) into a fresh folder. The whole central directory is
 * checked before a byte is written: every entry must be a regular file or folder under one top-level
 * folder, with a name that means the same thing on every system (no `..`, absolute path, drive
 * letter, backslash, device name or character Windows refuses), no two names that differ only by
 * case, at most `maxEntries` entries and `maxTotalBytes` declared. Then each file is streamed out
 * (memory stays flat) and refused if it inflates past its declared size (yauzl's `validateEntrySizes`).
 * yauzl reads the zip and refuses `..`, absolute paths, drive letters and backslashes
 * (`strictFileNames`); the rest (links, case, sizes, roots) is checked here.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';
import { AbortedError, ArchiveError } from './errors.js';

export interface ArchiveLimits {
  /** Most entries (files and folders) an archive may hold (default 20 000). */
  readonly maxEntries: number;
  /** Most bytes its files may unpack to, in total (default 2 GiB). */
  readonly maxTotalBytes: number;
}

export const DEFAULT_ARCHIVE_LIMITS: ArchiveLimits = { maxEntries: 20_000, maxTotalBytes: 2 * 1024 ** 3 };

/** What an archive unpacked to, relative to the destination (`/`-separated). */
export interface ExtractedArchive {
  /** Its top-level folders, sorted. */
  readonly folders: string[];
  /** Its files, sorted. */
  readonly files: string[];
  /** The bytes of its files. */
  readonly bytes: number;
}

/** A file by its `/`-separated path relative to some folder, and the SHA-256 of its bytes (lowercase hex). */
export interface HashedFile {
  readonly path: string;
  readonly sha256: string;
}

/** Unix file types in the high half of the external attributes (made on Unix, `versionMadeBy >> 8 === 3`). */
const S_IFMT = 0o170000;
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;
const UNIX = 3;
/** Separators, and characters Windows refuses in a name (`:` would name an alternate data stream). */
const WINDOWS_FORBIDDEN = /[/\\<>:"|?*]/;
const WINDOWS_DEVICES = /^(con|prn|aux|nul|com\d|lpt\d)(\..*)?$/i;
const STORED = 0;
const DEFLATED = 8;

/** Why `segment` cannot be a path segment on every system, or null. */
export function badSegment(segment: string): string | null {
  if (segment === '' || segment === '.' || segment === '..') return `an empty, "." or ".." segment`;
  if (WINDOWS_FORBIDDEN.test(segment) || [...segment].some((c) => c.charCodeAt(0) < 0x20))
    return 'a character Windows refuses';
  if (WINDOWS_DEVICES.test(segment)) return 'a Windows device name';
  if (/[. ]$/.test(segment)) return 'a name ending in a dot or space (Windows drops it)';
  return null;
}

interface CheckedEntry {
  readonly entry: yauzl.Entry;
  /** Segments of the path; a folder's without the trailing empty one. */
  readonly segments: string[];
  readonly folder: boolean;
}

/** Refuses an entry that is not a plain file or folder with a safe name, answering its parts. */
function checkEntry(entry: yauzl.Entry): CheckedEntry {
  const name = entry.fileName;
  const refuse = (why: string) => new ArchiveError(`archive entry ${JSON.stringify(name)}: ${why}`);
  const folder = name.endsWith('/');
  const segments = (folder ? name.slice(0, -1) : name).split('/');
  for (const segment of segments) {
    const why = badSegment(segment);
    if (why !== null) throw refuse(`has ${why}`);
  }
  if (!folder && segments.length < 2) throw refuse('sits at the archive root (every file belongs in a folder)');
  const mode = entry.externalFileAttributes >>> 16;
  const type = mode & S_IFMT;
  if (entry.versionMadeBy >> 8 === UNIX && type !== 0 && type !== (folder ? S_IFDIR : S_IFREG)) {
    throw refuse(type === 0o120000 ? 'is a symbolic link' : 'is not a regular file or folder');
  }
  if (entry.isEncrypted()) throw refuse('is encrypted');
  if (!folder && entry.compressionMethod !== STORED && entry.compressionMethod !== DEFLATED) {
    throw refuse(`uses compression method ${entry.compressionMethod}`);
  }
  if (folder && entry.uncompressedSize !== 0) throw refuse('is a folder with content');
  return { entry, segments, folder };
}

/** Refuses two entries whose paths differ only by case, and a file where another entry needs a folder. */
function checkNames(entries: readonly CheckedEntry[]): void {
  const files = new Map<string, string>();
  const folders = new Map<string, string>();
  const key = (segments: readonly string[]) => segments.join('/').normalize('NFC').toLowerCase();
  for (const { entry, segments, folder } of entries) {
    for (let depth = 1; depth < segments.length; depth++) folders.set(key(segments.slice(0, depth)), entry.fileName);
    if (folder) continue;
    const k = key(segments);
    const other = files.get(k);
    if (other !== undefined) {
      throw new ArchiveError(
        `archive entries ${JSON.stringify(other)} and ${JSON.stringify(entry.fileName)} name one file on Windows`,
      );
    }
    files.set(k, entry.fileName);
  }
  for (const [k, name] of files) {
    const other = folders.get(k);
    if (other !== undefined) {
      throw new ArchiveError(
        `archive entry ${JSON.stringify(name)} is a file where ${JSON.stringify(other)} needs a folder`,
      );
    }
  }
}

function archiveFailure(zipFile: string, err: unknown): unknown {
  if (err instanceof ArchiveError || err instanceof AbortedError) return err;
  // A failed system call (a full disk, …) is not the archive's fault; yauzl's and zlib's errors are.
  if ((err as NodeJS.ErrnoException).syscall !== undefined) return err;
  return new ArchiveError(`${path.basename(zipFile)}: ${(err as Error).message}`, { cause: err });
}

/** An archive whose entries were all checked: its open zip, its entries in order, the bytes they declare. */
interface CheckedArchive {
  readonly zip: yauzl.ZipFile;
  readonly entries: readonly CheckedEntry[];
  readonly declared: number;
}

/**
 * Opens `zipFile`, checks its whole central directory (see the top of this file), then runs `work`
 * on it and closes it. Throws `ArchiveError` for an archive it refuses or cannot read.
 */
async function withCheckedArchive<T>(
  zipFile: string,
  limits: ArchiveLimits,
  signal: AbortSignal | undefined,
  work: (archive: CheckedArchive) => Promise<T>,
): Promise<T> {
  let zip: yauzl.ZipFile;
  try {
    zip = await yauzl.openPromise(zipFile, { autoClose: false, strictFileNames: true, validateEntrySizes: true });
  } catch (err) {
    throw archiveFailure(zipFile, err);
  }
  try {
    if (zip.entryCount > limits.maxEntries) {
      throw new ArchiveError(`the archive holds ${zip.entryCount} entries, more than ${limits.maxEntries}`);
    }
    const entries: CheckedEntry[] = [];
    let declared = 0;
    for await (const entry of zip.eachEntry()) {
      const checked = checkEntry(entry);
      declared += entry.uncompressedSize;
      if (declared > limits.maxTotalBytes) {
        throw new ArchiveError(`the archive unpacks to more than ${limits.maxTotalBytes} bytes`);
      }
      entries.push(checked);
    }
    if (entries.length === 0) throw new ArchiveError('the archive is empty');
    checkNames(entries);
    return await work({ zip, entries, declared });
  } catch (err) {
    if (signal?.aborted && !(err instanceof ArchiveError)) throw new AbortedError('the extraction was cancelled');
    throw archiveFailure(zipFile, err);
  } finally {
    zip.close();
  }
}

/** The archive's top-level folders, sorted. */
function topFolders(entries: readonly CheckedEntry[]): string[] {
  return [...new Set(entries.map((e) => e.segments[0] ?? ''))].sort();
}

/**
 * Checks the archive `zipFile`, then extracts it into `destination` (a folder that must not exist
 * yet). Throws `ArchiveError` for an archive it refuses; `destination` may then hold part of it (the
 * caller removes it).
 */
export function extractArchive(
  zipFile: string,
  destination: string,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
  signal?: AbortSignal,
): Promise<ExtractedArchive> {
  return withCheckedArchive(zipFile, limits, signal, async ({ zip, entries, declared }) => {
    await fs.promises.mkdir(destination);
    const files: string[] = [];
    for (const { entry, segments, folder } of entries) {
      if (signal?.aborted) throw new AbortedError('the extraction was cancelled');
      const target = path.join(destination, ...segments);
      if (folder) {
        await fs.promises.mkdir(target, { recursive: true });
        continue;
      }
      await fs.promises.mkdir(path.dirname(target), { recursive: true });
      // `wx`: never write through something already there.
      await pipeline(await zip.openReadStreamPromise(entry), fs.createWriteStream(target, { flags: 'wx' }), {
        ...(signal === undefined ? {} : { signal }),
      });
      files.push(segments.join('/'));
    }
    return { folders: topFolders(entries), files: files.sort(), bytes: declared };
  });
}

/**
 * The files of each top-level folder of the archive `zipFile` (checked as `extractArchive` checks
 * it), each with its path inside that folder and the SHA-256 of its bytes, read without unpacking
 * anything to disk. Throws `ArchiveError` for an archive `extractArchive` would refuse.
 */
export function archiveFolderFiles(
  zipFile: string,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
): Promise<Map<string, HashedFile[]>> {
  return withCheckedArchive(zipFile, limits, undefined, async ({ zip, entries }) => {
    const folders = new Map<string, HashedFile[]>(topFolders(entries).map((folder) => [folder, []]));
    for (const { entry, segments, folder } of entries) {
      if (folder) continue;
      const [top = '', ...inside] = segments;
      const hash = createHash('sha256');
      for await (const chunk of await zip.openReadStreamPromise(entry)) hash.update(chunk as Buffer);
      folders.get(top)?.push({ path: inside.join('/'), sha256: hash.digest('hex') });
    }
    return folders;
  });
}
