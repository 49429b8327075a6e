/**
 * `UpdateManager`: one object made from the server URL, the pinned keys and a state folder, that runs
 * the specification's client flow (`checkForUpdates`), fetches and verifies what it says
 * (`downloadUpdate`), installs it (`installUpdate`, `startup`, `markPatchApplied`: `install.ts`),
 * beats (`startHeartbeat`) and answers addon managers (`checkAddons`, `releaseByHash`). Every answer
 * it uses is verified first (`trust/verify.ts`), and so is every file before it is kept or started.
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { paths } from '../api.js';
import { applyDelta, type DeltaEngine, type DeltaOffer, removeAbandonedRebuilds } from './delta.js';
import {
  DEFAULT_MIN_BYTES_PER_SECOND,
  DEFAULT_STALL_TIMEOUT_MS,
  type DownloadDeadlines,
  type FetchFileOptions,
  fetchFile,
  partFiles,
  type Progress,
} from '../net/download.js';
import {
  HttpError,
  IntegrityError,
  LauncherClientError,
  PublisherSignatureError,
  RollbackError,
  StateError,
} from '../errors.js';
import { Heartbeat, type HeartbeatBody, type HeartbeatOptions, sendHeartbeat } from './heartbeat.js';
import {
  DEFAULT_RETRY,
  deadline,
  httpError,
  readLimitedBody,
  type RetryOptions,
  sendWithin,
  withRetries,
} from '../net/http.js';
import {
  Lifecycle,
  type LifecycleRecord,
  type PendingInstall,
  type PendingPatch,
  packageExtension,
  pruneDownloads,
  startDetached,
} from './install.js';
import {
  checkSignature,
  MinisignFormatError,
  type MinisignPublicKey,
  parsePublicKeys,
  parseSignature,
  prehashFile,
  releaseTrustedComment,
  versionTrustedComment,
} from '../trust/minisign.js';
import { StateFolder, type Warn } from '../disk/state.js';
import { KeyRing, type SigningKeyEntry, type TrustedKey } from '../trust/keys.js';
import {
  type AnswerPolicy,
  type FileCheck,
  ReplayMemory,
  type SentRequest,
  verifyAnswer,
  verifyFile,
} from '../trust/verify.js';

type Json<P extends keyof paths, M extends 'get' | 'post'> = paths[P][M] extends {
  responses: { 200: { content: { 'application/json': infer T } } };
}
  ? T
  : never;

/** `GET /api/software/check-update`'s answer. */
export type CheckUpdateAnswer = Json<'/api/software/check-update', 'get'>;
/** `POST /api/addons/updates`'s answer. */
export type AddonUpdatesAnswer = Json<'/api/addons/updates', 'post'>;
/** What an addon manager sends: `{slug, version}` or `{sha256}` per installed addon. */
export type InstalledAddon =
  paths['/api/addons/updates']['post']['requestBody']['content']['application/json']['installed'][number];
/** `POST /api/addons/fingerprints`'s answer. */
export type FolderMatchesAnswer = Json<'/api/addons/fingerprints', 'post'>;
/** `GET /api/releases/by-hash/{sha256}`'s answer. */
export type ReleaseByHashAnswer = Json<'/api/releases/by-hash/{sha256}', 'get'>;
/** `GET /api/addons/{idOrSlug}`'s answer: the addon with its releases, newest first. */
export type AddonAnswer = Json<'/api/addons/{idOrSlug}', 'get'>;
/** What downloading an addon's release needs of it (every answer naming a release carries these). */
export type AddonReleaseFile = Pick<AddonAnswer['releases'][number], 'id' | 'version' | 'fileSize' | 'sha256'> & {
  readonly fileSignature?: string;
};

