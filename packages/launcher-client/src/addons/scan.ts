/**
 * Recognising addon folders unpacked by hand: each folder's fingerprint (`fingerprint.ts`, the
 * service's algorithm) computed from the files on disk, and the service's matches
 * (`POST /api/addons/fingerprints`) turned into adoptions: per addon, the one release whose folders
 * the most folders found match.
 *
 * Each match names every top-level folder of its release (`release.folders`): an addon is adopted
 * only when all of them were found and match that same release; a release with a folder missing or
 * different on disk is not adopted, and a folder matching another release of the addon, or another
 * addon's release already adopted, stays unknown.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { HashedFile } from '../disk/archive.js';
import type { FolderMatchesAnswer } from '../update/manager.js';
import { IntegrityError } from '../errors.js';
import { folderFingerprint } from './fingerprint.js';

/** A folder of `Interface/AddOns` no manifest names: its name, fingerprint and files (`/`-separated, inside it). */
export interface FoundFolder {
  readonly folder: string;
  readonly fingerprint: string;
  readonly files: readonly string[];
}

/** One addon recognised: the release its folders match. */
export interface Adoption {
  readonly slug: string;
  readonly releaseId: string;
  readonly version: string;
  /** The folders found, sorted. */
  readonly folders: string[];
}

type Match = FolderMatchesAnswer['matches'][number];

const sameName = (a: string, b: string) => a.normalize('NFC').toLowerCase() === b.normalize('NFC').toLowerCase();

async function hashFiles(dir: string, prefix: string, out: HashedFile[]): Promise<void> {
  // A folder's entries at once (addon files are small: each read whole).
  await Promise.all(
    (await fs.promises.readdir(dir, { withFileTypes: true })).map(async (entry) => {
      const file = path.join(dir, entry.name);
      const name = prefix === '' ? entry.name : `${prefix}/${entry.name}`;
      if (entry.isDirectory()) await hashFiles(file, name, out);
      else if (entry.isFile()) {
        out.push({
          path: name,
          sha256: createHash('sha256')
            .update(await fs.promises.readFile(file))
            .digest('hex'),
        });
      }
    }),
  );
}

/** The fingerprint and files of the folder `dir` on disk (only regular files count, as in an archive). */
export async function fingerprintFolder(dir: string): Promise<FoundFolder> {
  const files: HashedFile[] = [];
  await hashFiles(dir, '', files);
  return {
    folder: path.basename(dir),
    fingerprint: folderFingerprint(files),
    files: files.map((f) => f.path).sort(),
  };
}

/**
 * The adoptions `matches` allow among `found`. A match naming a fingerprint not asked is refused
 * (`IntegrityError`): the answer is not about these folders; one naming a folder other than the one
 * found with its fingerprint is no match; a release is adopted only when all its folders match.
 * Answers the adoptions (most folders first) and the folders left unknown.
 */
export function chooseAdoptions(
  found: readonly FoundFolder[],
  matches: readonly Match[],
): { adoptions: Adoption[]; unknown: string[] } {
  const releases = new Map<
    string,
    { slug: string; releaseId: string; version: string; folders: Set<string>; all: readonly string[] }
  >();
  for (const match of matches) {
    if (!found.some((f) => f.fingerprint === match.fingerprint)) {
      throw new IntegrityError(
        `the fingerprint answer names the folder ${JSON.stringify(match.folder)} (${match.fingerprint}), which was not asked about`,
      );
    }
    // The same files under another name (a folder renamed by hand) are not that release's folder.
    const folder = found.find((f) => f.fingerprint === match.fingerprint && sameName(f.folder, match.folder));
    if (folder === undefined) continue;
    const key = `${match.addon.slug}\n${match.release.id}`;
    const release = releases.get(key) ?? {
      slug: match.addon.slug,
      releaseId: match.release.id,
      version: match.release.version,
      folders: new Set<string>(),
      all: match.release.folders,
    };
    release.folders.add(folder.folder);
    releases.set(key, release);
  }
  // Per addon, the release matching the most folders (the newest of equals, the answers listing newest first).
  const best = new Map<string, Adoption>();
  for (const { all, ...release } of releases.values()) {
    // Every folder of the release found and matching, or the release is not what is on disk.
    const whole = all.length > 0 && all.every((name) => [...release.folders].some((f) => sameName(f, name)));
    const kept = best.get(release.slug);
    if (whole && (kept === undefined || release.folders.size > kept.folders.length)) {
      best.set(release.slug, { ...release, folders: [...release.folders].sort() });
    }
  }
  const taken = new Set<string>();
  const adoptions: Adoption[] = [];
  for (const adoption of [...best.values()].sort((a, b) => b.folders.length - a.folders.length)) {
    if (adoption.folders.some((f) => taken.has(f))) continue;
    for (const f of adoption.folders) taken.add(f);
    adoptions.push(adoption);
  }
  return { adoptions, unknown: found.map((f) => f.folder).filter((f) => !taken.has(f)) };
}
