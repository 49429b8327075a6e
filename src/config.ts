import fs from 'node:fs';
import path from 'node:path';
import { MinisignFormatError, type MinisignPublicKey, parsePublicKeys } from 'patchwell-client/minisign';
import { MAX_DELTA_FILE_BYTES } from './modules/deltas/zstd.js';

/** Every setting the service reads from its environment; `loadConfig` is the only reader of `process.env`. */
export interface Config {
  readonly port: number;
  readonly host: string;
  readonly dataDir: string;
  readonly database: DatabaseConfig;
  readonly storage: StorageConfig;
  readonly appName: string;
  readonly publicBaseUrl: string | null;
  readonly trustProxy: boolean;
  readonly adminUsername: string;
  readonly adminPassword: string | null;
  readonly maxUploadBytes: number;
  /** A resumable upload not finished this many hours after its creation is deleted, bytes and all. */
  readonly uploadExpiryHours: number;
  readonly corsOrigin: string;
  readonly logLevel: string;
  readonly heartbeatFlushMs: number;
  readonly cacheCheckMs: number;
  readonly loginRateLimit: number;
  /** A PKCS#8 PEM Ed25519 key to sign answers with, instead of keys kept in the database. */
  readonly signingKeyFile: string | null;
  readonly signingOverlapDays: number;
  /**
   * The publishers' minisign public keys (`PUBLISHER_KEYS`): when set, a version or release with a
   * stored file needs a `fileSignature` by one of them over that file and its trusted comment.
   */
  readonly publisherKeys: readonly MinisignPublicKey[] | null;
  /** Distinct devices one client address may beat for per hour (0: no bound). */
  readonly devicesPerAddressHour: number;
  readonly timeouts: Timeouts;
  /** Devices not seen for this many days are deleted; their stored IPs are blanked after `ipRetentionDays`. */
  readonly deviceRetentionDays: number;
  readonly ipRetentionDays: number;
  readonly downloadOffload: DownloadOffload | null;
  /** `GET /metrics` and the instruments behind it; off measures the service without them. */
  readonly metrics: boolean;
  /** Bearer token `GET /metrics` requires, when set. */
  readonly metricsToken: string | null;
  /** How long a stopping instance answers `/readyz` with 503 (still serving) before it closes. */
  readonly shutdownDrainMs: number;
  /** Where the per-client bounds are counted instead of the database, when set. */
  readonly redis: { readonly url: string; readonly prefix: string } | null;
  /** Webhook delivery: polling, per-attempt timeout, attempts before giving up, first retry wait. */
  readonly webhooks: {
    readonly pollMs: number;
    readonly timeoutMs: number;
    readonly maxAttempts: number;
    readonly backoffMs: number;
  };
  /** Delta updates: made in the background when a version is published, offered by check-update. */
  readonly deltas: {
    readonly enabled: boolean;
    /** Deltas to a new version from this many of the newest earlier versions. */
    readonly sources: number;
    /** A delta is kept only when smaller than this share of the target file. */
    readonly maxRatio: number;
    /** Pairs with a larger file get no delta: bounds a job's memory (about 3 × this). */
    readonly maxFileBytes: number;
  };
}

/**
 * Downloads from the local store handed to the reverse proxy: the service decides, counts and sets
 * the headers; the proxy sends the bytes of the file named by `prefix` + the store key.
 */
export interface DownloadOffload {
  /** `x-accel-redirect` (nginx): an internal URI; `x-sendfile` (Apache, Caddy): an absolute file path. */
  readonly header: 'x-accel-redirect' | 'x-sendfile';
  /** Ends with `/`. */
  readonly prefix: string;
}

/** How long a connection may take at each stage before the service drops it (milliseconds). */
export interface Timeouts {
  /** The request line and headers (slowloris). */
  readonly headers: number;
  /** A JSON or text body, once the headers are in. */
  readonly body: number;
  /** Nothing received or sent on a connection: stalled transfers and idle keep-alive connections. */
  readonly idle: number;
  /** A whole request including its body: the longest an upload may take. */
  readonly request: number;
}

export type DatabaseConfig =
  { readonly kind: 'sqlite'; readonly file: string } | { readonly kind: 'postgres'; readonly url: string };

