/**
 * `launcher-publish game`: a game client folder published as a build (game-files.md). The folder is
 * walked (regular files only) and checked against the manifest rules (the module the service and the
 * launcher check with), each file cut into chunks (FastCDC), the manifest written; the service is
 * asked which chunks it lacks, only those are uploaded (several at once, under the command's retry
 * policy), then the build is created with an Idempotency-Key made from the manifest: a rerun uploads
 * nothing and creates nothing new. A folder the service would refuse uploads nothing.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { minimatch } from 'minimatch';
import { Chunker, chunkFile, GAME_CHUNK_SIZES } from 'patchwell-client/fastcdc';
import { checkManifest, inPlayerFolder, PLAYER_FOLDERS } from 'patchwell-client/game-manifest';
import { gameTrustedComment, prehash } from 'patchwell-client/minisign';
import { type Api, ApiError, type GameBuild, type MissingChunks } from './api.js';
import type { Context } from './context.js';
import { type ParsedOptions, UsageError } from './options.js';
import { progressReporter } from './progress.js';

/** A file of the folder: its manifest path (relative, `/`-separated, NFC) and where it is on disk. */
export interface ClientFile {
  path: string;
  file: string;
  size: number;
  executable: boolean;
}

/** Glob options of `--exclude` and `--initial`: `*` and `?` within one segment, `**` across, dotfiles too. */
const GLOB = { dot: true } as const;

/**
 * The regular files under `dir`, sorted by path, leaving out those (and folders) an `exclude`
 * pattern matches. Symbolic links, sockets, devices and other non-regular files are refused.
 */
