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
  ])('refuses %j with a clear start-up error', (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });
});