export type StorageConfig =
  | { readonly kind: 'local'; readonly root: string }
  | {
      readonly kind: 's3';
      readonly bucket: string;
      readonly prefix: string;
      readonly endpoint: string | null;
      /** Where clients reach the store, for presigned download URLs; the endpoint when unset. */
      readonly publicEndpoint: string | null;
      readonly region: string;
      readonly forcePathStyle: boolean;
      readonly presignDownloads: boolean;
      readonly presignSeconds: number;
    };

export class ConfigError extends Error {
  override name = 'ConfigError';
}

type Env = Readonly<Record<string, string | undefined>>;

function integer(env: Env, key: string, fallback: number, min: number, max: number): number {
  const raw = env[key];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${key} must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${key} must be between ${min} and ${max}, got ${value}`);
  return value;
}

function flag(env: Env, key: string): boolean {
  const raw = (env[key] ?? '').trim().toLowerCase();
  if (raw === '' || raw === '0' || raw === 'false' || raw === 'off' || raw === 'no') return false;
  if (raw === '1' || raw === 'true' || raw === 'on' || raw === 'yes') return true;
  throw new ConfigError(`${key} must be true or false, got "${env[key]}"`);
}

/** A decimal number in `[min, max]`. */
function decimal(env: Env, key: string, fallback: number, min: number, max: number): number {
  const raw = env[key];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+(\.\d+)?$|^\.\d+$/.test(raw)) throw new ConfigError(`${key} must be a decimal number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${key} must be between ${min} and ${max}, got ${value}`);
  return value;
}

function parseDatabase(env: Env, dataDir: string): DatabaseConfig {
  const url = env.DATABASE_URL;
  if (url === undefined || url === '') return { kind: 'sqlite', file: path.join(dataDir, 'app.db') };
  if (/^postgres(ql)?:\/\//.test(url)) return { kind: 'postgres', url };
  if (url.startsWith('sqlite:')) {
    const file = url.replace(/^sqlite:(\/\/)?/, '');
    if (file === '') throw new ConfigError('DATABASE_URL sqlite: needs a file path, e.g. sqlite:./data/app.db');
    return { kind: 'sqlite', file: path.resolve(file) };
  }
  throw new ConfigError(
    `DATABASE_URL must be postgres://… (PostgreSQL) or sqlite:<file>, or be unset for ${path.join(dataDir, 'app.db')}`,
  );
}

function parseStorage(env: Env, dataDir: string): StorageConfig {
  const raw = env.STORAGE;
  if (raw === undefined || raw === '') return { kind: 'local', root: path.join(dataDir, 'uploads') };
  if (raw.startsWith('s3://')) {
    const rest = raw.slice('s3://'.length);
    const [bucket = '', ...prefixParts] = rest.split('/');
    if (bucket === '') throw new ConfigError('STORAGE s3://bucket/prefix needs a bucket name');
    const prefix = prefixParts.filter((p) => p !== '').join('/');
    return {
      kind: 's3',
      bucket,
      prefix,
      endpoint: env.S3_ENDPOINT || env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL || null,
      publicEndpoint: env.S3_PUBLIC_ENDPOINT || null,
      region: env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1',
      forcePathStyle: env.S3_FORCE_PATH_STYLE === undefined ? true : flag(env, 'S3_FORCE_PATH_STYLE'),
      presignDownloads: flag(env, 'S3_PRESIGN_DOWNLOADS'),
      presignSeconds: integer(env, 'S3_PRESIGN_SECONDS', 300, 1, 7 * 24 * 3600),
    };
  }
  if (raw.startsWith('file:') || raw.startsWith('/') || raw.startsWith('.')) {
    return { kind: 'local', root: path.resolve(raw.replace(/^file:(\/\/)?/, '')) };
  }
  throw new ConfigError('STORAGE must be s3://bucket/prefix or a local folder path, or be unset');
}

function parseMetricsToken(raw: string | undefined): string | null {
  if (raw === undefined || raw === '') return null;
  if (!/^[\x21-\x7e]{16,256}$/.test(raw)) {
    throw new ConfigError('METRICS_TOKEN must be 16 to 256 printable characters without spaces');
  }
  return raw;
}

