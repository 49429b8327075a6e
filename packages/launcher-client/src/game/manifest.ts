/**
 * The game client's manifest (`game-files.md`, "The manifest"): parsed and checked by one pure
 * function, without dependencies, so that a launcher can apply exactly the same rules to what it
 * downloads (the service imports it as `patchwell-client/game-manifest`). Every refusal names the first fault it found (`files[3].path: …`).
 */

/** A chunk's largest size: 8 MiB. */
export const MAX_CHUNK_BYTES = 8 * 1024 * 1024;
/** The most files one manifest may list. */
export const MAX_MANIFEST_FILES = 100_000;
/**
 * Top-level folders that belong to the player (names compared case-insensitively): a build may list
 * only `initial` files there, and no `remove` pattern may reach into them.
 */
export const PLAYER_FOLDERS: readonly string[] = ['WTF', 'Interface', 'Screenshots', 'Logs', 'Errors', 'WDB', 'Cache'];

/** Names (paths, folders) are compared case-insensitively. */
const key = (name: string) => name.toLowerCase();

const PLAYER_KEYS: ReadonlySet<string> = new Set(PLAYER_FOLDERS.map(key));

/** Whether `path` (relative, `/`-separated) lies in a player folder. */
export function inPlayerFolder(path: string): boolean {
  const slash = path.indexOf('/');
  return slash !== -1 && PLAYER_KEYS.has(key(path.slice(0, slash)));
}

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
      /**
       * With `accepted`: the first player-safety rule (below) the manifest breaks, else null. Always
       * null without it (such a manifest is refused).
       */
      readonly broken: string | null;
    }
  | { readonly ok: false; readonly error: string };

export interface ManifestCheckOptions {
  /**
   * The manifest was accepted before the player-safety rules of 2026-12-05 (a build the service
   * already stores, the build a launcher has installed): it is read, not refused, when it breaks
   * only them, and made safe to act on: a file in a player folder counts as `initial`, a `remove`
   * pattern the rules refuse is dropped, and the first fault is answered as `broken`. The
   * player-safety rules: at least one file, only `initial` files in player folders, and the
   * `remove` patterns' form.
   */
  readonly accepted?: boolean;
}

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

/** Records the first player-safety fault (`accepted`), or refuses it. */
type Breach = (message: string) => void;

/** A file in a player folder is `initial`: the first such `exact` file is a breach (and counts as `initial`). */
function checkPlayerFiles(files: readonly ManifestFile[], breach: Breach): ManifestFile[] {
  return files.map((file, i) => {
    if (file.policy === 'initial' || !inPlayerFolder(file.path)) return file;
    breach(
      `files[${i}].policy: "${file.path}" is in a player folder (${PLAYER_FOLDERS.join(', ')}), so it must be "initial"`,
    );
    return { ...file, policy: 'initial' };
  });
}

/** Files unique case-insensitively, and none a folder of another. */
function checkTree(files: readonly ManifestFile[]): void {
  const byKey = new Map<string, string>();
  for (const { path } of files) {
    const other = byKey.get(key(path));
    if (other !== undefined) fail(`files: "${path}" and "${other}" differ only in case (or are the same)`);
    byKey.set(key(path), path);
  }
  for (const { path } of files) {
    const folded = key(path);
    for (let at = folded.indexOf('/'); at !== -1; at = folded.indexOf('/', at + 1)) {
      const file = byKey.get(folded.slice(0, at));
      if (file !== undefined) fail(`files: "${path}" is under "${file}", which is a file`);
    }
  }
}

/**
 * The `remove` patterns: each at least two segments, its first a literal top-level folder that holds
 * a listed file and is not a player folder. A pattern that breaks this is a breach (and dropped).
 */
function checkRemove(value: unknown, files: readonly ManifestFile[], breach: Breach): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) fail('remove: must be an array of patterns');
  const folders = new Set(files.filter((f) => f.path.includes('/')).map((f) => key(f.path.split('/')[0]!)));
  const kept: string[] = [];
  for (const [i, entry] of (value as unknown[]).entries()) {
    const where = `remove[${i}]`;
    const pattern = text(entry, where);
    const fault = pathFault(pattern, true);
    if (fault !== null) fail(`${where}: "${pattern}" ${fault}`);
    const segments = pattern.split('/');
    const top = segments[0]!;
    const rule =
      segments.length < 2
        ? 'must have at least two segments (a folder, then a name): nothing at the top of the game folder is removed'
        : /[*?]/.test(top)
          ? `must name its top-level folder without "*" or "?" ("${top}")`
          : PLAYER_KEYS.has(key(top))
            ? `may not reach into the player folder "${top}/"`
            : !folders.has(key(top))
              ? `names the folder "${top}/", which holds no listed file`
              : null;
    if (rule === null) kept.push(pattern);
    else breach(`${where}: "${pattern}" ${rule}`);
  }
  return kept;
}

/**
 * Parses and checks a manifest's text: the manifest and its figures, or the first fault. With
 * `accepted`, see `ManifestCheckOptions`.
 */
export function checkManifest(source: string, options: ManifestCheckOptions = {}): ManifestCheck {
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
    let broken: string | null = null;
    const breach: Breach = (message) => {
      if (options.accepted !== true) fail(message);
      broken ??= message;
    };
    if (listed.length === 0) breach('files: a build lists at least one file');
    const chunks = new Map<string, number>();
    const read = listed.map((file, i) => checkFile(file, `files[${i}]`, chunks));
    checkTree(read);
    const files = checkPlayerFiles(read, breach);
    const remove = checkRemove(top.remove, files, breach);
    const totalSize = files.reduce((sum, file) => sum + file.size, 0);
    if (!Number.isSafeInteger(totalSize)) fail('files: the sizes add up to more than a safe integer');
    return { ok: true, manifest: { format: 1, app, version, buildCode, files, remove }, totalSize, chunks, broken };
  } catch (error) {
    if (error instanceof Refusal) return { ok: false, error: error.message };
    throw error;
  }
}
