/**
 * The commands of launcher-publish. Each is a name, a summary, the options it takes and a run function
 * that answers the JSON value printed on stdout.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import {
  checkSignature,
  type MinisignSignature,
  parsePublicKeys,
  parseSignature,
  prehashFile,
  releaseTrustedComment,
  versionTrustedComment,
} from 'patchwell-client/minisign';
import {
  type Addon,
  Api,
  ApiError,
  type Me,
  type Package,
  type Release,
  REQUEST_TIMEOUT_MS,
  RETRY_DELAYS_MS,
  tokenFrom,
  type Version,
} from './api.js';
import {
  checkBuildCode,
  checkClient,
  clientManifest,
  heldBuilds,
  manifestOptions,
  manifestPrehash,
  manifestTrustedComment,
  publishBuild,
  walkClient,
} from './game.js';
import type { Context } from './context.js';
import { generateKeyPair, parseSecretKey, signPrehash } from './minisign.js';
import { type OptionSpecs, type ParsedOptions, UsageError } from './options.js';
import { progressReporter } from './progress.js';
import { FileUrlStorage, stateFile } from './state.js';
import { CHUNK_BYTES } from './tus.js';
import { describeFile, forgetUpload, type LocalFile, uploadFile } from './upload.js';

export interface Command {
  summary: string;
  options: OptionSpecs;
  run(options: ParsedOptions, context: Context): Promise<unknown>;
}

const server: OptionSpecs = {
  server: { value: 'URL', help: 'the service, e.g. https://dist.example.com', required: true },
  timeout: {
    value: 'S',
    help: `give up on a request that gets no answer for S seconds, then retry it (default ${REQUEST_TIMEOUT_MS / 1000})`,
  },
};

/** Options of the commands that upload a build. */
const upload: OptionSpecs = {
  file: { value: 'F', help: 'the build to upload', required: true },
  'chunk-size': {
    value: 'BYTES',
    help: `bytes per upload request (default ${CHUNK_BYTES}, under proxies' body caps)`,
  },
  'sign-key': {
    value: 'FILE',
    help: 'sign the build with this minisign secret key (its password in LAUNCHER_SIGN_PASSWORD)',
  },
  signature: {
    value: 'FILE.minisig',
    help: 'a signature made elsewhere (minisign -S -t "<trusted comment>"), checked before the upload',
  },
  'publisher-key': { value: 'PUB', help: 'with --signature: the minisign public key it must verify with' },
};

const changelog: OptionSpecs = {
  'changelog-zh': { value: 'T', help: 'changelog (Chinese)' },
  'changelog-en': { value: 'T', help: 'changelog (English)' },
};

/**
 * The minisign signature when `--sign-key` is given (or `--signature`'s, checked), its trusted comment
 * binding it to what it is published as; made before the upload, so that a wrong key or password
 * fails first. `prehashOf` answers the signed bytes' prehash (a build file's, a game manifest's).
 */
export async function signatureFor(
  options: ParsedOptions,
  context: Context,
  prehashOf: () => Promise<Buffer>,
  trustedComment: string,
): Promise<string | undefined> {
  const keyFile = options.get('sign-key');
  const given = options.get('signature');
  if (keyFile !== undefined && given !== undefined)
    throw new UsageError('--sign-key and --signature: give one of them');
  if (given !== undefined)
    return checkedSignature(await fs.readFile(given, 'utf8'), options, prehashOf, trustedComment);
  if (keyFile === undefined) return undefined;
  const key = await parseSecretKey(await fs.readFile(keyFile, 'utf8'), context.env.LAUNCHER_SIGN_PASSWORD ?? '');
  return signPrehash(key, await prehashOf(), trustedComment);
}

/**
 * A signature made elsewhere (`minisign -S` on an offline machine), checked before anything is sent:
 * its trusted comment names what is published (package or addon and version, or game build, and the
 * SHA-256); with `--publisher-key` it must also verify with that key over these bytes.
 */
