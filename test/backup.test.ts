import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { type DatabaseConfig, loadConfig } from '../src/config.js';
import { type DatabaseHandle, openDatabase } from '../src/db/index.js';
import { type RawDb, readBatches, type Row, tablesInOrder } from '../src/db/tables.js';
import { LocalStorage } from '../src/storage/local.js';
import { admin, ADMIN, buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';
import { createTestDatabase, ENGINE, type TestDatabase } from './helpers/db.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const run = promisify(execFile);

/** The real command (`npm run backup|restore` runs the built form of this file) on an installation. */
async function cli(env: Record<string, string>, ...args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', 'src/backup/cli.ts', ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
    });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, output: (e.stdout ?? '') + (e.stderr ?? '') };
  }
}

const envOf = (dir: string, db: DatabaseConfig): Record<string, string> =>
  db.kind === 'postgres' ? { DATA_DIR: dir, DATABASE_URL: db.url } : { DATA_DIR: dir };

/** Every row of every data table, in primary-key order. */
async function dump(handle: DatabaseHandle): Promise<Record<string, Row[]>> {
  const raw = handle.db.withoutPlugins() as unknown as RawDb;
  const out: Record<string, Row[]> = {};
  for (const { table, columns } of await tablesInOrder(raw, handle.engine)) {
    out[table] = [];
    for await (const rows of readBatches(raw, handle.engine, table, columns, 500)) out[table].push(...rows);
  }
  return out;
}

/** `key → sha256` of every file in a local store. */
function storeFiles(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of fs.readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const key = path.relative(root, path.join(entry.parentPath, entry.name));
    if (key.startsWith('.tmp')) continue;
    out[key] = createHash('sha256')
      .update(fs.readFileSync(path.join(root, key)))
      .digest('hex');
  }
  return out;
}

interface Target {
  dir: string;
  db: TestDatabase;
  env: Record<string, string>;
}

const targets: Target[] = [];
async function emptyTarget(): Promise<Target> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-restore-'));
  const db = await createTestDatabase(dir);
  const target = { dir, db, env: envOf(dir, db.config) };
  targets.push(target);
  return target;
}

/** An app on a restored installation, for reads. */
async function appOn(target: Target) {
  const database = await openDatabase(target.db.config);
  const config = loadConfig({ ...target.env, ADMIN_PASSWORD: ADMIN.password });
  const app = await buildApp({
    config: { ...config, database: target.db.config },
    database,
    storage: new LocalStorage(path.join(target.dir, 'uploads')),
    logger: false,
  });
  await app.server.ready();
  return {
    inject: app.server.inject.bind(app.server),
    database,
    async close() {
      await app.close();
      await database.close();
    },
  };
}

const READS = [
  '/api/software',
  '/api/software/check-update?slug=app-launcher&versionCode=100&lang=en',
  '/api/software/latest?info=1',
  '/api/addons',
  '/api/addons?published=false',
  '/api/articles',
];

