/**
 * Addon folder fingerprints: what the service keeps for each top-level folder of an addon release's
 * zip and what an addon manager computes for a folder it finds on disk, so that a folder unpacked by
 * hand can be recognised as a release's (`POST /api/addons/fingerprints`). Both sides use this one
 * algorithm.
 */
import { createHash } from 'node:crypto';
import { type ArchiveLimits, archiveFolderFiles, DEFAULT_ARCHIVE_LIMITS, type HashedFile } from '../disk/archive.js';

export { ArchiveError } from '../errors.js';
export type { HashedFile } from '../disk/archive.js';

/** A top-level folder and its fingerprint. */
export interface FolderFingerprint {
  readonly folder: string;
  readonly fingerprint: string;
}

/**
 * The fingerprint of a folder from its files (every file under it, at any depth): SHA-256, in
 * lowercase hex, over each file as `path "\n" sha256 "\n"`, where `path` is relative to the folder,
 * `/`-separated and in Unicode NFC, `sha256` is the file's in lowercase hex, and the files are in the
 * order of their paths' UTF-8 bytes. A folder without files has the SHA-256 of nothing.
 */
export function folderFingerprint(files: readonly HashedFile[]): string {
  const lines = files
    .map((file) => ({ path: Buffer.from(file.path.normalize('NFC')), sha256: file.sha256.toLowerCase() }))
    .sort((a, b) => Buffer.compare(a.path, b.path));
  const hash = createHash('sha256');
  for (const line of lines) hash.update(line.path).update('\n').update(line.sha256).update('\n');
  return hash.digest('hex');
}

/**
 * The fingerprint of each top-level folder of the addon archive `zipFile` (folder names in NFC,
 * sorted), read without unpacking it. Throws `ArchiveError` for an archive the extractor would refuse.
 */
export async function archiveFingerprints(
  zipFile: string,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
): Promise<FolderFingerprint[]> {
  const folders = await archiveFolderFiles(zipFile, limits);
  return [...folders].map(([folder, files]) => ({
    folder: folder.normalize('NFC'),
    fingerprint: folderFingerprint(files),
  }));
}