async function checkedSignature(
  text: string,
  options: ParsedOptions,
  prehashOf: () => Promise<Buffer>,
  trustedComment: string,
): Promise<string> {
  let signature: MinisignSignature;
  try {
    signature = parseSignature(text);
  } catch (err) {
    throw new Error(`--signature: ${(err as Error).message}`, { cause: err });
  }
  if (signature.trustedComment !== trustedComment) {
    throw new Error(`--signature: its trusted comment is "${signature.trustedComment}", expected "${trustedComment}"`);
  }
  const publisherKey = options.get('publisher-key');
  if (publisherKey !== undefined) {
    const keys = parsePublicKeys(await fs.readFile(publisherKey, 'utf8'));
    const verdict = checkSignature(signature, keys, await prehashOf(), trustedComment);
    if (!verdict.ok) throw new Error(`--signature: ${verdict.reason}`);
  }
  return text;
}

/** Writes a new minisign key pair: publisher.pub and publisher.key (never over existing files). */
async function keygen(options: ParsedOptions, context: Context): Promise<unknown> {
  const dir = options.require('out');
  const pair = await generateKeyPair(context.env.LAUNCHER_SIGN_PASSWORD ?? '');
  const publicKey = path.join(dir, 'publisher.pub');
  const secretKey = path.join(dir, 'publisher.key');
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  // `wx`: an existing key is never overwritten.
  await fs.writeFile(secretKey, pair.secretKeyFile, { flag: 'wx', mode: 0o600 });
  await fs.writeFile(publicKey, pair.publicKeyFile, { flag: 'wx' });
  return { keyId: pair.keyId, publicKey, secretKey, encrypted: (context.env.LAUNCHER_SIGN_PASSWORD ?? '') !== '' };
}

const versionId: OptionSpecs = {
  'version-id': { value: 'ID', help: 'the launcher version', required: true },
};

/**
 * A command's run function on an `Api` for `--server`, whose connections are closed when it is done
 * (a connection kept alive would hold the process until the service's idle timeout).
 */
const withApi =
  (run: (api: Api, options: ParsedOptions, context: Context) => Promise<unknown>) =>
  async (options: ParsedOptions, context: Context): Promise<unknown> => {
    const timeoutS = integerOption(options, 'timeout', 1, 86_400);
    const api = new Api(
      options.require('server'),
      tokenFrom(context.env),
      (line) => context.progress.write(line + '\n'),
      RETRY_DELAYS_MS,
      timeoutS === undefined ? REQUEST_TIMEOUT_MS : timeoutS * 1000,
    );
    try {
      return await run(api, options, context);
    } finally {
      api.close();
    }
  };

/** Roles that may publish versions and releases (the service's own rule): checked before uploading. */
const PUBLISHING_ROLES: readonly string[] = ['owner', 'publisher'];

/** The token's account and the service (`GET /api/admin/me`), once its role is known to publish. */
async function checkRole(api: Api): Promise<Me> {
  const me = await api.json<Me>('GET', '/api/admin/me');
  if (!PUBLISHING_ROLES.includes(me.user.role)) {
    throw new Error(`the token's role is ${me.user.role}: publishing needs an owner's or a publisher's token`);
  }
  return me;
}

/**
 * The manifest's app: the service's APP_NAME. `--app` may only repeat it (a manifest naming another
 * app would be refused after the upload).
 */
function serviceApp(options: ParsedOptions, me: Me): string {
  const given = options.get('app');
  if (given !== undefined && given !== me.appName) {
    throw new UsageError(`--app: the service's APP_NAME is ${me.appName}, not ${given} (leave --app out to use it)`);
  }
  return me.appName;
}

/** `--publish-at`: an ISO 8601 time the service will take, checked before anything is uploaded. */
function publishAt(options: ParsedOptions): string | undefined {
  const text = options.get('publish-at');
  if (text === undefined) return undefined;
  if (
    !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(text) ||
    Number.isNaN(Date.parse(text))
  ) {
    throw new UsageError(`--publish-at: not an ISO 8601 time with its offset (e.g. 2030-01-01T08:00:00Z): ${text}`);
  }
  return text;
}

