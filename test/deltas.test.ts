import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { claimJob } from '../src/db/jobs.js';
import { DEFAULT_DELTA_OPTIONS, DeltaWorker } from '../src/modules/deltas/worker.js';
import { S3Storage, type S3StorageConfig } from '../src/storage/s3.js';
import { S3RVER_CREDENTIALS, startS3 } from './helpers/s3.js';
import type { SigningKey } from '../docs/examples/verify.js';
import { verified } from './helpers/signed.js';
import {
  admin,
  buildSecondApp,
  buildTestApp,
  createPackage,
  createVersion,
  type TestApp,
  upload,
  versionCounters,
} from './helpers/app.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
const MB = 1024 * 1024;

/**
 * A launcher build and the next one: incompressible bytes (as an installer's are) with regions
 * rewritten, bytes inserted and bytes removed, as between two builds of one program.
 */
function versionPair(size = 12 * MB): { source: Buffer; target: Buffer } {
  const source = randomBytes(size);
  const parts: Buffer[] = [];
  const step = Math.floor(size / 16);
  for (let i = 0; i < 16; i++) {
    let chunk = Buffer.from(source.subarray(i * step, i === 15 ? size : (i + 1) * step));
    if (i % 5 === 1) randomBytes(Math.floor(chunk.length * 0.05)).copy(chunk, 1000);
    if (i % 7 === 2) chunk = Buffer.concat([chunk.subarray(0, 5000), randomBytes(20_000), chunk.subarray(5000)]);
    if (i % 6 === 3) chunk = Buffer.concat([chunk.subarray(0, 7000), chunk.subarray(37_000)]);
    parts.push(chunk);
  }
  return { source, target: Buffer.concat(parts) };
}

interface DeltaSummary {
  fromVersionCode: number;
  status: string;
  fileSize: number | null;
  sha256: string | null;
}

async function deltasOf(t: TestApp, slug: string, versionId: string): Promise<DeltaSummary[]> {
  const res = await admin(t, 'GET', `/api/admin/software/${slug}`);
  const pkg = res.json<{ versions: Array<{ id: string; deltas?: DeltaSummary[] }> }>();
  return pkg.versions.find((v) => v.id === versionId)?.deltas ?? [];
}

interface CheckUpdate {
  latest: {
    versionCode: number;
    delta?: { fromVersionCode: number; downloadUrl: string; fileSize: number; sha256: string };
  };
}

async function checkUpdate(server: App['server'], slug: string, versionCode: number): Promise<CheckUpdate> {
  const res = await server.inject(`/api/software/check-update?slug=${slug}&versionCode=${versionCode}`);
  expect(res.statusCode).toBe(200);
  return res.json<CheckUpdate>();
}

/** Rebuilds the target with the real zstd program and answers its SHA-256. */
function applyWithZstd(dir: string, source: Buffer, delta: Buffer): string {
  const src = path.join(dir, `source-${randomBytes(4).toString('hex')}`);
  const patch = `${src}.zst`;
  const out = `${src}.out`;
  fs.writeFileSync(src, source);
  fs.writeFileSync(patch, delta);
  execFileSync('zstd', ['-q', '-d', '--long=31', `--patch-from=${src}`, patch, '-o', out]);
  const digest = sha256(fs.readFileSync(out));
  for (const f of [src, patch, out]) fs.rmSync(f);
  return digest;
}

/** Publishes a package's two versions from a pair; answers their ids. */
async function publishPair(t: TestApp, slug: string, pair: { source: Buffer; target: Buffer }, codes = [1, 2]) {
  const pkg = await createPackage(t, { slug, name: slug });
  const a = await upload(t, `${slug}-1.exe`, pair.source);
  const b = await upload(t, `${slug}-2.exe`, pair.target);
  const v1 = await createVersion(t, pkg.id, { version: `${codes[0]}.0`, versionCode: codes[0], filePath: a.filePath });
  const v2 = await createVersion(t, pkg.id, { version: `${codes[1]}.0`, versionCode: codes[1], filePath: b.filePath });
  return { pkg, v1, v2, files: [a, b] };
}

