import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type App, buildApp } from '../src/app.js';
import { type DatabaseConfig, loadConfig } from '../src/config.js';
import { type DatabaseHandle, openDatabase } from '../src/db/index.js';
import { LocalStorage } from '../src/storage/local.js';
import { describeDatabase, parseDatabaseArg } from '../scripts/db-copy.js';
import { ADMIN, login, multipartBody } from './helpers/app.js';
import { createTestDatabase, ENGINE, type TestDatabase } from './helpers/db.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const run = promisify(execFile);

/** Runs the real command (`npm run db:copy -- …` runs this same file) and answers its exit code and output. */
async function dbCopy(...args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', 'scripts/db-copy.ts', ...args], {
      cwd: ROOT,
    });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, output: (e.stdout ?? '') + (e.stderr ?? '') };
  }
}

interface Running {
  app: App;
  database: DatabaseHandle;
  inject: App['server']['inject'];
  close(): Promise<void>;
}

async function startApp(dir: string, database: DatabaseConfig): Promise<Running> {
  const config = loadConfig({
    DATA_DIR: dir,
    ADMIN_USERNAME: ADMIN.username,
    ADMIN_PASSWORD: ADMIN.password,
    HEARTBEAT_FLUSH_MS: '50',
    CACHE_CHECK_MS: '50',
    LOGIN_RATE_LIMIT: '1000',
  });
  const handle = await openDatabase(database);
  const app = await buildApp({
    config: { ...config, database },
    database: handle,
    storage: new LocalStorage(path.join(dir, 'uploads')),
    logger: false,
  });
  await app.server.ready();
  return {
    app,
    database: handle,
    inject: app.server.inject.bind(app.server),
    async close() {
      await app.close();
      await handle.close();
    },
  };
}

/** Every row of every table (but Kysely's bookkeeping), in primary-key order. */
async function dump(handle: DatabaseHandle): Promise<Record<string, unknown[]>> {
  const db = handle.db.withoutPlugins();
  const out: Record<string, unknown[]> = {};
  for (const table of await db.introspection.getTables()) {
    if (table.isView || (table.schema !== undefined && table.schema !== 'public')) continue;
    const columns = table.columns.map((c) => c.name).sort();
    const { rows } = await sql<Record<string, unknown>>`
      select ${sql.join(columns.map((c) => sql.ref(c)))} from ${sql.table(table.name)}`.execute(db);
    out[table.name] = rows
      .map((r) => JSON.stringify(r, Object.keys(r).sort()))
      .sort()
      .map((r) => JSON.parse(r) as unknown);
  }
  return out;
}

describe('db:copy argument forms', () => {
  it('takes postgres URLs, sqlite: URLs and plain files; masks passwords in messages', () => {
    expect(parseDatabaseArg('postgres://u:secret@db:5432/x')).toEqual({
      kind: 'postgres',
      url: 'postgres://u:secret@db:5432/x',
    });
    expect(parseDatabaseArg('sqlite:./data/app.db')).toEqual({ kind: 'sqlite', file: path.resolve('data/app.db') });
    expect(parseDatabaseArg('/srv/app.db')).toEqual({ kind: 'sqlite', file: '/srv/app.db' });
    expect(describeDatabase({ kind: 'postgres', url: 'postgres://u:secret@db:5432/x' })).toBe(
      'PostgreSQL postgres://u:***@db:5432/x',
    );
  });

  it('refuses bad usage and a missing source', async () => {
    expect((await dbCopy('--from', 'x.db')).code).toBe(2);
    const missing = await dbCopy('--from', '/nonexistent/app.db', '--to', 'sqlite:/tmp/never.db');
    expect(missing.code).toBe(1);
    expect(missing.output).toMatch(/no SQLite database/);
  });
});