/** `--create-package`'s body: `--name` is an alias of `--name-zh` (which wins), as the API has it. */
function packageFields(options: ParsedOptions): Record<string, unknown> {
  const nameZh = options.get('name-zh') ?? options.get('name');
  if (nameZh === undefined) throw new UsageError('--create-package: --name (or --name-zh) is required');
  return defined({
    nameZh,
    nameEn: options.get('name-en'),
    descriptionZh: options.get('description-zh') ?? options.get('description'),
    descriptionEn: options.get('description-en'),
  });
}

/** The Idempotency-Key of a publication: concurrent runs for the same build make one entry. */
const idempotencyKey = (...parts: (string | number)[]): string =>
  createHash('sha256').update(parts.join('\n')).digest('hex');

function integerOption(options: ParsedOptions, name: string, min: number, max: number): number | undefined {
  const text = options.get(name);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!/^\d+$/.test(text) || value < min || value > max) {
    throw new UsageError(`--${name}: must be an integer from ${min} to ${max}`);
  }
  return value;
}

/** Only the options given: the service's defaults stand for the rest. */
function defined(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));
}

/** A rerun: the entry that exists already, when it holds this very file; else a conflict naming both. */
function sameFile<T extends { sha256: string | null }>(existing: T, file: LocalFile, what: string): T {
  if (existing.sha256 === file.sha256) return existing;
  throw new Error(
    `conflict: ${what} already exists with a different file (sha256 ${existing.sha256 ?? 'unknown'}, ` +
      `this file ${file.sha256})`,
  );
}

/**
 * Uploads the build (resuming a remembered upload), creates the entry, then forgets the upload. A 422
 * from the creation is a concurrent run of this build (its own upload, so another body under the same
 * Idempotency-Key) that made the entry first, a 409 a concurrent run that took the versionCode:
 * `made` looks it up (a conflict when it holds another file).
 */
async function publishFile<T>(
  api: Api,
  options: ParsedOptions,
  file: LocalFile,
  context: Context,
  create: (filePath: string) => Promise<T>,
  made: () => Promise<T | undefined>,
): Promise<T> {
  const state = new FileUrlStorage(stateFile(context.env));
  const progress = progressReporter(context.progress, `upload ${file.name}`);
  const chunkBytes = integerOption(options, 'chunk-size', 1, Number.MAX_SAFE_INTEGER) ?? CHUNK_BYTES;
  const stored = await uploadFile(api, file, { state, progress, chunkBytes });
  progress.done();
  const created = await create(stored.filePath).catch(async (err: unknown) => {
    const raced = err instanceof ApiError && (err.status === 422 || err.status === 409);
    const existing = raced ? await made() : undefined;
    if (existing === undefined) throw err;
    return existing;
  });
  await forgetUpload(api, file, state);
  return created;
}