const storeFiles = (t: TestApp) =>
  fs.readdirSync(path.join(t.dir, 'uploads'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.zst'));

describe('delta updates', () => {
  let t: TestApp;
  const pair = versionPair();
  let ids: Awaited<ReturnType<typeof publishPair>>;

  beforeAll(async () => {
    t = await buildTestApp();
    expect(await t.app.ctx.deltas.launch((err) => expect.fail(String(err)))).toBe(true);
    ids = await publishPair(t, 'game-launcher', pair);
  });
  afterAll(() => t.close());

  it('makes a delta within seconds that zstd applies to exactly the target', async () => {
    await vi.waitFor(async () => expect((await deltasOf(t, 'game-launcher', ids.v2.id))[0]?.status).toBe('ready'), {
      timeout: 60_000,
      interval: 200,
    });
    const [summary] = await deltasOf(t, 'game-launcher', ids.v2.id);
    expect(summary?.fromVersionCode).toBe(1);
    expect(summary?.fileSize).toBeLessThan(pair.target.length * 0.5);
    const res = await t.inject(`/api/software/download/${ids.v2.id}/delta/1`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-length']).toBe(String(summary?.fileSize));
    expect(res.headers.etag).toBe(`"${summary?.sha256}"`);
    expect(sha256(res.rawPayload)).toBe(summary?.sha256);
    expect(applyWithZstd(t.dir, pair.source, res.rawPayload)).toBe(sha256(pair.target));
  });

  it('check-update offers latest.delta only to the source versionCode, signed with the answer', async () => {
    const offered = await t.inject('/api/software/check-update?slug=game-launcher&versionCode=1');
    const pinned = (await t.inject('/api/signing-keys')).json<SigningKey[]>();
    expect(verified(offered, pinned)).toBe(true);
    const { latest } = offered.json<CheckUpdate>();
    const [summary] = await deltasOf(t, 'game-launcher', ids.v2.id);
    expect(latest.versionCode).toBe(2);
    expect(latest.delta).toEqual({
      fromVersionCode: 1,
      downloadUrl: expect.stringMatching(
        new RegExp(`^http.*/api/software/download/${ids.v2.id}/delta/1\\?source=launcher$`),
      ),
      fileSize: summary?.fileSize,
      sha256: summary?.sha256,
    });
    for (const code of [0, 2, 3])
      expect((await checkUpdate(t.app.server, 'game-launcher', code)).latest.delta).toBeUndefined();
    // Answers without a delta are exactly those of the specification: the field is absent, not null.
    const plain = await t.inject('/api/software/check-update?slug=game-launcher&versionCode=0');
    expect(Object.keys(plain.json<{ latest: object }>().latest)).not.toContain('delta');
  });

  it('counts a delta download as a download of the target; HEAD, 304 and resumed ranges do not count', async () => {
    const url = `/api/software/download/${ids.v2.id}/delta/1`;
    const before = await versionCounters(t, ids.v2.id);
    const full = await t.inject(url);
    const etag = String(full.headers.etag);
    expect((await t.inject({ url, method: 'HEAD' })).statusCode).toBe(200);
    expect((await t.inject({ url, headers: { 'if-none-match': etag } })).statusCode).toBe(304);
    const resumed = await t.inject({ url, headers: { range: 'bytes=100-' } });
    expect(resumed.statusCode).toBe(206);
    expect(resumed.rawPayload.equals(full.rawPayload.subarray(100))).toBe(true);
    expect(await versionCounters(t, ids.v2.id)).toEqual({ total: before.total + 1, launcher: before.launcher });
    expect((await t.inject(`${url}?source=launcher`)).statusCode).toBe(200);
    expect((await t.inject({ url, headers: { range: 'bytes=0-99' } })).statusCode).toBe(206);
    expect(await versionCounters(t, ids.v2.id)).toEqual({ total: before.total + 3, launcher: before.launcher + 1 });
    expect((await versionCounters(t, ids.v1.id)).total).toBe(0);
  });

  it('answers 404 for a delta that does not exist and 400 for a malformed versionCode', async () => {
    expect((await t.inject(`/api/software/download/${ids.v2.id}/delta/7`)).statusCode).toBe(404);
    expect((await t.inject(`/api/software/download/${ids.v1.id}/delta/2`)).statusCode).toBe(404);
    expect((await t.inject(`/api/software/download/nope/delta/1`)).statusCode).toBe(404);
    const bad = await t.inject(`/api/software/download/${ids.v2.id}/delta/x1`);
    expect(bad.statusCode).toBe(400);
    expect(bad.json<{ error: string }>().error).toMatch('fromVersionCode');
  });

  it('offers nothing with DELTAS=off', async () => {
    const off = await buildSecondApp(t, { DELTAS: 'off' });
    try {
      expect((await checkUpdate(off.server, 'game-launcher', 1)).latest.delta).toBeUndefined();
      expect((await off.server.inject(`/api/software/download/${ids.v2.id}/delta/1`)).statusCode).toBe(404);
    } finally {
      await off.close();
    }
  });

  it('offers none from or to a revoked version', async () => {
    await admin(t, 'POST', `/api/software/versions/${ids.v1.id}/revoke`);
    await vi.waitFor(async () =>
      expect((await checkUpdate(t.app.server, 'game-launcher', 1)).latest.delta).toBeUndefined(),
    );
    expect((await t.inject(`/api/software/download/${ids.v2.id}/delta/1`)).statusCode).toBe(404);
    await admin(t, 'POST', `/api/software/versions/${ids.v1.id}/unrevoke`);
    expect((await checkUpdate(t.app.server, 'game-launcher', 1)).latest.delta?.fromVersionCode).toBe(1);
    await admin(t, 'POST', `/api/software/versions/${ids.v2.id}/revoke`);
    expect((await t.inject(`/api/software/download/${ids.v2.id}/delta/1`)).statusCode).toBe(410);
    await admin(t, 'POST', `/api/software/versions/${ids.v2.id}/unrevoke`);
  });

  it('records a delta that is not worth keeping as skipped', async () => {
    const pkg = await createPackage(t, { slug: 'random-app', name: 'random' });
    const a = await upload(t, 'r1.exe', randomBytes(2 * MB));
    const b = await upload(t, 'r2.exe', randomBytes(2 * MB));
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: a.filePath });
    const v2 = await createVersion(t, pkg.id, { version: '2', versionCode: 2, filePath: b.filePath });
    await vi.waitFor(async () => expect((await deltasOf(t, 'random-app', v2.id))[0]?.status).toBe('skipped'), {
      timeout: 60_000,
      interval: 200,
    });
    expect((await deltasOf(t, 'random-app', v2.id))[0]).toMatchObject({ fileSize: null, sha256: null });
    expect((await checkUpdate(t.app.server, 'random-app', 1)).latest.delta).toBeUndefined();
  });

  it('plans no delta between two versions of the same file (nothing to send), and one to the next build', async () => {
    const pkg = await createPackage(t, { slug: 'same-file', name: 'same' });
    const a = await upload(t, 'same-1.exe', pair.source);
    const b = await upload(t, 'same-3.exe', pair.target);
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: a.filePath });
    const v2 = await createVersion(t, pkg.id, { version: '2', versionCode: 2, filePath: a.filePath });
    // What an earlier release planned for such a pair (and retried for ever) is forgotten.
    const created = new Date().toISOString();
    const v1Id = (
      await t.database.db
        .selectFrom('softwareVersions')
        .select('id')
        .where('versionCode', '=', 1)
        .where('packageId', '=', pkg.id)
        .executeTakeFirstOrThrow()
    ).id;
    await t.database.db
      .insertInto('softwareDeltas')
      .values({
        id: `same-${v2.id}`,
        sourceVersionId: v1Id,
        targetVersionId: v2.id,
        sourceSha256: a.sha256,
        targetSha256: a.sha256,
        status: 'pending',
        nextAttemptMs: Date.now() + 3_600_000,
        fileKey: null,
        fileSize: null,
        sha256: null,
        error: 'zstd exited with 1',
        createdAt: created,
        updatedAt: created,
      })
      .onConflict((oc) => oc.columns(['sourceVersionId', 'targetVersionId']).doNothing())
      .execute();
    const v3 = await createVersion(t, pkg.id, { version: '3', versionCode: 3, filePath: b.filePath });
    await vi.waitFor(
      async () => expect((await deltasOf(t, 'same-file', v3.id)).map((d) => d.status)).toEqual(['ready', 'ready']),
      { timeout: 60_000, interval: 200 },
    );
    // v2 was planned in every pass since (the newest of its package at first, then recent): never from v1.
    expect(await deltasOf(t, 'same-file', v2.id)).toEqual([]);
    expect((await checkUpdate(t.app.server, 'same-file', 2)).latest.delta?.fromVersionCode).toBe(2);
  });

  it('deletes a delta, row and file, with its source or its target version', async () => {
    const [summary] = await deltasOf(t, 'game-launcher', ids.v2.id);
    const row = await t.database.db
      .selectFrom('softwareDeltas')
      .select('fileKey')
      .where('targetVersionId', '=', ids.v2.id)
      .executeTakeFirstOrThrow();
    const file = path.join(t.dir, 'uploads', row.fileKey ?? '');
    expect(fs.statSync(file).size).toBe(summary?.fileSize);
    expect((await admin(t, 'DELETE', `/api/software/versions/${ids.v1.id}`)).statusCode).toBe(200);
    expect(fs.existsSync(file)).toBe(false);
    const left = await t.database.db
      .selectFrom('softwareDeltas')
      .select('id')
      .where('targetVersionId', '=', ids.v2.id)
      .execute();
    expect(left).toEqual([]);
    expect((await checkUpdate(t.app.server, 'game-launcher', 1)).latest.delta).toBeUndefined();
  });
});