export interface UpdateManagerOptions {
  /** The service's base URL, e.g. `https://updates.example.com`. */
  serverUrl: string;
  /** Keys pinned by the app (`{keyId, publicKey}` as `GET /api/signing-keys` lists them). */
  trustedKeys: readonly TrustedKey[];
  /** Folder for the device id, adopted keys, replay memory and downloads. */
  stateDir: string;
  /** The app: packages `<app>-launcher` and `<app>-launcher-patch` (or name them with `fullSlug`, `patchSlug`). */
  app?: string;
  fullSlug?: string;
  patchSlug?: string;
  lang?: 'zh' | 'en';
  /**
   * Dropped: an answer is refused once its signature's `expires` (an hour after it was signed) is
   * past. Given, it is a `TypeError` (a shorter limit would refuse answers the service legitimately
   * sends: it keeps a signed answer up to 30 minutes).
   */
  maxAnswerAgeSeconds?: never;
  /** The largest answer read, in bytes (default 4 MiB): a larger one is refused as soon as it is seen. */
  maxAnswerBytes?: number;
  /**
   * Each attempt of an answer's request, from sending to its last byte, and the wait for a
   * download's answer (its headers), in ms (default 30 000).
   */
  timeoutMs?: number;
  /**
   * A download's speed floor, as curl's `--speed-limit`/`--speed-time`: an attempt that receives
   * fewer than `minBytesPerSecond` (default 1 024) over any `stallTimeoutMs` (default 30 000) from
   * its request on fails, and the next resumes it; attempts without that much progress count
   * against `retry.retries`.
   */
  minBytesPerSecond?: number;
  stallTimeoutMs?: number;
  /** This computer's clock, in epoch ms (default `Date.now`): answers' signatures are checked against it. */
  now?: () => number;
  /** Retries of answers and downloads (network errors, 429, 5xx). */
  retry?: Partial<RetryOptions>;
  /**
   * Hears what an operation on the game folder leaves behind and goes on from (a work folder it could
   * not remove because a file in it is held: removed next time), as `(message, fields)`.
   */
  onWarning?: Warn;
  /** Further checks of every downloaded file, after its size and hash. */
  fileChecks?: readonly FileCheck[];
  /**
   * The publisher's minisign public keys (a `.pub` file's text or its base64 line each). When any
   * are given, a download is kept only when `latest.fileSignature` verifies with one of them over
   * the file and its trusted comment is exactly `package=<slug> versionCode=<n> sha256=<hex>` of
   * this update (else `PublisherSignatureError`, the file deleted).
   */
  publisherKeys?: readonly string[];
  /** The zstd program that rebuilds delta updates where the runtime's `zlib` cannot (default: `zstd` on the PATH). */
  zstd?: string;
  /**
   * The most memory a delta rebuilt in this process may take, counted as twice the installed file
   * (the dictionary, held whole, and zstd's copy of it) plus the new file (the decoder's window). A
   * larger pair is rebuilt by the zstd program; 0 never rebuilds in process. Default 1 GiB.
   */
  inProcessDeltaMaxBytes?: number;
}

/** The events an `UpdateManager` emits beside its promises' results (`manager.on(name, listener)`). */
export type UpdateManagerEvents = {
  'checking-for-update': [];
  /** The flow found a mandatory update or a patch to download (`check.update`). */
  'update-available': [check: UpdateCheck];
  /** Nothing to download (`check.optional` may still name an optional update). */
  'update-not-available': [check: UpdateCheck];
  'download-progress': [progress: Progress];
  'update-downloaded': [downloaded: DownloadedUpdate];
  /** Any failure of the calls above (their promise rejects as well); emitted only when listened to. */
  error: [error: Error];
};

/** What `startup` found: the install it confirmed, and what is still pending. */
export interface StartupResult {
  /** The pending install of the running version, now confirmed (its downloads pruned), else null. */
  readonly confirmed: PendingInstall | null;
  readonly record: LifecycleRecord;
}

/** A version the flow offers. */
export interface UpdateInfo {
  /** `full`: the launcher package; `patch`: the patch package. */
  readonly kind: 'full' | 'patch';
  readonly slug: string;
  readonly version: string;
  readonly versionCode: number;
  readonly changelog: string;
  readonly downloadUrl: string;
  readonly fileSize: number;
  readonly sha256: string | null;
  /**
   * The stored file's original name (check-update's signed `latest.fileName`), null when the
   * service names none: the downloaded file keeps its extension when it is one of `PACKAGE_EXTENSIONS`.
   */
  readonly fileName: string | null;
  /** The publisher's minisign signature of the file (`.minisig` text), when the service has one. */
  readonly fileSignature: string | null;
  /** True when the device runs a revoked version: install this one even though it is lower. */
  readonly downgrade: boolean;
  /** A delta from the version checked with, when the service has one (see `DownloadOptions.currentFile`). */
  readonly delta?: DeltaOffer;
}

/** What the specification's flow concluded. */
export interface UpdateCheck {
  /** `mandatory`: install `update` (full package) now; `patch`: apply `update` at the next restart. */
  readonly result: 'up-to-date' | 'mandatory' | 'patch';
  /** A newer full package the user may choose (an optional update), shown as an indicator. */
  readonly optional: UpdateInfo | null;
  /** What to download: the mandatory full package, or the patch; null when up to date. */
  readonly update: UpdateInfo | null;
}

export interface DownloadOptions {
  onProgress?: (progress: Progress) => void;
  signal?: AbortSignal;
  /**
   * The installed file of the version the update was checked with. When the service offers a delta
   * from it, the update is rebuilt from this file and the (much smaller) delta; any failure of that
   * falls back to the full download. Default: the installed package file the state folder keeps
   * for that version (one the library installed).
   */
  currentFile?: string;
}