async function publishVersion(api: Api, options: ParsedOptions, context: Context): Promise<unknown> {
  const slug = options.require('package');
  const version = options.require('version');
  const versionCode = integerOption(options, 'version-code', 0, Number.MAX_SAFE_INTEGER) ?? 0;
  const rolloutPercent = integerOption(options, 'rollout', 0, 100);
  const at = publishAt(options);
  const file = await describeFile(options.require('file'));
  await checkRole(api);
  const pkgPath = `/api/admin/software/${encodeURIComponent(slug)}`;
  const pkg = await api.json<Package>('GET', pkgPath).catch(async (err: unknown) => {
    if (!(err instanceof ApiError && err.status === 404 && options.flag('create-package'))) throw err;
    // A concurrent first run may create it first (409): the package with this slug is used either way.
    await api.json('POST', '/api/software', { slug, ...packageFields(options) }).catch((failure: unknown) => {
      if (!(failure instanceof ApiError && failure.status === 409)) throw failure;
    });
    return api.json<Package>('GET', pkgPath);
  });
  /** The stored version of this versionCode when it holds this file and version (a rerun), else a conflict. */
  const stored = (versions: Package['versions']) => {
    const existing = versions.find((v) => v.versionCode === versionCode);
    if (existing === undefined) return undefined;
    const what = `${slug} versionCode ${versionCode} (version ${existing.version}, id ${existing.id})`;
    sameFile(existing, file, what);
    if (existing.version !== version) {
      throw new Error(`conflict: ${what} is stored with version ${existing.version}, not ${version}`);
    }
    return existing;
  };
  const existing = stored(pkg.versions);
  if (existing !== undefined) return existing;
  const latest = Math.max(-1, ...pkg.versions.map((v) => v.versionCode));
  if (versionCode <= latest && !options.flag('allow-older')) {
    throw new Error(
      `--version-code ${versionCode} is not above the latest (${latest}): launchers would not see it as an ` +
        'update; pass --allow-older to publish it anyway',
    );
  }
  const fileSignature = await signatureFor(
    options,
    context,
    () => prehashFile(file.path),
    versionTrustedComment({ slug, versionCode, sha256: file.sha256 }),
  );
  return publishFile(
    api,
    options,
    file,
    context,
    (filePath) =>
      api.json<Version>(
        'POST',
        `/api/software/${encodeURIComponent(pkg.id)}/versions`,
        defined({
          version,
          versionCode,
          changelogZh: options.get('changelog-zh'),
          changelogEn: options.get('changelog-en'),
          downloadType: 'local',
          filePath,
          forceUpdate: options.flag('force') || undefined,
          minVersion: options.get('min-version'),
          rolloutPercent,
          publishAt: at,
          fileSignature,
        }),
        { idempotencyKey: idempotencyKey(slug, versionCode, file.sha256) },
      ),
    async () => stored((await api.json<Package>('GET', pkgPath)).versions),
  );
}