describe('delta jobs across instances', () => {
  let t: TestApp;
  let second: App;

  beforeAll(async () => {
    t = await buildTestApp();
    second = await buildSecondApp(t);
  });
  afterAll(async () => {
    await second.close();
    await t.close();
  });

  it('two instances make each delta once, and both offer it within seconds', async () => {
    const pair = versionPair(8 * MB);
    await t.app.ctx.deltas.launch((err) => expect.fail(String(err)));
    await second.ctx.deltas.launch((err) => expect.fail(String(err)));
    const { v2 } = await publishPair(t, 'twice', pair);
    // The second instance answered before the delta existed: its cached answer must follow.
    expect((await checkUpdate(second.server, 'twice', 1)).latest.delta).toBeUndefined();
    await vi.waitFor(async () => expect((await deltasOf(t, 'twice', v2.id))[0]?.status).toBe('ready'), {
      timeout: 60_000,
      interval: 200,
    });
    await vi.waitFor(async () => expect((await checkUpdate(second.server, 'twice', 1)).latest.delta).toBeDefined(), {
      timeout: 3000,
    });
    const rows = await t.database.db.selectFrom('softwareDeltas').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]?.attempts).toBe(1);
    expect(storeFiles(t)).toHaveLength(1);
    await t.app.ctx.deltas.stop();
    await second.ctx.deltas.stop();
  });

  it('a job whose instance died is made by another once its lease lapses', async () => {
    const pair = versionPair(8 * MB);
    const { v2, files } = await publishPair(t, 'restarted', pair, [5, 6]);
    const worker = second.ctx.deltas;
    const at = Date.now();
    await worker.plan(at);
    const job = await t.database.db
      .selectFrom('softwareDeltas')
      .selectAll()
      .where('targetVersionId', '=', v2.id)
      .executeTakeFirstOrThrow();
    // The instance that claimed it stops answering (a crash): its lease is still live for a minute.
    expect(await claimJob(t.database.db, 'softwareDeltas', job.id, at, at + 60_000)).toBe(true);
    await worker.tick(at + 1000);
    expect((await deltasOf(t, 'restarted', v2.id))[0]?.status).toBe('pending');
    await worker.tick(at + 61_000);
    const [made] = await deltasOf(t, 'restarted', v2.id);
    expect(made?.status).toBe('ready');
    const delta = await t.inject(`/api/software/download/${v2.id}/delta/5`);
    expect(applyWithZstd(t.dir, pair.source, delta.rawPayload)).toBe(files[1]?.sha256);
  });

  it('an instance stopped in the middle of a job leaves it to another at once', async () => {
    const pair = versionPair(40 * MB);
    const { v2, files } = await publishPair(t, 'stopped', pair, [7, 8]);
    const job = () =>
      t.database.db.selectFrom('softwareDeltas').selectAll().where('targetVersionId', '=', v2.id).executeTakeFirst();
    const first = await buildSecondApp(t);
    await first.ctx.deltas.launch((err) => expect.fail(String(err)));
    // Claimed: zstd is running on the first instance when it stops.
    await vi.waitFor(async () => expect((await job())?.leaseUntilMs).toBeGreaterThan(0), {
      timeout: 5000,
      interval: 20,
    });
    await first.close();
    expect(await job()).toMatchObject({ status: 'pending', leaseUntilMs: 0, attempts: 0, fileKey: null });
    expect(storeFiles(t).filter((f) => f.includes('delta-7-to-8'))).toEqual([]);
    await second.ctx.deltas.tick();
    expect(await job()).toMatchObject({ status: 'ready', attempts: 1 });
    const delta = await t.inject(`/api/software/download/${v2.id}/delta/7`);
    expect(applyWithZstd(t.dir, pair.source, delta.rawPayload)).toBe(files[1]?.sha256);
  });

  it('plans a scheduled version once its publishAt passes, and forgets a delta whose file is replaced', async () => {
    const pair = versionPair(4 * MB);
    const pkg = await createPackage(t, { slug: 'scheduled', name: 'scheduled' });
    const a = await upload(t, 's1.exe', pair.source);
    const b = await upload(t, 's2.exe', pair.target);
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: a.filePath });
    const publishAt = new Date(Date.now() + 60_000).toISOString();
    const v2 = await createVersion(t, pkg.id, { version: '2', versionCode: 2, filePath: b.filePath, publishAt });
    const worker = t.app.ctx.deltas;
    await worker.tick(Date.now());
    expect(await deltasOf(t, 'scheduled', v2.id)).toEqual([]);
    await worker.tick(Date.parse(publishAt) + 1);
    expect((await deltasOf(t, 'scheduled', v2.id))[0]?.status).toBe('ready');
    const row = await t.database.db
      .selectFrom('softwareDeltas')
      .select('fileKey')
      .where('targetVersionId', '=', v2.id)
      .executeTakeFirstOrThrow();
    const c = await upload(t, 's2b.exe', randomBytes(4 * MB));
    await admin(t, 'PUT', `/api/software/versions/${v2.id}`, { filePath: c.filePath });
    await worker.plan(Date.parse(publishAt) + 2);
    expect(fs.existsSync(path.join(t.dir, 'uploads', row.fileKey ?? ''))).toBe(false);
    expect((await deltasOf(t, 'scheduled', v2.id))[0]?.status).toBe('pending');
  });
});