export async function walkClient(dir: string, exclude: readonly string[]): Promise<ClientFile[]> {
  const root = path.resolve(dir);
  const stat = await fs.stat(root).catch(() => null);
  if (!stat?.isDirectory()) throw new UsageError(`--dir: not a folder: ${dir}`);
  const excluded = (rel: string) => exclude.some((pattern) => minimatch(rel, pattern, GLOB));
  const files: ClientFile[] = [];
  const visit = async (folder: string, prefix: string): Promise<void> => {
    for (const entry of await fs.readdir(folder, { withFileTypes: true })) {
      const rel = (prefix + entry.name).normalize('NFC');
      if (excluded(rel)) continue;
      const file = path.join(folder, entry.name);
      if (entry.isDirectory()) {
        await visit(file, `${rel}/`);
      } else if (entry.isFile()) {
        const { size, mode } = await fs.lstat(file);
        files.push({ path: rel, file, size, executable: (mode & 0o111) !== 0 });
      } else {
        const kind = entry.isSymbolicLink() ? 'a symbolic link' : 'not a regular file (socket, device or pipe)';
        throw new Error(`${rel}: ${kind}; only regular files are published (leave it out with --exclude)`);
      }
    }
  };
  await visit(root, '');
  return files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** Where a chunk's bytes are on disk (its first occurrence). */
interface ChunkPlace {
  file: string;
  offset: number;
  size: number;
}

export interface ClientManifest {
  /** The manifest's exact text, as uploaded and served. */
  text: string;
  sha256: string;
  files: number;
  totalBytes: number;
  /** Every distinct chunk by name. */
  chunks: Map<string, ChunkPlace>;
}

export interface ManifestOptions {
  app: string;
  version: string;
  buildCode: number;
  remove: readonly string[];
  initial: readonly string[];
}

/** Whether `--initial` marks the file at `filePath`. */
const isInitial = (filePath: string, options: ManifestOptions) =>
  options.initial.some((pattern) => minimatch(filePath, pattern, GLOB));

/** The manifest's text (format 1) listing `files`. */
const manifestText = (options: ManifestOptions, files: readonly object[]) => {
  const { app, version, buildCode, remove } = options;
  return JSON.stringify({ format: 1, app, version, buildCode, files, remove });
};

/**
 * Refuses, before a byte of the folder is read, a folder whose manifest would break the manifest
 * rules (`patchwell-client/game-manifest`, which the service and every launcher apply): its files'
 * paths, policies and the `remove` patterns are checked as the manifest will list them (only the
 * sizes, hashes and chunks, which the chunker makes, are not known yet). An empty folder and a file
 * of a player folder not given as `--initial` are named with the option that fixes them.
 */
export function checkClient(files: readonly ClientFile[], options: ManifestOptions, dir: string): void {
  if (files.length === 0) {
    throw new UsageError(`--dir: no file to publish in ${dir} (after --exclude): a build lists at least one file`);
  }
  for (const pattern of options.initial) {
    if (!files.some((file) => minimatch(file.path, pattern, GLOB))) {
      throw new UsageError(`--initial: no file of the folder matches ${pattern}`);
    }
  }
  for (const file of files) {
    if (!inPlayerFolder(file.path) || isInitial(file.path, options)) continue;
    const top = file.path.slice(0, file.path.indexOf('/'));
    throw new UsageError(
      `${file.path}: is in the player folder ${top}/ (${PLAYER_FOLDERS.map((f) => `${f}/`).join(', ')} are the ` +
        `player's): a build may only give a default written when absent, with --initial '${file.path}', or ` +
        `leave it out with --exclude '${top}/**'`,
    );
  }
  const listed = files.map((file) => ({
    path: file.path,
    size: 0,
    sha256: '0'.repeat(64),
    chunks: [],
    ...(isInitial(file.path, options) ? { policy: 'initial' } : {}),
  }));
  const checked = checkManifest(manifestText(options, listed));
  if (!checked.ok) throw new Error(`the manifest would break the rules (game-files.md): ${checked.error}`);
}

/**
 * Cuts every file into chunks and writes the manifest (format 1); progress on `context.progress`.
 * The files are those `checkClient` took.
 */
export async function clientManifest(
  files: readonly ClientFile[],
  options: ManifestOptions,
  context: Context,
): Promise<ClientManifest> {
  const chunker = new Chunker(GAME_CHUNK_SIZES);
  const totalBytes = files.reduce((sum, file) => sum + file.size, 0);
  const progress = progressReporter(context.progress, 'chunk');
  let read = 0;
  const chunks = new Map<string, ChunkPlace>();
  const listed = [];
  for (const file of files) {
    const cut = await chunkFile(file.file, chunker, (bytes) => progress((read += bytes), totalBytes));
    let offset = 0;
    for (const [sha256, size] of cut.chunks) {
      if (!chunks.has(sha256)) chunks.set(sha256, { file: file.file, offset, size });
      offset += size;
    }
    listed.push({
      path: file.path,
      size: cut.size,
      sha256: cut.sha256,
      ...(file.executable ? { executable: true } : {}),
      chunks: cut.chunks,
      ...(isInitial(file.path, options) ? { policy: 'initial' } : {}),
    });
  }
  progress.done();
  const text = manifestText(options, listed);
  return {
    text,
    sha256: createHash('sha256').update(text).digest('hex'),
    files: files.length,
    totalBytes: listed.reduce((sum, file) => sum + file.size, 0),
    chunks,
  };
}

/** The manifest's prehash, for signing it with minisign. */
export const manifestPrehash = (manifest: ClientManifest) => () => prehash([Buffer.from(manifest.text)]);

export const manifestTrustedComment = (options: ManifestOptions, manifest: ClientManifest): string =>
  gameTrustedComment({ app: options.app, buildCode: options.buildCode, sha256: manifest.sha256 });

/** At most this many chunks asked about per request (the service's limit). */
const MISSING_BATCH = 10_000;
/** Chunk uploads at once. */
const UPLOADS_AT_ONCE = 4;

/** The chunks of `manifest` the service lacks. */
async function missingChunks(api: Api, manifest: ClientManifest): Promise<string[]> {
  const names = [...manifest.chunks.keys()];
  const missing: string[] = [];
  for (let at = 0; at < names.length; at += MISSING_BATCH) {
    const answer = await api.json<MissingChunks>('POST', '/api/admin/game/chunks/missing', {
      chunks: names.slice(at, at + MISSING_BATCH),
    });
    missing.push(...answer.missing);
  }
  return missing;
}

/** Uploads the chunks named, `UPLOADS_AT_ONCE` at a time, each retried by the command's policy. */
async function uploadChunks(api: Api, manifest: ClientManifest, names: readonly string[], context: Context) {
  const places = names.map((name) => ({ name, place: manifest.chunks.get(name) as ChunkPlace }));
  const total = places.reduce((sum, { place }) => sum + place.size, 0);
  const progress = progressReporter(context.progress, 'upload chunks');
  let sent = 0;
  let next = 0;
  // Once an upload has failed (its retries used up), the others take no further chunk.
  let failed = false;
  const worker = async () => {
    try {
      while (!failed && next < places.length) {
        const { name, place } = places[next++] as (typeof places)[number];
        const bytes = Buffer.alloc(place.size);
        const handle = await fs.open(place.file, 'r');
        try {
          await handle.read(bytes, 0, place.size, place.offset);
        } finally {
          await handle.close();
        }
        await api.json('PUT', `/api/admin/game/chunks/${name}`, undefined, { bytes });
        progress((sent += place.size), total);
      }
    } catch (err) {
      failed = true;
      throw err;
    }
  };
  // Every upload under way ends (or fails) before the first failure is reported: it is the last line.
  const settled = await Promise.allSettled(Array.from({ length: Math.min(UPLOADS_AT_ONCE, places.length) }, worker));
  const failure = settled.find((result) => result.status === 'rejected');
  if (failure !== undefined) throw failure.reason;
  progress.done();
  return { uploadedChunks: places.length, uploadedBytes: total };
}

export interface BuildFields {
  changelogZh?: string;
  changelogEn?: string;
  forceUpdate?: boolean;
  publishAt?: string;
  manifestSignature?: string;
}

/** Every build the service holds (the administrators' listing: scheduled and revoked ones too), highest first. */
export const heldBuilds = (api: Api) => api.json<GameBuild[]>('GET', '/api/admin/game/builds');

/**
 * Refuses, before the folder is read, a `--build-code` the service would refuse (409): one not above
 * every build it holds. A code it holds already may be a rerun of this folder (see `publishBuild`).
 * The service stays the authority: a build published meanwhile is its 409.
 */
export function checkBuildCode(builds: readonly GameBuild[], buildCode: number): void {
  const highest = builds.reduce((max, build) => Math.max(max, build.buildCode), 0);
  if (buildCode > highest || builds.some((build) => build.buildCode === buildCode)) return;
  throw new UsageError(
    `--build-code ${buildCode} is not above ${highest}, the highest build the service holds (published, ` +
      'scheduled or revoked): launchers only move up, so the service refuses it (409)',
  );
}

/**
 * The build of `buildCode` among `builds`: this very manifest (a rerun: done), else a conflict
 * naming both.
 */
function existingBuild(builds: readonly GameBuild[], options: ManifestOptions, manifest: ClientManifest) {
  const existing = builds.find((build) => build.buildCode === options.buildCode);
  if (existing === undefined || existing.manifestSha256 === manifest.sha256) return existing;
  throw new Error(
    `conflict: buildCode ${options.buildCode} already exists with another manifest (sha256 ` +
      `${existing.manifestSha256}, version ${existing.version}; this one ${manifest.sha256})`,
  );
}

/**
 * Publishes the build: only missing chunks uploaded, then the build created (or found in `builds`,
 * the service's builds read before the folder: a rerun).
 */
export async function publishBuild(
  api: Api,
  options: ManifestOptions,
  manifest: ClientManifest,
  fields: BuildFields,
  context: Context,
  builds: readonly GameBuild[],
) {
  const answer = (uploaded: { uploadedChunks: number; uploadedBytes: number }) => ({
    build: { version: options.version, buildCode: options.buildCode },
    files: manifest.files,
    chunks: manifest.chunks.size,
    ...uploaded,
    totalBytes: manifest.totalBytes,
  });
  if (existingBuild(builds, options, manifest) !== undefined) {
    return answer({ uploadedChunks: 0, uploadedBytes: 0 });
  }
  const uploaded = await uploadChunks(api, manifest, await missingChunks(api, manifest), context);
  const key = createHash('sha256')
    .update(['game', options.app, options.buildCode, manifest.sha256].join('\n'))
    .digest('hex');
  await api
    .json<GameBuild>(
      'POST',
      '/api/admin/game/builds',
      { version: options.version, buildCode: options.buildCode, ...fields, manifest: manifest.text },
      { idempotencyKey: key },
    )
    .catch(async (err: unknown) => {
      // 409: a concurrent run made this buildCode first; 422: the same key with other fields (a
      // rerun with another changelog). Done when the build there is this manifest.
      const raced = err instanceof ApiError && (err.status === 409 || err.status === 422);
      if (!raced || existingBuild(await heldBuilds(api), options, manifest) === undefined) throw err;
    });
  return answer(uploaded);
}

/** `--build-code`, `--version`, `--remove` and `--initial` as the manifest takes them, for `app`. */
export function manifestOptions(options: ParsedOptions, buildCode: number, app: string): ManifestOptions {
  return {
    app,
    version: options.require('version'),
    buildCode,
    remove: options.all('remove'),
    initial: options.all('initial'),
  };
}