/** A verified file in the state folder's downloads. */
export interface DownloadedUpdate {
  readonly update: UpdateInfo;
  /** Absolute path: `downloads/<sha256>/<slug>-<version><extension of fileName>`. */
  readonly file: string;
  readonly sha256: string;
  /** True when the file was rebuilt from a delta. */
  readonly delta: boolean;
  /** Bytes received by this call's completed downloads (0 when the file was already there). */
  readonly downloadedBytes: number;
  /** Why an offered delta was not used (then the full file was downloaded), else null. */
  readonly deltaFailure: string | null;
  /** What rebuilt the file from the delta (`node`: the runtime's zlib; `program`: zstd), null without one. */
  readonly deltaEngine: DeltaEngine | null;
}

/** The default `maxAnswerBytes`: check-update and catalogue answers are KiBs. */
export const DEFAULT_MAX_ANSWER_BYTES = 4 * 1024 * 1024;
/** The default `timeoutMs`. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** A positive integer option, or its default; anything else is a `TypeError`. */
function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0) throw new TypeError(`${name} must be a positive integer`);
  return value;
}

/** How an answer is asked for: a POST's JSON body, the query parameters its signature covers, the caller's signal. */
export interface AnswerRequest {
  readonly body?: unknown;
  /** The largest body read (default `maxAnswerBytes`). */
  readonly maxBytes?: number;
  readonly coveredParams?: readonly string[];
  readonly signal?: AbortSignal | undefined;
}

/** `inProcessDeltaMaxBytes`'s default. */
export const DEFAULT_IN_PROCESS_DELTA_MAX_BYTES = 1024 * 1024 * 1024;

/** The lower-case SHA-256 a download of `what` is verified against: `IntegrityError` when it names none. */
function requiredSha256(sha256: string | null | undefined, what: string): string {
  const hex = sha256?.toLowerCase() ?? null;
  if (hex === null || !/^[0-9a-f]{64}$/.test(hex)) {
    throw new IntegrityError(`${what} names no SHA-256: it cannot be verified`);
  }
  return hex;
}

export class UpdateManager extends EventEmitter<UpdateManagerEvents> {
  readonly state: StateFolder;
  private readonly lifecycle: Lifecycle;
  private readonly base: URL;
  private readonly keys: KeyRing;
  private readonly policy: AnswerPolicy;
  /** Retries of answers and downloads (the game manager's chunks too). */
  readonly retry: RetryOptions;
  private readonly slugs: { full: string; patch: string };
  private readonly publisherKeys: readonly MinisignPublicKey[];
  private readonly maxAnswerBytes: number;
  private readonly timeoutMs: number;
  /** Every download's deadlines (the game manager's chunks too). */
  readonly deadlines: DownloadDeadlines;

  constructor(private readonly options: UpdateManagerOptions) {
    super();
    if ((options as { maxAnswerAgeSeconds?: unknown }).maxAnswerAgeSeconds !== undefined) {
      throw new TypeError(
        "maxAnswerAgeSeconds was dropped: an answer is refused once its signature's expires is past (an hour after signing)",
      );
    }
    this.maxAnswerBytes = positiveInteger('maxAnswerBytes', options.maxAnswerBytes, DEFAULT_MAX_ANSWER_BYTES);
    this.timeoutMs = positiveInteger('timeoutMs', options.timeoutMs, DEFAULT_TIMEOUT_MS);
    this.deadlines = {
      timeoutMs: this.timeoutMs,
      minBytesPerSecond: positiveInteger('minBytesPerSecond', options.minBytesPerSecond, DEFAULT_MIN_BYTES_PER_SECOND),
      stallTimeoutMs: positiveInteger('stallTimeoutMs', options.stallTimeoutMs, DEFAULT_STALL_TIMEOUT_MS),
    };
    this.base = new URL(options.serverUrl);
    this.state = new StateFolder(path.resolve(options.stateDir), options.onWarning);
    this.lifecycle = new Lifecycle(this.state);
    this.keys = new KeyRing(options.trustedKeys, this.state);
    this.policy = {
      keys: this.keys,
      replay: new ReplayMemory(this.state),
      refreshKeys: async () => void (await this.refreshKeys()),
      now: options.now ?? Date.now,
    };
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.publisherKeys = (options.publisherKeys ?? []).flatMap((text) => {
      try {
        const keys = parsePublicKeys(text);
        if (keys.length === 0) throw new MinisignFormatError('no key in the text');
        return keys;
      } catch (err) {
        if (err instanceof MinisignFormatError) throw new TypeError(`publisherKeys: ${err.message}`, { cause: err });
        throw err;
      }
    });
    const full = options.fullSlug ?? (options.app === undefined ? undefined : `${options.app}-launcher`);
    this.slugs = { full: full ?? '', patch: options.patchSlug ?? `${full ?? ''}-patch` };
  }

  deviceId(): Promise<string> {
    return this.state.deviceId();
  }

  /** `pathname` under the server URL (its own path kept: a service published under a prefix). */
  url(pathname: string, query: Record<string, string | number | undefined> = {}): string {
    const url = new URL(`${this.base.pathname.replace(/\/+$/, '')}${pathname}`, this.base);
    for (const [key, value] of Object.entries(query)) if (value !== undefined) url.searchParams.set(key, String(value));
    return url.toString();
  }