describe(`db:copy from SQLite to a fresh ${ENGINE} database`, () => {
  let dir: string;
  let sourceFile: string;
  let target: TestDatabase;
  let targetArg: string;
  let cookie: string;
  let token: string;
  let packageId: string;
  let addonSlug: string;
  let filePath: string;
  const seen: Record<string, unknown> = {};
  const reads = (packageSlug: string) => [
    '/api/software',
    `/api/software/${packageSlug}`,
    `/api/software/check-update?slug=${packageSlug}&versionCode=1&lang=en`,
    `/api/software/changelog?slug=${packageSlug}`,
    '/api/addons?published=false',
    `/api/addons/${addonSlug}?lang=en`,
    '/api/releases',
  ];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-copy-'));
    sourceFile = path.join(dir, 'source.db');
    const source = await startApp(dir, { kind: 'sqlite', file: sourceFile });
    cookie = await login(source.app, ADMIN.username, ADMIN.password);
    const call = async (method: 'POST' | 'GET', url: string, payload?: object, status = 201) => {
      const res = await source.inject({ method, url, headers: { cookie }, ...(payload ? { payload } : {}) });
      if (res.statusCode !== status) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
      return res.json<Record<string, unknown>>();
    };

    const { payload, headers } = multipartBody('启动器 setup.exe', 'installer '.repeat(500));
    const uploaded = await source.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { ...headers, cookie },
      payload,
    });
    filePath = uploaded.json<{ filePath: string }>().filePath;
    token = String((await call('POST', '/api/admin/tokens', { name: 'ci' })).token);
    packageId = String(
      (await call('POST', '/api/software', { slug: 'app-launcher', name: '启动器', nameEn: 'Launcher' })).id,
    );
    await call('POST', `/api/software/${packageId}/versions`, { version: '1.0.0', versionCode: 100, filePath });
    const v2 = await call('POST', `/api/software/${packageId}/versions`, {
      version: '1.1.0',
      versionCode: 110,
      filePath,
      changelog: '修复了问题',
      changelogEn: 'Fixes',
      forceUpdate: true,
      minVersion: '1.0.0',
    });
    await source.inject({ url: `/api/software/download/${String(v2.id)}?source=launcher` });
    await source.inject({ url: `/api/software/download/${String(v2.id)}` });
    const addon = await call('POST', '/api/addons', { slug: 'quest-helper', name: '任务助手', summary: '帮助任务' });
    addonSlug = String(addon.slug);
    const release = await call('POST', '/api/releases', { addonId: addon.id, version: '2.0', filePath });
    await call('POST', `/api/addons/${String(addon.id)}/screenshots`, { imageUrl: filePath, sortOrder: 1 });
    await source.inject({ url: `/api/download/${String(release.id)}` });
    for (const deviceId of ['pc-1', 'pc-2', 'mac-1']) {
      const beat = await source.inject({
        method: 'POST',
        url: '/api/launcher/heartbeat',
        payload: { deviceId, os: deviceId.startsWith('mac') ? 'macos' : 'windows', appVersion: '1.1.0' },
      });
      expect(beat.statusCode).toBe(200);
    }
    await source.app.close(); // writes the buffered heartbeats

    await source.database.close();

    // What the source answers, read by a fresh app on it once everything was written.
    const again = await startApp(dir, { kind: 'sqlite', file: sourceFile });
    for (const url of [...reads('app-launcher'), '/api/admin/devices', '/api/admin/devices/stats']) {
      const res = await again.inject({ url, headers: { cookie } });
      expect(res.statusCode).toBe(200);
      seen[url] = res.json();
    }
    await again.close();

    target = await createTestDatabase(path.join(dir, 'target'));
    fs.mkdirSync(path.join(dir, 'target'), { recursive: true });
    targetArg = target.config.kind === 'postgres' ? target.config.url : `sqlite:${target.config.file}`;
  });

  afterAll(async () => {
    await target?.drop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('copies every table, verifies the counts, and refuses a non-empty target without --force', async () => {
    const first = await dbCopy('--from', sourceFile, '--to', targetArg, '--batch-size', '2');
    expect(first.output).toMatch(/counts verified/);
    expect(first.code).toBe(0);
    expect(first.output).toMatch(/software_versions: 2 rows/);
    expect(first.output).toMatch(/devices: 2\/3/); // progress in batches of 2

    const again = await dbCopy('--from', `sqlite:${sourceFile}`, '--to', targetArg);
    expect(again.code).toBe(1);
    expect(again.output).toMatch(/target is not empty.*--force/);

    const forced = await dbCopy('--from', sourceFile, '--to', targetArg, '--force');
    expect(forced.code).toBe(0);

    const source = await openDatabase({ kind: 'sqlite', file: sourceFile });
    const copied = await openDatabase(target.config);
    try {
      const [a, b] = [await dump(source), await dump(copied)];
      expect(Object.keys(b).sort()).toEqual(Object.keys(a).sort());
      for (const table of Object.keys(a)) {
        if (table.startsWith('kysely_migration')) continue;
        expect({ table, rows: b[table] }).toEqual({ table, rows: a[table] });
      }
      expect(a.software_versions).toHaveLength(2);
      expect(a.devices).toHaveLength(3);
    } finally {
      await source.close();
      await copied.close();
    }
  });

  it('an app on the copy answers the same data, sessions, tokens and files', async () => {
    const app = await startApp(dir, target.config);
    try {
      for (const [url, body] of Object.entries(seen)) {
        const res = await app.inject({ url, headers: { cookie } });
        expect({ url, status: res.statusCode }).toEqual({ url, status: 200 });
        // check-update is signed when rendered: its `signedAt` is the only part that may differ.
        expect({ url, body: res.json() }).toEqual({ url, body: withSignedAtOf(body, res.json()) });
      }
      expect(
        (await app.inject({ url: '/api/admin/me', headers: { authorization: `Bearer ${token}` } })).statusCode,
      ).toBe(200);
      await login(app.app, ADMIN.username, ADMIN.password);
      const file = await app.inject({ url: filePath });
      expect(file.statusCode).toBe(200);
      expect(file.body).toBe('installer '.repeat(500));
      // Writes work on the copy (the flag move, the cache version row).
      const v3 = await app.inject({
        method: 'POST',
        url: `/api/software/${packageId}/versions`,
        headers: { cookie },
        payload: { version: '1.2.0', versionCode: 120 },
      });
      expect(v3.statusCode).toBe(201);
      const check = await app.inject({ url: '/api/software/check-update?slug=app-launcher&versionCode=110' });
      expect(check.json()).toMatchObject({ hasUpdate: true, latest: { versionCode: 120 } });
    } finally {
      await app.close();
    }
  });
});

/** `expected`, with the `signedAt` of `actual` when both carry one. */
function withSignedAtOf(expected: unknown, actual: unknown): unknown {
  const signed = (v: unknown): v is { signedAt: unknown } => typeof v === 'object' && v !== null && 'signedAt' in v;
  return signed(expected) && signed(actual) ? { ...expected, signedAt: actual.signedAt } : expected;
}