describe('delta stores and serving', () => {
  it('makes deltas from an S3 store (through a temporary folder) and stores them there', async () => {
    const s3 = await startS3();
    const config = loadConfig({ DATA_DIR: '/nonexistent', ...s3.env('deltas') }).storage as S3StorageConfig;
    const storage = new S3Storage(config, { credentials: S3RVER_CREDENTIALS });
    const t = await buildTestApp({}, { storage });
    try {
      const pair = versionPair(4 * MB);
      const { v2 } = await publishPair(t, 'in-s3', pair);
      await t.app.ctx.deltas.tick();
      const [made] = await deltasOf(t, 'in-s3', v2.id);
      expect(made?.status).toBe('ready');
      const delta = await t.inject(`/api/software/download/${v2.id}/delta/1`);
      expect(delta.statusCode).toBe(200);
      expect(applyWithZstd(t.dir, pair.source, delta.rawPayload)).toBe(sha256(pair.target));
    } finally {
      await t.close();
      await storage.close();
      await s3.close();
    }
  });

  it('makes no delta of a file over DELTA_MAX_FILE_BYTES (the bound of its memory), and says why', async () => {
    const t = await buildTestApp({ DELTA_MAX_FILE_BYTES: String(3 * MB) });
    try {
      const big = await publishPair(t, 'too-big', versionPair(4 * MB));
      const small = await publishPair(t, 'small-enough', versionPair(2 * MB));
      await t.app.ctx.deltas.tick();
      await t.app.ctx.deltas.tick();
      const rows = await t.database.db
        .selectFrom('softwareDeltas')
        .select(['targetVersionId', 'status', 'error'])
        .execute();
      const of = (id: string) => rows.find((r) => r.targetVersionId === id);
      expect(of(big.v2.id)).toMatchObject({
        status: 'skipped',
        error: expect.stringMatching(/^files over 3145728 bytes \(DELTA_MAX_FILE_BYTES\) get no delta/),
      });
      expect(of(small.v2.id)).toMatchObject({ status: 'ready', error: null });
      expect((await checkUpdate(t.app.server, 'too-big', 1)).latest.delta).toBeUndefined();
      expect((await checkUpdate(t.app.server, 'small-enough', 1)).latest.delta?.fromVersionCode).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('hands a delta download to the proxy like a full download, counted once', async () => {
    const t = await buildTestApp({ DOWNLOAD_OFFLOAD: 'x-accel-redirect' });
    try {
      const { v2 } = await publishPair(t, 'offloaded', versionPair(2 * MB));
      await t.app.ctx.deltas.tick();
      const row = await t.database.db.selectFrom('softwareDeltas').select('fileKey').executeTakeFirstOrThrow();
      const res = await t.inject(`/api/software/download/${v2.id}/delta/1?source=launcher`);
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-accel-redirect']).toBe(`/internal-uploads/${row.fileKey}`);
      expect(res.rawPayload.length).toBe(0);
      expect(await versionCounters(t, v2.id)).toEqual({ total: 1, launcher: 1 });
    } finally {
      await t.close();
    }
  });

  it('warns at start and makes nothing when zstd is missing', async () => {
    const t = await buildTestApp();
    const path0 = process.env.PATH;
    const warnings: string[] = [];
    try {
      process.env.PATH = '/nonexistent';
      const worker = new DeltaWorker(
        t.database.db,
        t.app.ctx.storage,
        t.app.ctx.cache,
        { ...DEFAULT_DELTA_OPTIONS, sources: 3, maxRatio: 0.5, maxFileBytes: 2 * 1024 ** 3 },
        { info: () => undefined, warn: (msg) => warnings.push(msg) },
      );
      expect(await worker.launch(() => undefined)).toBe(false);
      await worker.stop();
    } finally {
      process.env.PATH = path0;
      await t.close();
    }
    expect(warnings).toEqual([expect.stringMatching(/zstd program \(1\.4\.5 or later\) was not found/)]);
  });
});