  /**
   * A verified JSON answer to `url` (retried on network errors, 429 and 5xx, each attempt within
   * `timeoutMs`, the body read up to `maxAnswerBytes`); other statuses are `HttpError`s. Every
   * signed read goes through here: the signature base is built from the request sent (its path and
   * query or covered parameters, and a POST body's `Content-Digest`).
   */
  private async answer<T>(url: string, init: AnswerRequest = {}): Promise<T> {
    return JSON.parse((await this.verifiedBody(url, init)).toString('utf8')) as T;
  }

  /** The exact bytes of a verified answer to `url` (as `answer` fetches and verifies them). */
  async verifiedBody(url: string, init: AnswerRequest = {}): Promise<Buffer> {
    const body = init.body === undefined ? null : Buffer.from(JSON.stringify(init.body));
    const request: SentRequest = {
      url: new URL(url),
      contentDigest: body === null ? null : `sha-256=:${createHash('sha256').update(body).digest('base64')}:`,
      coveredParams: init.coveredParams ?? null,
    };
    const received = await withRetries(
      async () => {
        const within = deadline(this.timeoutMs, init.signal);
        const res = await sendWithin(
          url,
          {
            method: body === null ? 'GET' : 'POST',
            headers: {
              accept: 'application/json',
              'accept-encoding': 'identity',
              ...(request.contentDigest === null
                ? {}
                : { 'content-type': 'application/json', 'content-digest': request.contentDigest }),
            },
            ...(body === null ? {} : { body }),
          },
          within,
        );
        if (res.status !== 200) throw await httpError(url, res);
        const maxBytes = init.maxBytes ?? this.maxAnswerBytes;
        return { request, headers: res.headers, body: await readLimitedBody(url, res, maxBytes, within) };
      },
      this.retry,
      init.signal,
    );
    await verifyAnswer(received, this.policy);
    return received.body;
  }

  /** `answer`, or null when the service answers 404 (nothing of that name). */
  private async answerOrNull<T>(url: string, init: AnswerRequest = {}): Promise<T | null> {
    try {
      return await this.answer<T>(url, init);
    } catch (err) {
      if (err instanceof HttpError && err.status === 404) return null;
      throw err;
    }
  }

  /** Fetches `GET /api/signing-keys` and adopts the keys a trusted key endorsed. */
  async refreshKeys(): Promise<string[]> {
    const url = this.url('/api/signing-keys');
    const listed = await withRetries(async () => {
      const within = deadline(this.timeoutMs);
      const res = await sendWithin(url, { headers: { accept: 'application/json' } }, within);
      if (res.status !== 200) throw await httpError(url, res);
      try {
        return JSON.parse(
          (await readLimitedBody(url, res, this.maxAnswerBytes, within)).toString('utf8'),
        ) as SigningKeyEntry[];
      } catch (err) {
        if (err instanceof SyntaxError) return [];
        throw err;
      }
    }, this.retry);
    return this.keys.adopt(Array.isArray(listed) ? listed : []);
  }

  /**
   * One verified check-update; `null` when the package has no version (404). An offer (`hasUpdate`)
   * of a `latest.versionCode` not above `versionCode` is a `RollbackError`, unless it says
   * `downgrade: true` (a revoked version) and `slug` is not the patch package.
   */
  async checkUpdate(slug: string, versionCode: number, signal?: AbortSignal): Promise<CheckUpdateAnswer | null> {
    const url = this.url('/api/software/check-update', {
      slug,
      versionCode,
      deviceId: await this.deviceId(),
      lang: this.options.lang,
    });
    const answer = await this.answerOrNull<CheckUpdateAnswer>(url, { coveredParams: ['slug', 'versionCode'], signal });
    const downgrade = answer?.downgrade === true && slug !== this.slugs.patch;
    if (answer?.hasUpdate && answer.latest.versionCode <= versionCode && !downgrade) {
      throw new RollbackError(
        `${slug}: offered versionCode ${answer.latest.versionCode}, not above ${versionCode}: a rollback`,
      );
    }
    return answer;
  }

  private static info(kind: UpdateInfo['kind'], slug: string, answer: CheckUpdateAnswer): UpdateInfo {
    const { latest } = answer;
    return {
      kind,
      slug,
      version: latest.version,
      versionCode: latest.versionCode,
      changelog: latest.changelog,
      downloadUrl: latest.downloadUrl,
      fileSize: latest.fileSize,
      sha256: latest.sha256,
      fileName: latest.fileName ?? null,
      fileSignature: latest.fileSignature ?? null,
      downgrade: answer.downgrade === true,
      ...(latest.delta === undefined ? {} : { delta: latest.delta }),
    };
  }