describe(`backup and restore (${ENGINE})`, () => {
  let t: TestApp;
  let env: Record<string, string>;
  let versionId = '';
  let releaseId = '';

  beforeAll(async () => {
    t = await buildTestApp();
    env = envOf(t.dir, t.testDb.config);
    const file = await upload(t, 'AppSetup-1.0.exe', 'installer '.repeat(2000));
    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器', nameEn: 'Launcher' });
    await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath });
    versionId = (await createVersion(t, pkg.id, { version: '1.1.0', versionCode: 110, filePath: file.filePath })).id;
    const addonRes = await admin(t, 'POST', '/api/addons', {
      slug: 'quest-helper',
      name: '任务助手',
      summary: '帮助任务',
    });
    const zip = await upload(t, 'quest-helper.zip', 'addon bytes '.repeat(300));
    const releaseRes = await admin(t, 'POST', '/api/releases', {
      addonId: addonRes.json<{ id: string }>().id,
      version: '2.0',
      filePath: zip.filePath,
    });
    expect(releaseRes.statusCode).toBe(201);
    releaseId = releaseRes.json<{ id: string }>().id;
    await admin(t, 'POST', '/api/articles', { slug: 'welcome', title: '欢迎', titleEn: 'Welcome', content: '正文' });
  });

  afterAll(async () => {
    await t?.close();
    for (const target of targets) {
      await target.db.drop();
      fs.rmSync(target.dir, { recursive: true, force: true });
    }
  });

  it('archives a consistent snapshot while writes and downloads run, and restores it', async () => {
    let running = true;
    let n = 0;
    const load = (async () => {
      while (running) {
        n += 1;
        await Promise.all([
          t.inject({ url: `/api/download/${releaseId}` }),
          t.inject({ url: `/api/software/download/${versionId}?source=launcher` }),
          t.inject({ method: 'POST', url: '/api/launcher/heartbeat', payload: { deviceId: `load-${n % 50}` } }),
          admin(t, 'POST', '/api/articles', { slug: `news-${n}`, title: `新闻 ${n}` }),
          n % 5 === 0 ? upload(t, `shot-${n}.png`, `image ${n}`) : Promise.resolve(),
        ]);
      }
    })();
    const archive = path.join(t.dir, '..', `${path.basename(t.dir)}-load.tar.gz`);
    let result;
    try {
      await new Promise((r) => setTimeout(r, 300));
      result = await cli(env, 'backup', '--to', archive);
    } finally {
      running = false;
      await load;
    }
    expect(result.output).toMatch(/backup: done/);
    expect(result.code).toBe(0);
    expect(n).toBeGreaterThan(3); // the service kept serving during the backup

    const target = await emptyTarget();
    const restored = await cli(target.env, 'restore', '--from', archive);
    fs.rmSync(archive);
    expect(restored.output).toMatch(/restore: done.*verified/);
    expect(restored.code).toBe(0);

    const app = await appOn(target);
    try {
      const rows = await dump(app.database);
      // Counters written in one transaction agree with each other: the snapshot is not torn.
      const sum = (table: string, column: string, where: (r: Row) => boolean = () => true) =>
        (rows[table] ?? []).filter(where).reduce((a, r) => a + Number(r[column]), 0);
      expect(sum('addons', 'total_downloads')).toBe(sum('releases', 'download_count'));
      expect(sum('download_daily', 'count', (r) => r.kind === 'addon')).toBe(sum('releases', 'download_count'));
      expect(sum('download_daily', 'count', (r) => r.kind !== 'addon')).toBe(
        sum('software_versions', 'download_count'),
      );
      expect(sum('releases', 'download_count')).toBeGreaterThan(0);
      // Every stored file a row names is in the restored store, byte for byte.
      const files = storeFiles(path.join(target.dir, 'uploads'));
      for (const row of rows.files ?? []) expect(files[String(row.key)]).toBe(row.sha256);
      for (const url of READS) expect((await app.inject({ url })).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('restores every row and file identically, and reads answer the same', async () => {
    await t.app.ctx.devices.flush();
    const archive = path.join(t.dir, '..', `${path.basename(t.dir)}-quiet.tar`);
    const result = await cli(env, 'backup', '--to', archive);
    expect(result.code).toBe(0);

    const target = await emptyTarget();
    const restored = await cli(target.env, 'restore', '--from', archive);
    expect(restored.output).toMatch(/restore: done/);
    expect(restored.code).toBe(0);

    const app = await appOn(target);
    try {
      const [before, after] = [await dump(t.database), await dump(app.database)];
      expect(Object.keys(after).sort()).toEqual(Object.keys(before).sort());
      for (const table of Object.keys(before))
        expect({ table, rows: after[table] }).toEqual({ table, rows: before[table] });
      expect(before.articles?.length).toBeGreaterThan(3);
      expect(storeFiles(path.join(target.dir, 'uploads'))).toEqual(storeFiles(path.join(t.dir, 'uploads')));
      for (const url of [...READS, `/api/software/download/${versionId}`]) {
        const [a, b] = [await t.inject({ url }), await app.inject({ url })];
        // check-update is signed when rendered: its `signedAt` is the only part that may differ.
        const unsigned = (body: string) => body.replace(/"signedAt":"[^"]*"/, '"signedAt":"…"');
        expect({ url, status: b.statusCode, body: unsigned(b.body) }).toEqual({
          url,
          status: a.statusCode,
          body: unsigned(a.body),
        });
      }
      // Sessions came along too.
      expect((await app.inject({ url: '/api/admin/me', headers: { cookie: t.cookie } })).statusCode).toBe(200);
    } finally {
      await app.close();
    }

    // The restored installation is not empty any more: a second restore refuses it, and changes nothing.
    const again = await cli(target.env, 'restore', '--from', archive);
    expect(again.code).toBe(1);
    expect(again.output).toMatch(/the target is not empty: .*restore into an empty one/);
    fs.rmSync(archive);
  });

  it('refuses bad usage, a missing archive and an archive of something else', async () => {
    const target = await emptyTarget();
    expect((await cli(target.env, 'backup')).code).toBe(2);
    expect((await cli(target.env, 'restore', '--to', 'x')).code).toBe(2);
    const missing = await cli(target.env, 'restore', '--from', path.join(target.dir, 'nope.tar'));
    expect(missing.code).toBe(1);
    expect(missing.output).toMatch(/restore failed: .*nope\.tar/);
    const junk = path.join(target.dir, 'junk.tar');
    fs.writeFileSync(junk, 'not a tar file at all'.repeat(100));
    const bad = await cli(target.env, 'restore', '--from', junk);
    expect(bad.code).toBe(1);
    expect(fs.existsSync(path.join(target.dir, 'app.db'))).toBe(false);
  });
});
