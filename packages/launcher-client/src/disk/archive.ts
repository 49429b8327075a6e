/**
 * Safe extraction of an addon archive (a zip) into a fresh folder. The whole archive is checked
 * before a byte is written: every entry must be a regular file or folder under one top-level folder,
 * with a name that means the same thing on every system (no `..`, absolute path, drive letter,
 * backslash, device name or character Windows refuses, no segment over `MAX_SEGMENT_BYTES` nor path
 * over `MAX_PATH_BYTES`), no two names that one case-insensitive file system would take for one
 * (`foldName`), at most `maxEntries` entries and `maxTotalBytes` declared; and the archive must be
 * read the same by every zip reader (`checkLayout`): each entry's local header names it as the
 * central directory does, the entries' records neither overlap nor leave bytes that no entry
 * accounts for, and the end record counts exactly the central directory. Then each file is streamed
 * out (memory stays flat) and refused if it inflates past its declared size (yauzl's
 * `validateEntrySizes`) or its CRC-32 is not the central directory's (yauzl leaves that to its caller).
 * yauzl reads the zip and refuses `..`, absolute paths, drive letters and backslashes
 * (`strictFileNames`); the rest is checked here.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import yauzl from 'yauzl';
import { AbortedError, ArchiveError } from '../errors.js';

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
/**
 * The longest name of a file or folder, in UTF-8 bytes: ext4 and most Unix file systems count 255
 * bytes, NTFS and APFS 255 characters (never fewer than the bytes).
 */
export const MAX_SEGMENT_BYTES = 255;
/**
 * The longest path of an entry, in UTF-8 bytes. macOS refuses a whole path of 1,024 bytes (`PATH_MAX`,
 * Linux 4,096): this leaves half of it to the game folder and the work folder the release is
 * extracted into (`Interface/.patchwell-work/<uuid>/new/`). Real addons' longest paths are under 200.
 */
export const MAX_PATH_BYTES = 512;

/**
 * The name as a case-insensitive file system (NTFS, APFS, HFS+) may compare it: NFC, then Unicode
 * full case folding (upper then lower case, twice, so that `ẞ`, `ß` and `SS` meet, as `ſ` and `s`
 * do). Two names with the same key are one file there.
 */
export function foldName(name: string): string {
  return name.normalize('NFC').toUpperCase().toLowerCase().toUpperCase().toLowerCase().normalize('NFC');
}