  private reported<T>(work: () => Promise<T>): Promise<T> {
    return reported(this, work);
  }

  /**
   * The specification's client flow: the full package first; `hasUpdate && forceUpdate` (or
   * `downgrade`) is a mandatory update and the flow stops; `hasUpdate` alone is an optional update
   * and the flow goes on; then the patch package with `patchVersionCode`, whose `hasUpdate` means a
   * patch to download. A patch package with no version counts as no patch; a full package with no
   * version is an `HttpError` 404 (the launcher points at the wrong service or app).
   *
   * `versionCode` defaults to the installed full version the state folder keeps; `patchVersionCode`
   * to the patch applied on that version (`markPatchApplied`), else `versionCode`.
   */
  checkForUpdates(versionCode?: number, patchVersionCode?: number, signal?: AbortSignal): Promise<UpdateCheck> {
    return this.reported(async () => {
      if (this.slugs.full === '') throw new TypeError('UpdateManager needs `app` or `fullSlug` to check for updates');
      this.emit('checking-for-update');
      const { installed } = await this.lifecycle.read();
      const code = versionCode ?? installed.full?.versionCode;
      if (code === undefined) throw new TypeError('checkForUpdates needs the versionCode: the state folder has none');
      const appliedPatch = installed.patch?.fullVersionCode === code ? installed.patch.versionCode : undefined;
      const check = await this.flow(code, patchVersionCode ?? appliedPatch ?? code, signal);
      this.emit(check.update === null ? 'update-not-available' : 'update-available', check);
      return check;
    });
  }

  private async flow(versionCode: number, patchVersionCode: number, signal?: AbortSignal): Promise<UpdateCheck> {
    const full = await this.checkUpdate(this.slugs.full, versionCode, signal);
    if (full === null) {
      const url = this.url('/api/software/check-update', { slug: this.slugs.full, versionCode });
      throw new HttpError(404, url, `no package ${this.slugs.full}: is the server URL or the app wrong?`);
    }
    let optional: UpdateInfo | null = null;
    if (full.hasUpdate) {
      const info = UpdateManager.info('full', this.slugs.full, full);
      if (full.forceUpdate || full.downgrade) return { result: 'mandatory', optional: null, update: info };
      optional = info;
    }
    const patch = await this.checkUpdate(this.slugs.patch, patchVersionCode, signal);
    if (patch?.hasUpdate) {
      return { result: 'patch', optional, update: UpdateManager.info('patch', this.slugs.patch, patch) };
    }
    return { result: 'up-to-date', optional, update: null };
  }

  /**
   * Downloads `update` into the state folder's downloads (resuming an earlier attempt), checks its
   * size, SHA-256 and any `fileChecks`, and moves it to `downloads/<sha256>/<file name>`. A file that
   * fails a check is deleted. With `currentFile` and a delta offered, the delta comes first (`delta.ts`).
   * A file rebuilt from a delta that a process ending midway left behind is deleted first.
   * A verified patch is recorded as pending (`pending()`), for the launcher to apply at its next start.
   */
  downloadUpdate(update: UpdateInfo, options: DownloadOptions = {}): Promise<DownloadedUpdate> {
    return this.reported(async () => {
      const onProgress = (progress: Progress) => {
        options.onProgress?.(progress);
        this.emit('download-progress', progress);
      };
      const currentFile = options.currentFile ?? (await this.installedFileFor(update));
      const done = await this.download(update, {
        ...options,
        onProgress,
        ...(currentFile === undefined ? {} : { currentFile }),
      });
      if (update.kind === 'patch') {
        const patch = {
          version: update.version,
          versionCode: update.versionCode,
          file: done.file,
          sha256: done.sha256,
        };
        await this.lifecycle.change((r) => ({ ...r, pending: { ...r.pending, patch } }));
      }
      this.emit('update-downloaded', done);
      return done;
    });
  }

  /**
   * The kept package file of the version a delta of `update` starts from, when the state folder has
   * it: the installed full version's for the full package, the applied patch's (on that full
   * version) for the patch package.
   */
  private async installedFileFor(update: UpdateInfo): Promise<string | undefined> {
    if (update.delta === undefined) return undefined;
    const { full, patch } = (await this.lifecycle.read()).installed;
    const from = update.kind === 'full' ? full : patch?.fullVersionCode === full?.versionCode ? patch : null;
    return from?.versionCode === update.delta.fromVersionCode && from.file !== null ? from.file : undefined;
  }