async function publishRelease(api: Api, options: ParsedOptions, context: Context): Promise<unknown> {
  const slug = options.require('addon');
  const version = options.require('version');
  const requires = (options.get('requires') ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const file = await describeFile(options.require('file'));
  await checkRole(api);
  // The administrators' read: it lists scheduled releases too (publishAt in the future), not yet public.
  const addonPath = `/api/admin/addons/${encodeURIComponent(slug)}`;
  /** The stored release of this version when it holds this file (a rerun), else a conflict. */
  const stored = (releases: Addon['releases']) => {
    const existing = releases.find((r) => r.version === version);
    return existing && sameFile(existing, file, `${slug} release ${version} (id ${existing.id})`);
  };
  const addon = await api.json<Addon>('GET', addonPath);
  const existing = stored(addon.releases);
  if (existing !== undefined) return existing;
  const fileSignature = await signatureFor(
    options,
    context,
    () => prehashFile(file.path),
    releaseTrustedComment({ slug, version, sha256: file.sha256 }),
  );
  return publishFile(
    api,
    options,
    file,
    context,
    (filePath) =>
      api.json<Release>(
        'POST',
        '/api/releases',
        defined({
          addonId: addon.id,
          version,
          changelogZh: options.get('changelog-zh'),
          changelogEn: options.get('changelog-en'),
          downloadType: 'local',
          filePath,
          dependencies: requires.length > 0 ? requires.map((dependency) => ({ slug: dependency })) : undefined,
          fileSignature,
        }),
        { idempotencyKey: idempotencyKey(slug, version, file.sha256) },
      ),
    async () => stored((await api.json<Addon>('GET', addonPath)).releases),
  );
}

function versionPath(options: ParsedOptions): string {
  return `/api/software/versions/${encodeURIComponent(options.require('version-id'))}`;
}

const setRollout = (percent: (options: ParsedOptions) => number) =>
  withApi((api, options) => api.json<Version>('PUT', versionPath(options), { rolloutPercent: percent(options) }));

const setRevoked = (action: 'revoke' | 'unrevoke') =>
  withApi((api, options) => api.json<Version>('POST', `${versionPath(options)}/${action}`));

/** `launcher-publish game`: the client folder as a build; with `--manifest-out`, only its manifest. */
async function publishGame(options: ParsedOptions, context: Context): Promise<unknown> {
  const buildCode = integerOption(options, 'build-code', 1, Number.MAX_SAFE_INTEGER);
  if (buildCode === undefined) throw new UsageError('--build-code is required');
  const fields = defined({
    changelogZh: options.get('changelog-zh'),
    changelogEn: options.get('changelog-en'),
    forceUpdate: options.flag('force-update') || undefined,
    publishAt: publishAt(options),
  });
  /** The folder's files, checked against the manifest rules before any is read (and anything sent). */
  const clientOf = async (app: string) => {
    const build = manifestOptions(options, buildCode, app);
    const dir = options.require('dir');
    const files = await walkClient(dir, options.all('exclude'));
    checkClient(files, build, dir);
    return { build, files };
  };
  const manifestOf = async ({ build, files }: Awaited<ReturnType<typeof clientOf>>) => {
    const manifest = await clientManifest(files, build, context);
    return { manifest, trustedComment: manifestTrustedComment(build, manifest) };
  };
  const manifestOut = options.get('manifest-out');
  if (manifestOut !== undefined) {
    const writeManifest = async (app: string) => {
      const { manifest, trustedComment } = await manifestOf(await clientOf(app));
      await fs.writeFile(manifestOut, manifest.text);
      const { files: count, totalBytes } = manifest;
      return { manifest: manifestOut, sha256: manifest.sha256, trustedComment, files: count, totalBytes };
    };
    // The app from the service when --server is given (as a publish does), else as --app says.
    if (options.get('server') !== undefined) {
      return withApi(async (api) => writeManifest(serviceApp(options, await api.json<Me>('GET', '/api/admin/me'))))(
        options,
        context,
      );
    }
    const app = options.get('app');
    if (app === undefined) {
      throw new UsageError("--manifest-out: --app (the service's APP_NAME) or --server (to read it) is required");
    }
    return writeManifest(app);
  }
  options.require('server');
  return withApi(async (api) => {
    const client = await clientOf(serviceApp(options, await checkRole(api)));
    const builds = await heldBuilds(api);
    checkBuildCode(builds, buildCode);
    const { manifest, trustedComment } = await manifestOf(client);
    const manifestSignature = await signatureFor(options, context, manifestPrehash(manifest), trustedComment);
    const buildFields = { ...fields, ...defined({ manifestSignature }) };
    return publishBuild(api, client.build, manifest, buildFields, context, builds);
  })(options, context);
}

export const commands: Record<string, Command> = {
  keygen: {
    summary:
      'make a minisign key pair for signing builds: DIR/publisher.pub and DIR/publisher.key ' +
      '(encrypted with LAUNCHER_SIGN_PASSWORD, or unencrypted when it is empty)',
    options: { out: { value: 'DIR', help: 'where to write the key pair (never over existing keys)', required: true } },
    run: keygen,
  },
  version: {
    summary: 'upload a launcher build (resumable) and create its version; rerunning is safe',
    options: {
      ...server,
      package: { value: 'SLUG', help: 'the launcher package', required: true },
      version: { value: 'V', help: 'the version name, e.g. 1.4.0', required: true },
      'version-code': {
        value: 'N',
        help: 'the integer version code (0 or more), above the latest unless --allow-older',
        required: true,
      },
      'create-package': { help: 'create the package when it does not exist (needs --name)' },
      name: { value: 'T', help: "with --create-package: the package's name (an alias of --name-zh)" },
      'name-zh': { value: 'T', help: 'with --create-package: name (Chinese)' },
      'name-en': { value: 'T', help: 'with --create-package: name (English)' },
      description: { value: 'T', help: 'with --create-package: description (an alias of --description-zh)' },
      'description-zh': { value: 'T', help: 'with --create-package: description (Chinese)' },
      'description-en': { value: 'T', help: 'with --create-package: description (English)' },
      'allow-older': { help: 'publish a version code at or below the latest (it becomes the latest)' },
      ...upload,
      ...changelog,
      force: { help: 'force the update on launchers below this version' },
      'min-version': { value: 'V', help: 'the lowest version allowed to keep running' },
      rollout: { value: 'P', help: 'staged rollout percentage (0-100; 0 publishes it halted)' },
      'publish-at': {
        value: 'ISO',
        help: 'publish at this time (ISO 8601 with its offset, e.g. 2030-01-01T08:00:00Z)',
      },
    },
    run: withApi(publishVersion),
  },
  release: {
    summary: 'upload an addon build (resumable) and create its release; rerunning is safe',
    options: {
      ...server,
      addon: { value: 'SLUG', help: 'the addon', required: true },
      version: { value: 'V', help: 'the release version', required: true },
      ...upload,
      ...changelog,
      requires: { value: 'SLUG,...', help: 'addons this release requires' },
    },
    run: withApi(publishRelease),
  },
  game: {
    summary:
      'publish a game client folder as a build: files cut into chunks (FastCDC), only the chunks the ' +
      'service lacks uploaded; rerunning is safe',
    options: {
      ...server,
      server: {
        ...server.server,
        required: false,
        help: `${server.server?.help} (with --manifest-out: only to read its APP_NAME)`,
      },
      dir: { value: 'CLIENT', help: 'the game client folder (regular files only)', required: true },
      app: {
        value: 'NAME',
        help: "the manifest's app: the service's APP_NAME (default: the service's; with --manifest-out and no --server, required)",
      },
      version: { value: 'V', help: 'the build version, e.g. 1.18.3', required: true },
      'build-code': {
        value: 'N',
        help: 'the integer build code (1 or more), above every build the service holds',
        required: true,
      },
      ...changelog,
      'force-update': { help: 'force the update on launchers below this build' },
      'publish-at': {
        value: 'ISO',
        help: 'publish at this time (ISO 8601 with its offset, e.g. 2030-01-01T08:00:00Z)',
      },
      remove: {
        value: 'GLOB',
        multiple: true,
        help:
          'files launchers delete when the manifest does not list them (e.g. "Data/patch-*.mpq": a top-level ' +
          'folder holding a listed file, not a player folder, then a name)',
      },
      initial: {
        value: 'PATH',
        multiple: true,
        help:
          'files written only when absent, then left to the player (e.g. WTF/Config.wtf; globs too); every file ' +
          'in a player folder (WTF/, Interface/, Screenshots/, Logs/, Errors/, WDB/, Cache/) must be one',
      },
      exclude: { value: 'GLOB', multiple: true, help: 'leave these paths (files or folders) out, e.g. "Logs/**"' },
      'sign-key': {
        value: 'FILE',
        help: 'sign the manifest with this minisign secret key (its password in LAUNCHER_SIGN_PASSWORD)',
      },
      signature: {
        value: 'FILE.minisig',
        help: 'a signature of the manifest made elsewhere (see --manifest-out), checked before the upload',
      },
      'publisher-key': { value: 'PUB', help: 'with --signature: the minisign public key it must verify with' },
      'manifest-out': {
        value: 'FILE',
        help: 'write the manifest to FILE (to sign it elsewhere) and upload nothing (only a manifest that passes the rules)',
      },
    },
    run: publishGame,
  },
  rollout: {
    summary: "set a version's rollout percentage",
    options: { ...server, ...versionId, percent: { value: 'P', help: 'percentage (0-100; 0 halts)', required: true } },
    run: setRollout((options) => integerOption(options, 'percent', 0, 100) ?? 100),
  },
  halt: {
    summary: "halt a version's rollout (rollout 0: no further devices are offered it)",
    options: { ...server, ...versionId },
    run: setRollout(() => 0),
  },
  revoke: {
    summary: 'withdraw a version: never offered again, devices on it are sent back',
    options: { ...server, ...versionId },
    run: setRevoked('revoke'),
  },
  unrevoke: {
    summary: 'offer a withdrawn version again',
    options: { ...server, ...versionId },
    run: setRevoked('unrevoke'),
  },
};
