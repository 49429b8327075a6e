/**
 * The game client's manifest (`game-files.md`, "The manifest"): parsed and checked by one pure
 * function, without dependencies, so that a launcher can apply exactly the same rules to what it
 * downloads (the service imports it as `patchwell-client/game-manifest`). Every refusal names the first fault it found (`files[3].path: …`).
 */

/** A chunk's largest size: 8 MiB. */
export const MAX_CHUNK_BYTES = 8 * 1024 * 1024;
/** The most files one manifest may list. */
export const MAX_MANIFEST_FILES = 100_000;
/** Top-level folders that belong to the player: no `remove` pattern may reach into them. */
export const PLAYER_FOLDERS: readonly string[] = ['WTF', 'Interface', 'Screenshots'];

export type FilePolicy = 'exact' | 'initial';

export interface ManifestFile {
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
  readonly executable: boolean;
  readonly policy: FilePolicy;
  /** `[sha256, size]` of each chunk, in order. */
  readonly chunks: readonly (readonly [string, number])[];
}

export interface GameManifest {
  readonly format: 1;
  readonly app: string;
  readonly version: string;
  readonly buildCode: number;
  readonly files: readonly ManifestFile[];
  readonly remove: readonly string[];
}

export type ManifestCheck =
  | {
      readonly ok: true;
      readonly manifest: GameManifest;
      /** Sum of the files' sizes. */
      readonly totalSize: number;
      /** Every chunk the manifest names, once each, with its size, in first-use order. */
      readonly chunks: ReadonlyMap<string, number>;
    }
  | { readonly ok: false; readonly error: string };

const SHA256 = /^[0-9a-f]{64}$/;
// eslint-disable-next-line no-control-regex
const FORBIDDEN = /[\\:<>"|?*\u0000-\u001f\u007f-\u009f]/;
const RESERVED = /^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\..*)?$/i;

class Refusal extends Error {}

const fail = (message: string): never => {
  throw new Refusal(message);
};

/** Why `segment` (of a path or, with `glob`, of a pattern, whose `*` and `?` are allowed) is refused, or null. */
function segmentFault(segment: string, glob: boolean): string | null {
  if (segment === '' || segment === '.' || segment === '..') return `has an empty, "." or ".." segment`;
  const bad = (glob ? segment.replace(/[*?]/g, '') : segment).match(FORBIDDEN);
  if (bad) return `has a forbidden character (${JSON.stringify(bad[0])})`;
  if (RESERVED.test(segment)) return `has a segment Windows reserves ("${segment}")`;
  if (/[. ]$/.test(segment)) return `has a segment ending in a dot or space ("${segment}")`;
  return null;
}

/** Why a relative `/`-separated path (or pattern) is refused, or null when it is acceptable. */
export function pathFault(path: string, glob = false): string | null {
  if (path === '') return 'is empty';
  if (path.normalize('NFC') !== path) return 'is not in Unicode NFC';
  if (path.startsWith('/')) return 'is absolute';
  if (/^[A-Za-z]:/.test(path)) return 'starts with a drive letter';
  for (const segment of path.split('/')) {
    const fault = segmentFault(segment, glob);
    if (fault !== null) return fault;
  }
  return null;
}

/** A `remove` pattern as a matcher: `*` and `?` within one segment, case-insensitively. */
export function globMatcher(pattern: string): (path: string) => boolean {
  const source = pattern
    .split('')
    .map((c) => (c === '*' ? '[^/]*' : c === '?' ? '[^/]' : c.replace(/[.+^${}()|[\]\\]/g, '\\$&')))
    .join('');
  const regex = new RegExp(`^${source}$`, 'iu');
  return (path) => regex.test(path);
}

function record(value: unknown, where: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(`${where}: must be an object`);
  return value as Record<string, unknown>;
}

function integer(value: unknown, where: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    fail(`${where}: must be an integer from ${min} to ${max}`);
  }
  return value as number;
}

function text(value: unknown, where: string): string {
  if (typeof value !== 'string' || value === '') fail(`${where}: must be a non-empty string`);
  return value as string;
}

function sha256(value: unknown, where: string): string {
  if (typeof value !== 'string' || !SHA256.test(value)) fail(`${where}: must be a lowercase hex SHA-256`);
  return value as string;
}