  private async download(update: UpdateInfo, options: DownloadOptions): Promise<DownloadedUpdate> {
    const sha256 = requiredSha256(update.sha256, `${update.slug} ${update.version}`);
    const expected = { fileSize: update.fileSize, sha256 };
    const dir = this.state.downloads;
    const final = path.join(dir, sha256, UpdateManager.fileName(update));
    const checks = this.checksFor(update);
    const done: DownloadedUpdate = {
      update,
      file: final,
      sha256,
      delta: false,
      downloadedBytes: 0,
      deltaFailure: null,
      deltaEngine: null,
    };
    // A file rebuilt from a delta by a process that died midway (as large as the update it was for).
    await removeAbandonedRebuilds(dir);
    if (await UpdateManager.alreadyThere(final, expected, checks)) return done;
    // One bound for the call: the delta's attempts without progress count with the full file's.
    const fetchOptions = { ...options, retry: this.retry, deadlines: this.deadlines, failures: { failures: 0 } };
    let viaDelta = null;
    if (options.currentFile !== undefined && update.delta !== undefined) {
      viaDelta = await applyDelta({
        dir,
        offer: update.delta,
        currentFile: options.currentFile,
        expected,
        destination: final,
        zstd: this.options.zstd ?? 'zstd',
        inProcessMaxBytes: this.options.inProcessDeltaMaxBytes ?? DEFAULT_IN_PROCESS_DELTA_MAX_BYTES,
        checks,
        download: fetchOptions,
      });
      if (viaDelta.applied) {
        return { ...done, delta: true, downloadedBytes: viaDelta.downloadedBytes, deltaEngine: viaDelta.engine };
      }
    }
    // The same checks run on this download as on a file rebuilt from a delta (delta.ts) before
    // either is moved into place.
    const fetched = await this.fetchVerified(update.downloadUrl, final, expected, checks, fetchOptions);
    return {
      ...done,
      downloadedBytes: (viaDelta?.downloadedBytes ?? 0) + fetched,
      deltaFailure: viaDelta?.applied === false ? viaDelta.reason : null,
    };
  }

  /**
   * Downloads `url` (resuming the `.part` of an earlier attempt) and moves it to `final` once it passes
   * every check. A refused file is deleted; a cut-off or cancelled one is kept for the next call to
   * resume. Answers the bytes received.
   */
  private async fetchVerified(
    url: string,
    final: string,
    expected: { fileSize: number; sha256: string },
    checks: readonly FileCheck[],
    options: FetchFileOptions,
  ): Promise<number> {
    const dir = this.state.downloads;
    const part = partFiles(dir, expected.sha256);
    let received: number;
    try {
      received = await fetchFile(dir, url, expected, options);
      await verifyFile(part.part, expected, checks);
      await fs.promises.mkdir(path.dirname(final), { recursive: true });
      await fs.promises.rename(part.part, final);
    } catch (err) {
      if (err instanceof LauncherClientError && err.verification) await part.remove();
      throw err;
    }
    await part.remove();
    return received;
  }

  /** Every check of a downloaded file of `update`: the app's `fileChecks`, then the publisher's signature. */
  private checksFor(update: UpdateInfo): FileCheck[] {
    return [...(this.options.fileChecks ?? []), ...this.publisherCheck(update)];
  }

  /**
   * Installs a downloaded mandatory update: the file (with its extension from the signed
   * `latest.fileName`) is verified again (size, SHA-256, every check), made executable where the
   * platform needs it, recorded as the pending install, then started detached with `args`. The
   * launcher quits next; its next start with the new version (`startup`) confirms the install.
   * Nothing unverified is started: a file that fails a check is deleted and the call throws.
   */
  installUpdate(downloaded: DownloadedUpdate, args: readonly string[] = []): Promise<PendingInstall> {
    return this.reported(async () => {
      const { update, file } = downloaded;
      if (update.kind !== 'full')
        throw new TypeError('installUpdate starts a full package; a patch is applied by the launcher');
      const expected = { fileSize: update.fileSize, sha256: downloaded.sha256 };
      try {
        await verifyFile(file, expected, this.checksFor(update));
      } catch (err) {
        await fs.promises.rm(file, { force: true });
        throw err;
      }
      const install: PendingInstall = {
        version: update.version,
        versionCode: update.versionCode,
        installer: file,
        file,
        sha256: downloaded.sha256,
        args: [...args],
        startedAt: new Date().toISOString(),
      };
      // Recorded before it starts: a kill between the two leaves a pending install the next start sees.
      const before = await this.lifecycle.read();
      await this.lifecycle.change((r) => ({ ...r, pending: { ...r.pending, install } }));
      try {
        await startDetached(file, args);
      } catch (err) {
        await this.lifecycle.change((r) => ({ ...r, pending: { ...r.pending, install: before.pending.install } }));
        throw err;
      }
      return install;
    });
  }

