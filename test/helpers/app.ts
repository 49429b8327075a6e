import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { LightMyRequestResponse } from 'fastify';
import { type App, buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { type DatabaseHandle, openDatabase } from '../../src/db/index.js';
import { LocalStorage } from '../../src/storage/local.js';
import type { Storage } from '../../src/storage/storage.js';
import { createTestDatabase, type TestDatabase } from './db.js';

export const ADMIN = { username: 'admin', password: 'admin-secret-1' };

export interface TestApp {
  app: App;
  dir: string;
  database: DatabaseHandle;
  testDb: TestDatabase;
  /** Session cookie header of the bootstrap administrator. */
  cookie: string;
  inject: App['server']['inject'];
  /** Closes the app and the database, drops the database and removes the data folder. */
  close(): Promise<void>;
}

/**
 * A real app on a fresh database (the run's engine) and a fresh local store (or `options.storage`,
 * which the caller closes), logged in as the administrator.
 */
export async function buildTestApp(
  env: Record<string, string> = {},
  options: { storage?: Storage } = {},
): Promise<TestApp> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-test-'));
  const testDb = await createTestDatabase(dir);
  const config = loadConfig({
    DATA_DIR: dir,
    ADMIN_USERNAME: ADMIN.username,
    ADMIN_PASSWORD: ADMIN.password,
    HEARTBEAT_FLUSH_MS: '50',
    CACHE_CHECK_MS: '50',
    LOGIN_RATE_LIMIT: '1000',
    ...env,
  });
  const database = await openDatabase(testDb.config);
  const storage = options.storage ?? new LocalStorage(path.join(dir, 'uploads'));
  const app = await buildApp({ config: { ...config, database: testDb.config }, database, storage, logger: false });
  await app.server.ready();
  const cookie = await login(app, ADMIN.username, ADMIN.password);
  return {
    app,
    dir,
    database,
    testDb,
    cookie,
    inject: app.server.inject.bind(app.server),
    async close() {
      await app.close();
      await database.close();
      await testDb.drop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function sessionCookieOf(res: LightMyRequestResponse): string {
  const cookie = res.cookies.find((c) => c.name === 'sid');
  if (!cookie) throw new Error(`no session cookie in answer ${res.statusCode}: ${res.body}`);
  return `sid=${cookie.value}`;
}

export async function login(app: App, username: string, password: string): Promise<string> {
  const res = await app.server.inject({ method: 'POST', url: '/api/admin/login', payload: { username, password } });
  return sessionCookieOf(res);
}

/** A multipart body with one part named `field` (default `file`). */
export function multipartBody(name: string, content: Buffer | string, field = 'file') {
  const boundary = '----lds-test-boundary';
  const payload = Buffer.concat([
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="${name}"\r\n` +
        'Content-Type: application/octet-stream\r\n\r\n',
    ),
    Buffer.from(content),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  return { payload, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
}

/** Uploads `content` as `name` through the API and answers the upload's JSON. */
export async function upload(t: TestApp, name: string, content: Buffer | string) {
  const { payload, headers } = multipartBody(name, content);
  const res = await t.inject({
    method: 'POST',
    url: '/api/upload',
    headers: { ...headers, cookie: t.cookie },
    payload,
  });
  if (res.statusCode !== 201) throw new Error(`upload failed ${res.statusCode}: ${res.body}`);
  return res.json<{ filePath: string; originalName: string; size: number; sha256: string }>();
}

/** An authenticated JSON request as the administrator. */
export function admin(t: TestApp, method: 'POST' | 'PUT' | 'DELETE' | 'GET', url: string, payload?: object) {
  return t.inject({ method, url, headers: { cookie: t.cookie }, ...(payload !== undefined ? { payload } : {}) });
}

export async function createPackage(t: TestApp, body: Record<string, unknown>) {
  const res = await admin(t, 'POST', '/api/software', body);
  if (res.statusCode !== 201) throw new Error(`create package failed ${res.statusCode}: ${res.body}`);
  return res.json<{ id: string; slug: string }>();
}

export async function createVersion(t: TestApp, packageId: string, body: Record<string, unknown>) {
  const res = await admin(t, 'POST', `/api/software/${packageId}/versions`, body);
  if (res.statusCode !== 201) throw new Error(`create version failed ${res.statusCode}: ${res.body}`);
  return res.json<{ id: string; versionCode: number; isLatest: boolean; downloadCount: number }>();
}

/**
 * Another app instance on `t`'s database and store (as a second process would be), with its own
 * connection; `close()` closes both.
 */
export async function buildSecondApp(t: TestApp, env: Record<string, string> = {}): Promise<App> {
  const database = await openDatabase(t.testDb.config);
  const config = loadConfig({ DATA_DIR: t.dir, CACHE_CHECK_MS: '50', HEARTBEAT_FLUSH_MS: '50', ...env });
  const app = await buildApp({
    config: { ...config, database: t.testDb.config },
    database,
    storage: new LocalStorage(path.join(t.dir, 'uploads')),
    logger: false,
  });
  await app.server.ready();
  return {
    ...app,
    async close() {
      await app.close();
      await database.close();
    },
  };
}

/** A software version's download counters: all downloads, and those that were launcher self-updates. */
export async function versionCounters(t: TestApp, versionId: string) {
  const row = await t.database.db
    .selectFrom('softwareVersions')
    .select(['downloadCount', 'launcherDownloadCount'])
    .where('id', '=', versionId)
    .executeTakeFirstOrThrow();
  return { total: row.downloadCount, launcher: row.launcherDownloadCount };
}