/** Why `segment` cannot be a path segment on every system, or null. */
export function badSegment(segment: string): string | null {
  if (segment === '' || segment === '.' || segment === '..') return `an empty, "." or ".." segment`;
  if (Buffer.byteLength(segment) > MAX_SEGMENT_BYTES) return `a name longer than ${MAX_SEGMENT_BYTES} bytes`;
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
  // A name too long is shown by its start.
  const shown = JSON.stringify(name.length > 100 ? `${name.slice(0, 100)}…` : name);
  const refuse = (why: string) => new ArchiveError(`archive entry ${shown}: ${why}`);
  const folder = name.endsWith('/');
  if (Buffer.byteLength(name) > MAX_PATH_BYTES) throw refuse(`is a path longer than ${MAX_PATH_BYTES} bytes`);
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

/**
 * Refuses two entries that one case-insensitive file system would take for one (`foldName`): two
 * files, or two spellings of one folder (`Hostile/`, `hostile/`); and a file where another entry needs
 * a folder.
 */
function checkNames(entries: readonly CheckedEntry[]): void {
  const files = new Map<string, string>();
  /** Each folder's one spelling, by key, and an entry under it. */
  const folders = new Map<string, { spelling: string; entry: string }>();
  for (const { entry, segments, folder } of entries) {
    const depth = folder ? segments.length : segments.length - 1;
    for (let at = 1; at <= depth; at++) {
      const spelling = segments.slice(0, at).join('/');
      const known = folders.get(foldName(spelling));
      if (known === undefined) folders.set(foldName(spelling), { spelling, entry: entry.fileName });
      else if (known.spelling !== spelling) {
        throw new ArchiveError(
          `archive entries ${JSON.stringify(known.entry)} and ${JSON.stringify(entry.fileName)} spell one folder two ways (${JSON.stringify(known.spelling)}, ${JSON.stringify(spelling)})`,
        );
      }
    }
    if (folder) continue;
    const key = foldName(segments.join('/'));
    const other = files.get(key);
    if (other !== undefined) {
      throw new ArchiveError(
        `archive entries ${JSON.stringify(other)} and ${JSON.stringify(entry.fileName)} name one file on a case-insensitive file system`,
      );
    }
    files.set(key, entry.fileName);
  }
  for (const [key, name] of files) {
    const other = folders.get(key);
    if (other !== undefined) {
      throw new ArchiveError(
        `archive entry ${JSON.stringify(name)} is a file where ${JSON.stringify(other.entry)} needs a folder`,
      );
    }
  }
}

/** Signatures of the zip format's records, and the ZIP64 extra field's id (APPNOTE 4.3, 4.5.3). */
const DATA_DESCRIPTOR = 0x08074b50;
const END = 0x06054b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_EXTRA = 0x0001;
/** The fixed part of a central directory header, of an end record and of a ZIP64 locator. */
const CENTRAL_HEADER_BYTES = 46;
const END_BYTES = 22;
const LOCATOR_BYTES = 20;
/** Bit 3 of the flags: the CRC-32 and sizes follow the data, in a data descriptor. */
const HAS_DESCRIPTOR = 0x0008;

/** Up to `length` bytes of `file` at `position` (fewer at its end). */
async function readAt(file: fs.promises.FileHandle, position: number, length: number): Promise<Buffer> {
  const buffer = Buffer.alloc(length);
  const { bytesRead } = await file.read(buffer, 0, length, position);
  return buffer.subarray(0, bytesRead);
}

/** What the end record (the ZIP64 one where there is one) says of the central directory. */
interface EndRecord {
  readonly entriesOnDisk: number;
  readonly entries: number;
  readonly directoryBytes: number;
  readonly directoryOffset: number;
  /** Where the end records begin: the central directory must end exactly there. */
  readonly at: number;
}

/**
 * The end record yauzl read (the last signature in the file's last 64 KiB, yauzl's own search), and
 * the ZIP64 end record its locator points to, if any; a 16- or 32-bit field beside a ZIP64 record
 * must say the same or be the "see ZIP64" mark.
 */
async function readEnd(file: fs.promises.FileHandle, size: number): Promise<EndRecord> {
  const tailStart = Math.max(0, size - (LOCATOR_BYTES + END_BYTES + 0xffff));
  const tail = await readAt(file, tailStart, size - tailStart);
  const signature = Buffer.alloc(4);
  signature.writeUInt32LE(END);
  const at = tail.lastIndexOf(signature, tail.length - END_BYTES);
  const end = tail.subarray(at);
  const classic: EndRecord = {
    entriesOnDisk: end.readUInt16LE(8),
    entries: end.readUInt16LE(10),
    directoryBytes: end.readUInt32LE(12),
    directoryOffset: end.readUInt32LE(16),
    at: tailStart + at,
  };
  const locatorAt = classic.at - LOCATOR_BYTES;
  const locator = locatorAt < 0 ? null : await readAt(file, locatorAt, LOCATOR_BYTES);
  if (locator?.readUInt32LE(0) !== ZIP64_LOCATOR) return classic;
  const recordAt = Number(locator.readBigUInt64LE(8));
  // yauzl checked its signature.
  const record = await readAt(file, recordAt, 56);
  const zip64: EndRecord = {
    entriesOnDisk: Number(record.readBigUInt64LE(24)),
    entries: Number(record.readBigUInt64LE(32)),
    directoryBytes: Number(record.readBigUInt64LE(40)),
    directoryOffset: Number(record.readBigUInt64LE(48)),
    at: recordAt,
  };
  const agree = (field: 'entriesOnDisk' | 'entries' | 'directoryBytes' | 'directoryOffset', mark: number) =>
    classic[field] === zip64[field] || classic[field] === mark;
  if (
    recordAt + 12 + Number(record.readBigUInt64LE(4)) !== locatorAt ||
    !agree('entriesOnDisk', 0xffff) ||
    !agree('entries', 0xffff) ||
    !agree('directoryBytes', 0xffffffff) ||
    !agree('directoryOffset', 0xffffffff)
  ) {
    throw new ArchiveError('the end record and the ZIP64 end record disagree');
  }
  return zip64;
}

/** Where an entry's local record (header, data, data descriptor) lies in the file. */
interface LocalRecord {
  readonly name: string;
  readonly start: number;
  readonly end: number;
}

/**
 * The local record of `entry`, refused when its header names it otherwise than the central
 * directory (a reader that walks the local headers would write another file) or its data descriptor
 * is not there.
 */
async function localRecord(zip: yauzl.ZipFile, file: fs.promises.FileHandle, entry: yauzl.Entry): Promise<LocalRecord> {
  const header = await zip.readLocalFileHeaderPromise(entry);
  const name = entry.fileName;
  if (!header.fileName.equals(entry.fileNameRaw)) {
    throw new ArchiveError(
      `archive entry ${JSON.stringify(name)}: its local header names it ${JSON.stringify(header.fileName.toString('utf8'))}`,
    );
  }
  const dataEnd = header.fileDataStart + entry.compressedSize;
  if ((header.generalPurposeBitFlag & HAS_DESCRIPTOR) === 0)
    return { name, start: entry.relativeOffsetOfLocalHeader, end: dataEnd };
  // CRC-32 and both sizes, 8 bytes each with a ZIP64 extra field (APPNOTE 4.3.9), after an optional signature.
  const sizes = yauzl.parseExtraFields(header.extraField).some((f) => f.id === ZIP64_EXTRA) ? 16 : 8;
  const descriptor = await readAt(file, dataEnd, 8);
  const signed =
    descriptor.length === 8 &&
    descriptor.readUInt32LE(0) === DATA_DESCRIPTOR &&
    descriptor.readUInt32LE(4) === entry.crc32;
  if (!signed && (descriptor.length < 4 || descriptor.readUInt32LE(0) !== entry.crc32)) {
    throw new ArchiveError(`archive entry ${JSON.stringify(name)}: its data descriptor is missing or wrong`);
  }
  return { name, start: entry.relativeOffsetOfLocalHeader, end: dataEnd + (signed ? 8 : 4) + sizes };
}

/**
 * Refuses an archive that two zip readers could read differently: every byte before the central
 * directory must belong to exactly one entry's local record (no overlap, as in a zip bomb that
 * reuses one entry's data, and no gap, where an entry the central directory does not list could
 * hide), the central directory must be exactly the entries the end record counts (no entry hidden
 * after them), and each local header must name its entry as the central directory does.
 */
async function checkLayout(zip: yauzl.ZipFile, zipFile: string, entries: readonly yauzl.Entry[]): Promise<void> {
  const file = await fs.promises.open(zipFile);
  try {
    const end = await readEnd(file, zip.fileSize);
    const directoryBytes = entries.reduce(
      (sum, e) => sum + CENTRAL_HEADER_BYTES + e.fileNameLength + e.extraFieldLength + e.fileCommentLength,
      0,
    );
    if (end.entriesOnDisk !== end.entries) {
      throw new ArchiveError(`the end record counts ${end.entries} entries, and ${end.entriesOnDisk} on its one disk`);
    }
    if (end.directoryBytes !== directoryBytes) {
      throw new ArchiveError(
        `the end record counts ${end.entries} entries in a central directory of ${end.directoryBytes} bytes; they take ${directoryBytes} (entries it does not count?)`,
      );
    }
    if (end.directoryOffset + end.directoryBytes !== end.at) {
      throw new ArchiveError('the central directory does not end where the end record begins');
    }
    const records: LocalRecord[] = [];
    for (const entry of entries) records.push(await localRecord(zip, file, entry));
    records.sort((a, b) => a.start - b.start || a.end - b.end);
    let covered = 0;
    let previous: LocalRecord | null = null;
    for (const record of records) {
      if (record.start < covered) {
        throw new ArchiveError(
          `archive entries ${JSON.stringify(previous?.name)} and ${JSON.stringify(record.name)} overlap in the archive`,
        );
      }
      if (record.start > covered)
        throw new ArchiveError(`bytes ${covered} to ${record.start} of the archive belong to no entry`);
      covered = record.end;
      previous = record;
    }
    if (covered > end.directoryOffset) {
      throw new ArchiveError(`archive entry ${JSON.stringify(previous?.name)} overlaps the central directory`);
    }
    if (covered < end.directoryOffset) {
      throw new ArchiveError(`bytes ${covered} to ${end.directoryOffset} of the archive belong to no entry`);
    }
  } finally {
    await file.close();
  }
}

/** Passes the data through, refusing it at its end when its CRC-32 is not `expected`. */
function crcCheck(name: string, expected: number): Transform {
  let crc = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      crc = zlib.crc32(chunk, crc);
      done(null, chunk);
    },
    flush(done) {
      done(
        crc === expected
          ? null
          : new ArchiveError(
              `archive entry ${JSON.stringify(name)}: its CRC-32 is ${crc.toString(16)}, the archive says ${expected.toString(16)}`,
            ),
      );
    },
  });
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
    await checkLayout(
      zip,
      zipFile,
      entries.map((e) => e.entry),
    );
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
      await pipeline(
        await zip.openReadStreamPromise(entry),
        crcCheck(entry.fileName, entry.crc32),
        fs.createWriteStream(target, { flags: 'wx' }),
        { ...(signal === undefined ? {} : { signal }) },
      );
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
      await pipeline(await zip.openReadStreamPromise(entry), crcCheck(entry.fileName, entry.crc32), async (source) => {
        for await (const chunk of source) hash.update(chunk as Buffer);
      });
      folders.get(top)?.push({ path: inside.join('/'), sha256: hash.digest('hex') });
    }
    return folders;
  });
}
