import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, startupWarnings } from '../src/config.js';

describe('configuration', () => {
  it('defaults to SQLite and a local folder under ./data, port 3000 on 0.0.0.0', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 3000,
      host: '0.0.0.0',
      dataDir: path.resolve('data'),
      database: { kind: 'sqlite', file: path.resolve('data/app.db') },
      storage: { kind: 'local', root: path.resolve('data/uploads') },
      appName: 'app',
      publicBaseUrl: null,
      trustProxy: false,
      adminUsername: 'admin',
      adminPassword: null,
      maxUploadBytes: 4 * 1024 ** 3,
      signingKeyFile: null,
      signingOverlapDays: 30,
    });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('reads every setting of the contract', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '127.0.0.1',
      DATA_DIR: '/srv/lds',
      DATABASE_URL: 'postgres://u:p@db:5432/lds',
      STORAGE: 's3://bucket/some/prefix',
      S3_ENDPOINT: 'http://minio:9000',
      AWS_REGION: 'eu-west-1',
      APP_NAME: 'azeroth',
      PUBLIC_BASE_URL: 'https://dl.example.test/',
      TRUST_PROXY: 'true',
      ADMIN_USERNAME: 'root',
      ADMIN_PASSWORD: 'secret',
      MAX_UPLOAD_BYTES: '1024',
      SIGNING_KEY_FILE: '/srv/keys/signing.pem',
      SIGNING_OVERLAP_DAYS: '7',
    });
    expect(config).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      database: { kind: 'postgres', url: 'postgres://u:p@db:5432/lds' },
      storage: {
        kind: 's3',
        bucket: 'bucket',
        prefix: 'some/prefix',
        endpoint: 'http://minio:9000',
        region: 'eu-west-1',
      },
      appName: 'azeroth',
      publicBaseUrl: 'https://dl.example.test',
      trustProxy: true,
      adminUsername: 'root',
      adminPassword: 'secret',
      maxUploadBytes: 1024,
      signingKeyFile: '/srv/keys/signing.pem',
      signingOverlapDays: 7,
    });
    expect(loadConfig({ DATA_DIR: '/srv/lds' }).database).toEqual({ kind: 'sqlite', file: '/srv/lds/app.db' });
    expect(loadConfig({ DATABASE_URL: 'sqlite:/tmp/x.db' }).database).toEqual({ kind: 'sqlite', file: '/tmp/x.db' });
  });

  it('hands downloads to the proxy only when DOWNLOAD_OFFLOAD says so, with a prefix per header', () => {
    expect(loadConfig({}).downloadOffload).toBeNull();
    expect(loadConfig({ DOWNLOAD_OFFLOAD: 'off' }).downloadOffload).toBeNull();
    expect(loadConfig({ DOWNLOAD_OFFLOAD: 'x-accel-redirect' }).downloadOffload).toEqual({
      header: 'x-accel-redirect',
      prefix: '/internal-uploads/',
    });
    expect(
      loadConfig({ DOWNLOAD_OFFLOAD: 'X-Accel-Redirect', DOWNLOAD_OFFLOAD_PREFIX: '/files' }).downloadOffload,
    ).toEqual({ header: 'x-accel-redirect', prefix: '/files/' });
    expect(loadConfig({ DOWNLOAD_OFFLOAD: 'x-sendfile', DATA_DIR: '/srv/lds' }).downloadOffload).toEqual({
      header: 'x-sendfile',
      prefix: '/srv/lds/uploads/',
    });
    expect(
      loadConfig({ DOWNLOAD_OFFLOAD: 'x-sendfile', DOWNLOAD_OFFLOAD_PREFIX: '/var/www/uploads/' }).downloadOffload,
    ).toEqual({ header: 'x-sendfile', prefix: '/var/www/uploads/' });
  });

  it.each([
    [{ DATABASE_URL: 'mysql://x' }, /DATABASE_URL/],
    [{ STORAGE: 'ftp://x' }, /STORAGE/],
    [{ STORAGE: 's3://' }, /bucket/],
    [{ PORT: 'abc' }, /PORT/],
    [{ PORT: '70000' }, /PORT/],
    [{ TRUST_PROXY: 'maybe' }, /TRUST_PROXY/],
    [{ PUBLIC_BASE_URL: 'dl.example.test' }, /PUBLIC_BASE_URL/],
    [{ PUBLIC_BASE_URL: 'ftp://dl.example.test' }, /PUBLIC_BASE_URL/],
    [{ APP_NAME: 'Bad Name' }, /APP_NAME/],
    [{ MAX_UPLOAD_BYTES: '-1' }, /MAX_UPLOAD_BYTES/],
    [{ SIGNING_OVERLAP_DAYS: 'a month' }, /SIGNING_OVERLAP_DAYS/],
    [{ DOWNLOAD_OFFLOAD: 'sendfile' }, /DOWNLOAD_OFFLOAD must be off, x-accel-redirect or x-sendfile/],
    [
      { DOWNLOAD_OFFLOAD: 'x-accel-redirect', STORAGE: 's3://bucket' },
      /DOWNLOAD_OFFLOAD works with a local store only/,
    ],
    [{ DOWNLOAD_OFFLOAD: 'x-accel-redirect', DOWNLOAD_OFFLOAD_PREFIX: 'internal/' }, /DOWNLOAD_OFFLOAD_PREFIX/],
    [{ DOWNLOAD_OFFLOAD: 'x-sendfile', DOWNLOAD_OFFLOAD_PREFIX: '/srv/up loads' }, /DOWNLOAD_OFFLOAD_PREFIX/],
    [{ DOWNLOAD_OFFLOAD: 'x-accel-redirect', DOWNLOAD_OFFLOAD_PREFIX: '/files?x' }, /DOWNLOAD_OFFLOAD_PREFIX/],
  ])('refuses %j with a clear start-up error', (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });

  it('bounds devices per client address and sets deliberate timeouts, each configurable', () => {
    expect(loadConfig({})).toMatchObject({
      devicesPerAddressHour: 2000,
      timeouts: { headers: 10_000, body: 10_000, idle: 60_000, request: 3_600_000 },
    });
    const set = loadConfig({
      DEVICES_PER_IP_HOUR: '0',
      HEADERS_TIMEOUT_MS: '5000',
      BODY_TIMEOUT_MS: '2000',
      IDLE_TIMEOUT_MS: '30000',
      REQUEST_TIMEOUT_MS: '600000',
    });
    expect(set).toMatchObject({
      devicesPerAddressHour: 0,
      timeouts: { headers: 5000, body: 2000, idle: 30_000, request: 600_000 },
    });
    expect(() => loadConfig({ HEADERS_TIMEOUT_MS: '0' })).toThrow(/HEADERS_TIMEOUT_MS must be between/);
    expect(() => loadConfig({ DEVICES_PER_IP_HOUR: 'many' })).toThrow(/DEVICES_PER_IP_HOUR must be a whole number/);
  });

  it('warns at start when download URLs would follow the Host header of requests from beyond loopback', () => {
    expect(startupWarnings(loadConfig({}))).toEqual([expect.stringMatching(/^PUBLIC_BASE_URL is not set/)]);
    expect(startupWarnings(loadConfig({ HOST: '::' }))).toHaveLength(1);
    for (const HOST of ['127.0.0.1', 'localhost', '::1']) expect(startupWarnings(loadConfig({ HOST }))).toEqual([]);
    expect(startupWarnings(loadConfig({ PUBLIC_BASE_URL: 'https://dl.example.com' }))).toEqual([]);
  });
});