function checkFile(value: unknown, where: string, chunks: Map<string, number>): ManifestFile {
  const file = record(value, where);
  const path = text(file.path, `${where}.path`);
  const fault = pathFault(path);
  if (fault !== null) fail(`${where}.path: "${path}" ${fault}`);
  const size = integer(file.size, `${where}.size`, 0);
  const digest = sha256(file.sha256, `${where}.sha256`);
  if (file.executable !== undefined && typeof file.executable !== 'boolean') {
    fail(`${where}.executable: must be a boolean`);
  }
  const policy = file.policy ?? 'exact';
  if (policy !== 'exact' && policy !== 'initial') return fail(`${where}.policy: must be "exact" or "initial"`);
  if (!Array.isArray(file.chunks)) fail(`${where}.chunks: must be an array`);
  let sum = 0;
  const list = (file.chunks as unknown[]).map((entry, j): [string, number] => {
    const at = `${where}.chunks[${j}]`;
    if (!Array.isArray(entry) || entry.length !== 2) fail(`${at}: must be [sha256, size]`);
    const [hash, bytes] = entry as [unknown, unknown];
    const name = sha256(hash, `${at}[0]`);
    const chunkSize = integer(bytes, `${at}[1]`, 1, MAX_CHUNK_BYTES);
    const known = chunks.get(name);
    if (known !== undefined && known !== chunkSize) fail(`${at}: chunk ${name} is named with another size before`);
    chunks.set(name, chunkSize);
    sum += chunkSize;
    return [name, chunkSize];
  });
  if (sum !== size) fail(`${where}.size: is ${size} but its chunks add up to ${sum}`);
  return { path, size, sha256: digest, executable: file.executable === true, policy, chunks: list };
}

/** Files unique case-insensitively, and none a folder of another. */
function checkTree(files: readonly ManifestFile[]): void {
  const byKey = new Map<string, string>();
  for (const { path } of files) {
    const key = path.toLowerCase();
    const other = byKey.get(key);
    if (other !== undefined) fail(`files: "${path}" and "${other}" differ only in case (or are the same)`);
    byKey.set(key, path);
  }
  for (const { path } of files) {
    const key = path.toLowerCase();
    for (let at = key.indexOf('/'); at !== -1; at = key.indexOf('/', at + 1)) {
      const file = byKey.get(key.slice(0, at));
      if (file !== undefined) fail(`files: "${path}" is under "${file}", which is a file`);
    }
  }
}

function checkRemove(value: unknown, files: readonly ManifestFile[]): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) fail('remove: must be an array of patterns');
  const player = PLAYER_FOLDERS.map((folder) => folder.toLowerCase());
  return (value as unknown[]).map((entry, i) => {
    const where = `remove[${i}]`;
    const pattern = text(entry, where);
    const fault = pathFault(pattern, true);
    if (fault !== null) fail(`${where}: "${pattern}" ${fault}`);
    const segments = pattern.split('/');
    const first = globMatcher(segments[0] ?? '');
    if (segments.length > 1 && player.some((folder) => first(folder))) {
      fail(`${where}: "${pattern}" may match files under ${PLAYER_FOLDERS.map((f) => `${f}/`).join(', ')}`);
    }
    const matches = globMatcher(pattern);
    const listed = files.find((file) => matches(file.path));
    if (listed !== undefined) fail(`${where}: "${pattern}" matches the listed file "${listed.path}"`);
    return pattern;
  });
}

/** Parses and checks a manifest's text: the manifest and its figures, or the first fault. */
export function checkManifest(source: string): ManifestCheck {
  let parsed: unknown;
  try {
    parsed = JSON.parse(source);
  } catch (error) {
    return { ok: false, error: `manifest: not JSON (${(error as Error).message})` };
  }
  try {
    const top = record(parsed, 'manifest');
    if (top.format !== 1) fail('format: must be 1');
    const app = text(top.app, 'app');
    const version = text(top.version, 'version');
    const buildCode = integer(top.buildCode, 'buildCode', 1);
    if (!Array.isArray(top.files)) fail('files: must be an array');
    const listed = top.files as unknown[];
    if (listed.length > MAX_MANIFEST_FILES) {
      fail(`files: ${listed.length} files, more than the limit of ${MAX_MANIFEST_FILES}`);
    }
    const chunks = new Map<string, number>();
    const files = listed.map((file, i) => checkFile(file, `files[${i}]`, chunks));
    checkTree(files);
    const remove = checkRemove(top.remove, files);
    const totalSize = files.reduce((sum, file) => sum + file.size, 0);
    if (!Number.isSafeInteger(totalSize)) fail('files: the sizes add up to more than a safe integer');
    return { ok: true, manifest: { format: 1, app, version, buildCode, files, remove }, totalSize, chunks };
  } catch (error) {
    if (error instanceof Refusal) return { ok: false, error: error.message };
    throw error;
  }
}
