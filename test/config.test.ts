import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';

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
});