  /**
   * Called at every start with the running version: confirms the pending install of that version
   * (it becomes the installed full version, its package file kept for the next delta, and the
   * downloads are pruned); a version the state folder does not know becomes the installed one.
   */
  startup(versionCode: number): Promise<StartupResult> {
    return this.reported(async () => {
      let confirmed: PendingInstall | null = null;
      const record = await this.lifecycle.change((r) => {
        const install = r.pending.install;
        if (install !== null && install.versionCode === versionCode) {
          confirmed = install;
          const full = { version: install.version, versionCode, file: install.file, sha256: install.sha256 };
          return { installed: { ...r.installed, full }, pending: { ...r.pending, install: null } };
        }
        if (r.installed.full?.versionCode === versionCode) return r;
        const full = { version: null, versionCode, file: null, sha256: null };
        return { ...r, installed: { ...r.installed, full } };
      });
      if (confirmed !== null) await this.pruneDownloads();
      return { confirmed, record };
    });
  }

  /** What is pending: an install started and not yet confirmed, a patch downloaded and not yet applied. */
  async pending(): Promise<LifecycleRecord['pending']> {
    return (await this.lifecycle.read()).pending;
  }

  /** The lifecycle record: installed full version and patch, and what is pending. */
  lifecycleRecord(): Promise<LifecycleRecord> {
    return this.lifecycle.read();
  }

  /**
   * The launcher applied the pending patch `versionCode`: it becomes the installed patch (the next
   * check uses its code) and the downloads are pruned. A `StateError` when no such patch is pending.
   */
  markPatchApplied(versionCode: number): Promise<PendingPatch> {
    return this.reported(async () => {
      let applied: PendingPatch | null = null;
      await this.lifecycle.change((r) => {
        const patch = r.pending.patch;
        const fullVersionCode = r.installed.full?.versionCode;
        if (patch === null || patch.versionCode !== versionCode) return r;
        if (fullVersionCode === undefined) throw new StateError('no installed full version: call startup first');
        applied = patch;
        return {
          installed: { ...r.installed, patch: { ...patch, fullVersionCode } },
          pending: { ...r.pending, patch: null },
        };
      });
      if (applied === null) throw new StateError(`no patch ${versionCode} is pending`);
      await this.pruneDownloads();
      return applied;
    });
  }

  /**
   * Deletes the downloads no longer needed: every verified file but the installed and pending ones,
   * and partial downloads untouched for three days. Runs after each confirmed install and applied patch.
   */
  async pruneDownloads(): Promise<string[]> {
    const { installed, pending } = await this.lifecycle.read();
    const files = [installed.full?.file, installed.patch?.file, pending.install?.file, pending.patch?.file];
    return pruneDownloads(this.state.downloads, new Set(files.filter((f): f is string => typeof f === 'string')));
  }

  /**
   * With publisher keys pinned: the file's minisign signature (from the verified answer) by one of
   * them, naming this package, versionCode and SHA-256.
   */
  private publisherCheck(update: UpdateInfo): FileCheck[] {
    return this.minisignCheck(`${update.slug} ${update.version}`, update.fileSignature, (sha256) =>
      versionTrustedComment({ slug: update.slug, versionCode: update.versionCode, sha256 }),
    );
  }

  /** The publisher check of one file: `signature` by a pinned key, with the trusted comment `comment(sha256)`. */
  private minisignCheck(label: string, fileSignature: string | null, comment: (sha256: string) => string): FileCheck[] {
    if (this.publisherKeys.length === 0) return [];
    return [
      async (file) =>
        this.checkPublisherSignature(label, fileSignature, await prehashFile(file.path), comment(file.sha256)),
    ];
  }

  /** Whether publisher keys are pinned (then every file or manifest must carry their signature). */
  get hasPublisherKeys(): boolean {
    return this.publisherKeys.length > 0;
  }

  /** `PublisherSignatureError` unless `fileSignature` by a pinned key signs `prehashed` with the trusted comment `comment`. */
  checkPublisherSignature(label: string, fileSignature: string | null, prehashed: Buffer, comment: string): void {
    if (fileSignature === null) throw new PublisherSignatureError(`${label} carries no publisher signature`);
    let signature;
    try {
      signature = parseSignature(fileSignature);
    } catch (err) {
      if (err instanceof MinisignFormatError)
        throw new PublisherSignatureError(`publisher signature: ${err.message}`, { cause: err });
      throw err;
    }
    const verdict = checkSignature(signature, this.publisherKeys, prehashed, comment);
    if (!verdict.ok) throw new PublisherSignatureError(`publisher signature: ${verdict.reason}`);
  }

  /**
   * A file already downloaded and verified earlier, checked again (the folder may have been
   * touched, the pinned keys changed); one that fails a check is deleted.
   */
  private static async alreadyThere(
    file: string,
    expected: { fileSize: number; sha256: string },
    checks: readonly FileCheck[],
  ): Promise<boolean> {
    try {
      await verifyFile(file, expected, checks);
      return true;
    } catch (err) {
      if (err instanceof LauncherClientError && err.verification) await fs.promises.rm(file, { force: true });
      // A signature that does not verify will not verify after another download either.
      if (err instanceof PublisherSignatureError) throw err;
      return false;
    }
  }