function parseBaseUrl(raw: string | undefined): string | null {
  if (raw === undefined || raw === '') return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`PUBLIC_BASE_URL must be an absolute http(s) URL, got "${raw}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`PUBLIC_BASE_URL must be an absolute http(s) URL, got "${raw}"`);
  }
  return url.toString().replace(/\/+$/, '');
}

const LOOPBACK_HOSTS: ReadonlySet<string> = new Set(['localhost', '::1', '[::1]']);

/** What an operator should hear about at start: settings that work but are easy to get wrong. */
export function startupWarnings(config: Config): string[] {
  const warnings: string[] = [];
  const loopback = LOOPBACK_HOSTS.has(config.host) || config.host.startsWith('127.');
  if (config.publicBaseUrl === null && !loopback) {
    warnings.push(
      `PUBLIC_BASE_URL is not set and the service listens on ${config.host}: check-update download URLs ` +
        "take their origin from each request's Host header; set PUBLIC_BASE_URL=https://your.domain in production",
    );
  }
  return warnings;
}

/** What the operator is told at start about settings in force: the publisher keys loaded (key ids). */
export function startupNotes(config: Config): string[] {
  const keys = config.publisherKeys;
  if (keys === null) return [];
  return [
    `PUBLISHER_KEYS: ${keys.length} publisher key(s) loaded (${keys.map((k) => k.keyId).join(', ')}): ` +
      'every stored file of a version or release must be signed by one of them',
  ];
}

function parseOffload(env: Env, storage: StorageConfig): DownloadOffload | null {
  const raw = (env.DOWNLOAD_OFFLOAD ?? '').trim().toLowerCase();
  if (raw === '' || raw === 'off') return null;
  if (raw !== 'x-accel-redirect' && raw !== 'x-sendfile') {
    throw new ConfigError(
      `DOWNLOAD_OFFLOAD must be off, x-accel-redirect or x-sendfile, got "${env.DOWNLOAD_OFFLOAD}"`,
    );
  }
  if (storage.kind !== 'local') {
    throw new ConfigError('DOWNLOAD_OFFLOAD works with a local store only (S3 downloads use S3_PRESIGN_DOWNLOADS)');
  }
  const given = env.DOWNLOAD_OFFLOAD_PREFIX || (raw === 'x-accel-redirect' ? '/internal-uploads/' : storage.root);
  const prefix = given.endsWith('/') ? given : `${given}/`;
  // eslint-disable-next-line no-control-regex
  if (!prefix.startsWith('/') || /[\u0000-\u0020\u007f?#%]/.test(prefix)) {
    throw new ConfigError(
      `DOWNLOAD_OFFLOAD_PREFIX must be an absolute ${raw === 'x-accel-redirect' ? 'URI path' : 'file path'} without spaces, ?, # or %, got "${given}"`,
    );
  }
  return { header: raw, prefix };
}

function parsePublisherKeys(raw: string | undefined): readonly MinisignPublicKey[] | null {
  if (raw === undefined || raw === '') return null;
  let text: string;
  try {
    text = fs.readFileSync(path.resolve(raw), 'utf8');
  } catch (error) {
    throw new ConfigError(`PUBLISHER_KEYS: cannot read ${raw}: ${(error as Error).message}`);
  }
  try {
    const keys = parsePublicKeys(text);
    if (keys.length === 0) throw new MinisignFormatError('no key in the file');
    return Object.freeze(keys);
  } catch (error) {
    if (!(error instanceof MinisignFormatError)) throw error;
    throw new ConfigError(`PUBLISHER_KEYS: ${raw} must hold minisign public keys: ${error.message}`);
  }
}