describe('operations settings', () => {
  it('metrics are on without a token, and readiness drains for 5 s, by default', () => {
    expect(loadConfig({})).toMatchObject({ metrics: true, metricsToken: null, shutdownDrainMs: 5000 });
    expect(
      loadConfig({ METRICS: 'off', METRICS_TOKEN: 'a-long-scrape-token-1', SHUTDOWN_DRAIN_MS: '250' }),
    ).toMatchObject({ metrics: false, metricsToken: 'a-long-scrape-token-1', shutdownDrainMs: 250 });
    expect(loadConfig({ METRICS: 'on' }).metrics).toBe(true);
  });

  it('counts the per-client bounds in the database unless REDIS_URL is set (prefix lds: by default)', () => {
    expect(loadConfig({}).redis).toBeNull();
    expect(loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379/2' }).redis).toEqual({
      url: 'redis://127.0.0.1:6379/2',
      prefix: 'lds:',
    });
    expect(loadConfig({ REDIS_URL: 'rediss://cache.internal:6380', REDIS_PREFIX: 'eu-1:' }).redis).toEqual({
      url: 'rediss://cache.internal:6380',
      prefix: 'eu-1:',
    });
  });

  it.each([
    [{ METRICS: 'sometimes' }, /METRICS must be true or false/],
    [{ METRICS_TOKEN: 'short' }, /METRICS_TOKEN must be 16 to 256 printable characters/],
    [{ METRICS_TOKEN: 'has a space in the middle' }, /METRICS_TOKEN/],
    [{ SHUTDOWN_DRAIN_MS: '-5' }, /SHUTDOWN_DRAIN_MS must be a whole number/],
    [{ SHUTDOWN_DRAIN_MS: '999999' }, /SHUTDOWN_DRAIN_MS must be between 0 and 120000/],
    [{ REDIS_URL: 'http://127.0.0.1:6379' }, /REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/],
    [{ REDIS_URL: 'redis://127.0.0.1', REDIS_PREFIX: 'has space' }, /REDIS_PREFIX must be/],
  ])('refuses %j', (env, message) => {
    expect(() => loadConfig(env)).toThrow(message);
  });
});

describe('delta update settings', () => {
  it('makes deltas from the 3 newest earlier versions, kept under half the file, of files up to 2 GiB, by default', () => {
    expect(loadConfig({}).deltas).toEqual({ enabled: true, sources: 3, maxRatio: 0.5, maxFileBytes: 2 * 1024 ** 3 });
    expect(
      loadConfig({ DELTAS: 'off', DELTA_SOURCES: '5', DELTA_MAX_RATIO: '0.25', DELTA_MAX_FILE_BYTES: '700000000' })
        .deltas,
    ).toEqual({ enabled: false, sources: 5, maxRatio: 0.25, maxFileBytes: 700_000_000 });
  });

  it.each([
    [{ DELTAS: 'maybe' }, /DELTAS must be true or false/],
    [{ DELTA_SOURCES: '0' }, /DELTA_SOURCES must be between 1 and 20/],
    [{ DELTA_MAX_RATIO: 'half' }, /DELTA_MAX_RATIO must be a decimal number/],
    [{ DELTA_MAX_RATIO: '1.5' }, /DELTA_MAX_RATIO must be between 0.01 and 1/],
    // zstd's window ends at 2 GiB: no larger file can be a delta's.
    [{ DELTA_MAX_FILE_BYTES: '2147483649' }, /DELTA_MAX_FILE_BYTES must be between 1 and 2147483648/],
    [{ DELTA_MAX_FILE_BYTES: '0' }, /DELTA_MAX_FILE_BYTES must be between 1 and 2147483648/],
  ])('refuses %j', (env, message) => {
    expect(() => loadConfig(env)).toThrow(message);
  });
});