  /**
   * `<slug>-<version>` with only safe characters (the SHA-256 folder keeps versions apart), then the
   * extension of the signed `fileName` when it is one of `PACKAGE_EXTENSIONS`.
   */
  private static fileName(update: UpdateInfo): string {
    const name = `${update.slug}-${update.version}`.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '_');
    return `${name.slice(0, 128)}${packageExtension(update.fileName)}`;
  }

  private async heartbeatBody(extra: Omit<HeartbeatBody, 'deviceId'>): Promise<HeartbeatBody> {
    return { deviceId: await this.deviceId(), os: process.platform, osVersion: os.release(), ...extra };
  }

  /** One heartbeat now; throws `HttpError` or `NetworkError`. */
  async heartbeatOnce(fields: Omit<HeartbeatBody, 'deviceId'> = {}): Promise<void> {
    await sendHeartbeat(this.url('/api/launcher/heartbeat'), await this.heartbeatBody(fields));
  }

  /** Starts beating (one now, then every interval); never throws; `stop()` ends it. */
  startHeartbeat(fields: Omit<HeartbeatBody, 'deviceId'> = {}, options: HeartbeatOptions = {}): Heartbeat {
    return new Heartbeat(this.url('/api/launcher/heartbeat'), () => this.heartbeatBody(fields), options);
  }

  /**
   * `POST /api/addons/updates` (its body's `Content-Digest` sent, and covered by the answer's signature), verified.
   * With `changelogs`, each result also carries the changelogs of the releases above the installed one
   * (the language in the body too, so that the signature covers it).
   */
  checkAddons(
    installed: readonly InstalledAddon[],
    signal?: AbortSignal,
    options: { changelogs?: boolean } = {},
  ): Promise<AddonUpdatesAnswer> {
    return this.answer(this.url('/api/addons/updates', { lang: this.options.lang }), {
      body: options.changelogs === true ? { installed, changelogs: true, lang: this.options.lang } : { installed },
      signal,
    });
  }

  /**
   * `POST /api/addons/fingerprints` (at most 5,000 folder fingerprints; the body's `Content-Digest`
   * covered by the answer's signature), verified: the published releases' folders with these fingerprints.
   */
  matchFolders(fingerprints: readonly string[], signal?: AbortSignal): Promise<FolderMatchesAnswer> {
    return this.answer(this.url('/api/addons/fingerprints'), { body: { fingerprints }, signal });
  }

  /** `GET /api/releases/by-hash/{sha256}`, verified; `null` when no published release has that file. */
  async releaseByHash(sha256: string, signal?: AbortSignal): Promise<ReleaseByHashAnswer | null> {
    const url = this.url(`/api/releases/by-hash/${encodeURIComponent(sha256.toLowerCase())}`, {
      lang: this.options.lang,
    });
    return this.answerOrNull<ReleaseByHashAnswer>(url, { signal });
  }

  /** `GET /api/addons/{slug}`, verified; `null` when the catalogue has no such published addon. */
  async addon(slug: string): Promise<AddonAnswer | null> {
    const url = this.url(`/api/addons/${encodeURIComponent(slug)}`, { lang: this.options.lang });
    return this.answerOrNull<AddonAnswer>(url);
  }

  /**
   * Downloads an addon's release (from `GET /api/download/{id}`, resuming an earlier attempt) into
   * `downloads/<sha256>/`, verified as `downloadUpdate` verifies: size, SHA-256, `fileChecks`, and
   * with publisher keys pinned its minisign signature naming `addon=<slug> version=<v> sha256=<hex>`.
   * A release without a SHA-256 is refused (`IntegrityError`). Answers the file's path.
   */
  async downloadRelease(
    slug: string,
    release: AddonReleaseFile,
    options: Pick<DownloadOptions, 'onProgress' | 'signal'> = {},
  ): Promise<string> {
    const sha256 = requiredSha256(release.sha256, `${slug} ${release.version}`);
    const expected = { fileSize: release.fileSize, sha256 };
    const final = path.join(this.state.downloads, sha256, `${slug}.zip`);
    const checks = [
      ...(this.options.fileChecks ?? []),
      ...this.minisignCheck(`${slug} ${release.version}`, release.fileSignature ?? null, (hash) =>
        releaseTrustedComment({ slug, version: release.version, sha256: hash }),
      ),
    ];
    if (await UpdateManager.alreadyThere(final, expected, checks)) return final;
    const url = this.url(`/api/download/${encodeURIComponent(release.id)}`);
    await this.fetchVerified(url, final, expected, checks, {
      ...options,
      retry: this.retry,
      deadlines: this.deadlines,
    });
    return final;
  }
}

/** Runs `work`, emitting `error` on `emitter` (when listened to) for its failure before rethrowing it. */
export async function reported<T>(emitter: EventEmitter, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (emitter.listenerCount('error') > 0) emitter.emit('error', err as Error);
    throw err;
  }
}