function parseRedis(env: Env): Config['redis'] {
  const url = (env.REDIS_URL ?? '').trim();
  if (url === '') return null;
  if (!/^rediss?:\/\//.test(url)) throw new ConfigError(`REDIS_URL must be a redis:// or rediss:// URL, got "${url}"`);
  const prefix = env.REDIS_PREFIX ?? 'lds:';
  if (!/^[\w.:-]{0,64}$/.test(prefix)) throw new ConfigError(`REDIS_PREFIX must be up to 64 of A-Z a-z 0-9 _ . : -`);
  return Object.freeze({ url, prefix });
}

export function loadConfig(env: Env = process.env): Config {
  const dataDir = path.resolve(env.DATA_DIR || './data');
  const appName = env.APP_NAME || 'app';
  if (!/^[a-z0-9][a-z0-9._-]{0,40}$/.test(appName)) {
    throw new ConfigError(`APP_NAME must be a short lowercase name (a-z 0-9 . _ -), got "${appName}"`);
  }
  const storage = parseStorage(env, dataDir);
  return Object.freeze({
    port: integer(env, 'PORT', 3000, 0, 65535),
    host: env.HOST || '0.0.0.0',
    dataDir,
    database: parseDatabase(env, dataDir),
    storage,
    appName,
    publicBaseUrl: parseBaseUrl(env.PUBLIC_BASE_URL),
    trustProxy: flag(env, 'TRUST_PROXY'),
    adminUsername: env.ADMIN_USERNAME || 'admin',
    adminPassword: env.ADMIN_PASSWORD || null,
    maxUploadBytes: integer(env, 'MAX_UPLOAD_BYTES', 4 * 1024 ** 3, 1, Number.MAX_SAFE_INTEGER),
    uploadExpiryHours: integer(env, 'UPLOAD_EXPIRY_HOURS', 24, 1, 24 * 365),
    corsOrigin: env.CORS_ORIGIN || '*',
    logLevel: env.LOG_LEVEL || 'info',
    heartbeatFlushMs: integer(env, 'HEARTBEAT_FLUSH_MS', 1000, 10, 60_000),
    cacheCheckMs: integer(env, 'CACHE_CHECK_MS', 1000, 10, 60_000),
    loginRateLimit: integer(env, 'LOGIN_RATE_LIMIT', 20, 1, 1_000_000),
    devicesPerAddressHour: integer(env, 'DEVICES_PER_IP_HOUR', 2000, 0, 100_000_000),
    deviceRetentionDays: integer(env, 'DEVICE_RETENTION_DAYS', 90, 1, 36_500),
    ipRetentionDays: integer(env, 'IP_RETENTION_DAYS', 30, 1, 36_500),
    timeouts: Object.freeze({
      headers: integer(env, 'HEADERS_TIMEOUT_MS', 10_000, 100, 600_000),
      body: integer(env, 'BODY_TIMEOUT_MS', 10_000, 100, 600_000),
      idle: integer(env, 'IDLE_TIMEOUT_MS', 60_000, 100, 3_600_000),
      request: integer(env, 'REQUEST_TIMEOUT_MS', 3_600_000, 1000, 86_400_000),
    }),
    signingKeyFile: env.SIGNING_KEY_FILE ? path.resolve(env.SIGNING_KEY_FILE) : null,
    signingOverlapDays: integer(env, 'SIGNING_OVERLAP_DAYS', 30, 0, 3650),
    publisherKeys: parsePublisherKeys(env.PUBLISHER_KEYS),
    downloadOffload: parseOffload(env, storage),
    metrics: env.METRICS === undefined ? true : flag(env, 'METRICS'),
    metricsToken: parseMetricsToken(env.METRICS_TOKEN),
    shutdownDrainMs: integer(env, 'SHUTDOWN_DRAIN_MS', 5000, 0, 120_000),
    redis: parseRedis(env),
    webhooks: Object.freeze({
      pollMs: integer(env, 'WEBHOOK_POLL_MS', 1000, 10, 60_000),
      timeoutMs: integer(env, 'WEBHOOK_TIMEOUT_MS', 10_000, 10, 120_000),
      maxAttempts: integer(env, 'WEBHOOK_MAX_ATTEMPTS', 8, 1, 100),
      backoffMs: integer(env, 'WEBHOOK_BACKOFF_MS', 30_000, 1, 3_600_000),
    }),
    deltas: Object.freeze({
      enabled: env.DELTAS === undefined ? true : flag(env, 'DELTAS'),
      sources: integer(env, 'DELTA_SOURCES', 3, 1, 20),
      maxRatio: decimal(env, 'DELTA_MAX_RATIO', 0.5, 0.01, 1),
      maxFileBytes: integer(env, 'DELTA_MAX_FILE_BYTES', MAX_DELTA_FILE_BYTES, 1, MAX_DELTA_FILE_BYTES),
    }),
  });
}
