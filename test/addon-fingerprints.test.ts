import { createHash } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SigningKey } from '../docs/examples/verify.js';
import { loadConfig } from '../src/config.js';
import { newId } from '../src/domain/clock.js';
import { S3Storage } from '../src/storage/s3.js';
import type { Storage } from '../src/storage/storage.js';
import { type RawEntry, zip } from '../packages/launcher-client/test/addons-fixtures.js';
import { admin, buildSecondApp, buildTestApp, type TestApp, upload } from './helpers/app.js';
import { digestHeaderOf, libraryVerifies, SIGNATURE_HEADERS, verified } from './helpers/signed.js';
import { S3RVER_CREDENTIALS, startS3, type TestS3 } from './helpers/s3.js';

/**
 * Issue 45, hand-installed addons recognised: the service keeps the fingerprint of each top-level
 * folder of each release's stored zip (at creation, and by a background job for releases without
 * them) and answers `POST /api/addons/fingerprints`, signed as the addon updates are.
 */

const sha256 = (data: string) => createHash('sha256').update(data).digest('hex');

type Folder = Record<string, string>;

/** An addon zip of `folders` (name → relative path → content). */
function addonZip(folders: Record<string, Folder>): Buffer {
  const entries: RawEntry[] = Object.entries(folders).flatMap(([name, files]) => [
    { name: `${name}/` },
    ...Object.entries(files).map(([rel, data]) => ({ name: `${name}/${rel}`, data })),
  ]);
  return zip(entries);
}

/**
 * The reference, written out here: the files' lines in the order of their paths' UTF-8 bytes (the
 * caller lists them in that order), each `path\n<sha256 of the content>\n`, hashed.
 */
function expected(ordered: [string, string][]): string {
  return sha256(ordered.map(([rel, data]) => `${rel}\n${sha256(data)}\n`).join(''));
}

interface Match {
  fingerprint: string;
  folder: string;
  addon: { id: string; slug: string };
  release: { id: string; version: string; folders: string[] };
}

const QUESTIE: Folder = { 'Questie.toc': '## Title: Questie\n', 'core.lua': '-- 1.0', 'db/quests.lua': 'q' };
const QUESTIE_FP = expected([
  ['Questie.toc', QUESTIE['Questie.toc']!],
  ['core.lua', QUESTIE['core.lua']!],
  ['db/quests.lua', QUESTIE['db/quests.lua']!],
]);
const OPTIONS: Folder = { 'Questie_Options.toc': '## Title: Options\n', 'options.lua': 'o' };
const OPTIONS_FP = expected([
  ['Questie_Options.toc', OPTIONS['Questie_Options.toc']!],
  ['options.lua', OPTIONS['options.lua']!],
]);
const QUESTIE_2: Folder = { ...QUESTIE, 'core.lua': '-- 2.0' };
const QUESTIE_2_FP = expected([
  ['Questie.toc', QUESTIE['Questie.toc']!],
  ['core.lua', '-- 2.0'],
  ['db/quests.lua', QUESTIE['db/quests.lua']!],
]);

async function createAddon(t: TestApp, slug: string, published = true): Promise<string> {
  const res = await admin(t, 'POST', '/api/addons', { slug, name: slug, summary: 's', published });
  expect(res.statusCode, res.body).toBe(201);
  return res.json<{ id: string }>().id;
}

async function createRelease(
  t: TestApp,
  addonId: string,
  version: string,
  content: Buffer | string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  const file = await upload(t, `${version}.zip`, content);
  const res = await admin(t, 'POST', '/api/releases', { addonId, version, filePath: file.filePath, ...extra });
  expect(res.statusCode, res.body).toBe(201);
  return res.json<{ id: string }>().id;
}

function ask(t: TestApp, fingerprints: unknown, headers: Record<string, string> = {}) {
  return t.inject({ method: 'POST', url: '/api/addons/fingerprints', headers, payload: { fingerprints } });
}

async function matches(t: TestApp, fingerprints: string[]): Promise<Match[]> {
  const res = await ask(t, fingerprints);
  expect(res.statusCode, res.body).toBe(200);
  return res.json<{ matches: Match[] }>().matches;
}

/** Forgets every recorded folder, as for releases from before the fingerprints existed. */
async function forgetAll(t: TestApp): Promise<void> {
  await t.app.ctx.db.deleteFrom('releaseFolders').execute();
  await t.app.ctx.db.deleteFrom('releaseFingerprints').execute();
}

describe('addon folder fingerprints (local store)', () => {
  let t: TestApp;
  let questie = '';
  let v1 = '';
  let v2 = '';
  beforeAll(async () => {
    t = await buildTestApp();
    questie = await createAddon(t, 'questie');
    v1 = await createRelease(t, questie, '1.0', addonZip({ Questie: QUESTIE, Questie_Options: OPTIONS }));
    v2 = await createRelease(t, questie, '2.0', addonZip({ Questie: QUESTIE_2, Questie_Options: OPTIONS }));
  });
  afterAll(() => t.close());

  it('fingerprints each top-level folder when the release is created, as the reference says', async () => {
    const rows = await t.app.ctx.db
      .selectFrom('releaseFolders')
      .select(['folder', 'fingerprint'])
      .where('releaseId', '=', v1)
      .orderBy('folder')
      .execute();
    expect(rows).toEqual([
      { folder: 'Questie', fingerprint: QUESTIE_FP },
      { folder: 'Questie_Options', fingerprint: OPTIONS_FP },
    ]);
  });

  it('answers the folders with the fingerprints asked: in the order asked, newest release first, each asked once, with every folder of the release', async () => {
    const unknown = 'f'.repeat(64);
    expect(await matches(t, [OPTIONS_FP, unknown, QUESTIE_FP, OPTIONS_FP, QUESTIE_2_FP])).toEqual([
      {
        fingerprint: OPTIONS_FP,
        folder: 'Questie_Options',
        addon: { id: questie, slug: 'questie' },
        release: { id: v2, version: '2.0', folders: ['Questie', 'Questie_Options'] },
      },
      {
        fingerprint: OPTIONS_FP,
        folder: 'Questie_Options',
        addon: { id: questie, slug: 'questie' },
        release: { id: v1, version: '1.0', folders: ['Questie', 'Questie_Options'] },
      },
      {
        fingerprint: QUESTIE_FP,
        folder: 'Questie',
        addon: { id: questie, slug: 'questie' },
        release: { id: v1, version: '1.0', folders: ['Questie', 'Questie_Options'] },
      },
      {
        fingerprint: QUESTIE_2_FP,
        folder: 'Questie',
        addon: { id: questie, slug: 'questie' },
        release: { id: v2, version: '2.0', folders: ['Questie', 'Questie_Options'] },
      },
    ]);
    expect(await matches(t, [])).toEqual([]);
  });

  it('answers only published releases of published addons; a deleted release takes its folders along', async () => {
    const only = { Only: { 'Only.toc': 'only' } };
    const onlyFp = expected([['Only.toc', 'only']]);
    const draft = await createAddon(t, 'draft-addon', false);
    await createRelease(t, draft, '1.0', addonZip(only));
    const scheduled = await createRelease(t, questie, '9.0', addonZip(only), {
      publishAt: new Date(Date.now() + 3_600_000).toISOString(),
    });
    expect(await matches(t, [onlyFp])).toEqual([]);
    // Published once due (here: now), and once the addon is.
    expect((await admin(t, 'PUT', `/api/releases/${scheduled}`, { publishAt: null })).statusCode).toBe(200);
    expect((await matches(t, [onlyFp])).map((m) => m.release.id)).toEqual([scheduled]);
    expect((await admin(t, 'PUT', `/api/addons/${draft}`, { published: true })).statusCode).toBe(200);
    expect((await matches(t, [onlyFp])).map((m) => m.addon.slug)).toEqual(['questie', 'draft-addon']);
    expect((await admin(t, 'DELETE', `/api/addons/${draft}`)).statusCode).toBe(200);
    expect((await admin(t, 'DELETE', `/api/releases/${scheduled}`)).statusCode).toBe(200);
    expect(await matches(t, [onlyFp])).toEqual([]);
    const left = await t.app.ctx.db.selectFrom('releaseFolders').select('releaseId').distinct().execute();
    expect(left.map((r) => r.releaseId).sort()).toEqual([v1, v2].sort());
  });

  it('reads the folders again when the file changes, and forgets them for a link', async () => {
    const id = await createRelease(t, questie, '3.0', addonZip({ Old: { 'Old.toc': 'old' } }));
    const oldFp = expected([['Old.toc', 'old']]);
    const newFp = expected([['New.toc', 'new']]);
    const file = await upload(t, 'new.zip', addonZip({ New: { 'New.toc': 'new' } }));
    expect((await admin(t, 'PUT', `/api/releases/${id}`, { filePath: file.filePath })).statusCode).toBe(200);
    expect(await matches(t, [oldFp])).toEqual([]);
    expect((await matches(t, [newFp])).map((m) => [m.folder, m.release.id])).toEqual([['New', id]]);
    const link = { downloadType: 'url', externalUrl: 'https://example.test/new.zip' };
    expect((await admin(t, 'PUT', `/api/releases/${id}`, link)).statusCode).toBe(200);
    expect(await matches(t, [newFp])).toEqual([]);
    expect((await admin(t, 'DELETE', `/api/releases/${id}`)).statusCode).toBe(200);
  });

  it('keeps no folders for a file that is not an addon zip, and does not read it again', async () => {
    const id = await createRelease(t, questie, '0.1', 'not a zip at all');
    const bad = await createRelease(t, questie, '0.2', zip([{ name: 'Evil/../x.lua', data: 'x' }]));
    for (const releaseId of [id, bad]) {
      const folders = await t.app.ctx.db
        .selectFrom('releaseFolders')
        .selectAll()
        .where('releaseId', '=', releaseId)
        .execute();
      expect(folders).toEqual([]);
      const marker = await t.app.ctx.db
        .selectFrom('releaseFingerprints')
        .select('releaseId')
        .where('releaseId', '=', releaseId)
        .execute();
      expect(marker).toHaveLength(1);
    }
    expect(await t.app.ctx.fingerprints.run()).toEqual({ fingerprinted: 0, failed: 0 });
    for (const releaseId of [id, bad])
      expect((await admin(t, 'DELETE', `/api/releases/${releaseId}`)).statusCode).toBe(200);
  });

  it('the background job fingerprints existing releases once, in batches, one instance at a time, taken over when a lease lapses', async () => {
    // 120 more releases of the same file, written as an older version of the service would have.
    const base = await t.app.ctx.db.selectFrom('releases').selectAll().where('id', '=', v1).executeTakeFirstOrThrow();
    const copies = Array.from({ length: 120 }, (_, i) => ({
      ...base,
      id: newId(),
      version: `0.0.${i}`,
      isLatest: 0 as const,
    }));
    await t.app.ctx.db.insertInto('releases').values(copies).execute();
    await forgetAll(t);
    expect(await matches(t, [QUESTIE_2_FP])).toEqual([]);

    expect(await t.app.ctx.fingerprints.run()).toEqual({ fingerprinted: 122, failed: 0 });
    const folders = await t.app.ctx.db.selectFrom('releaseFolders').select(['releaseId', 'fingerprint']).execute();
    expect(folders).toHaveLength(244);
    expect((await matches(t, [QUESTIE_2_FP])).map((m) => m.release.id)).toEqual([v2]);
    expect((await matches(t, [QUESTIE_FP])).length).toBe(121);
    // Idempotent: nothing left to do.
    expect(await t.app.ctx.fingerprints.run()).toEqual({ fingerprinted: 0, failed: 0 });

    // Another instance: refused while this one's lease runs, takes over once it lapses (a restart).
    await forgetAll(t);
    const second = await buildSecondApp(t);
    try {
      expect(await second.ctx.fingerprints.run()).toBeNull();
      expect(await second.ctx.fingerprints.run(Date.now() + 10 * 60_000)).toEqual({ fingerprinted: 122, failed: 0 });
    } finally {
      await second.close();
    }
    expect((await matches(t, [QUESTIE_2_FP])).map((m) => m.release.id)).toEqual([v2]);
    await t.app.ctx.db
      .deleteFrom('releases')
      .where(
        'id',
        'in',
        copies.map((c) => c.id),
      )
      .execute();
  });

  it('validates the body: up to 5,000 fingerprints, each 64 lowercase hex digits, naming the fault', async () => {
    const many = Array.from({ length: 5001 }, (_, i) => sha256(String(i)));
    expect((await ask(t, many.slice(0, 5000))).statusCode).toBe(200);
    for (const [bad, fault] of [
      [many, /fingerprints.*5000/],
      [['A'.repeat(64)], /fingerprints\.0.*pattern/],
      [[QUESTIE_FP, 'a'.repeat(63)], /fingerprints\.1.*pattern/],
      [[5], /fingerprints\.0.*string/],
      ['abc', /fingerprints.*array/],
    ] as const) {
      const res = await ask(t, bad);
      expect(res.statusCode, JSON.stringify(bad).slice(0, 60)).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(fault);
      for (const name of SIGNATURE_HEADERS) expect(res.headers[name]).toBeUndefined();
    }
    const missing = await t.inject({ method: 'POST', url: '/api/addons/fingerprints', payload: {} });
    expect(missing.statusCode).toBe(400);
    expect(missing.json<{ error: string }>().error).toMatch(/fingerprints/);
  });

  it("is signed as the addon updates are: over the answer and the request's path and Content-Digest", async () => {
    const pinned = (await t.inject('/api/signing-keys')).json<SigningKey[]>();
    const payload = Buffer.from(JSON.stringify({ fingerprints: [QUESTIE_FP] }));
    const post = (headers: Record<string, string>) =>
      t.inject({
        method: 'POST',
        url: '/api/addons/fingerprints',
        headers: { 'content-type': 'application/json', ...headers },
        payload,
      });
    const good = await post({ 'content-digest': digestHeaderOf(payload) });
    expect(good.statusCode).toBe(200);
    expect(good.headers['content-digest']).toBe(digestHeaderOf(good.rawPayload));
    expect(String(good.headers['signature-input'])).toMatch(
      /^sig1=\("content-digest" "@path";req "content-digest";req\);/,
    );
    expect(verified(good, pinned)).toBe(true);
    expect(await libraryVerifies(good, pinned[0]!)).toBe(true);
    // Passed off as the answer to another body, or to another route: refused.
    const otherBody = {
      ...good,
      raw: {
        req: {
          ...good.raw.req,
          headers: { ...good.raw.req.headers, 'content-digest': digestHeaderOf(Buffer.from('{}')) },
        },
      },
    };
    expect(verified(otherBody, pinned)).toBe(false);
    expect(await libraryVerifies(otherBody, pinned[0]!)).toBe(false);
    const otherPath = { ...good, raw: { req: { ...good.raw.req, url: '/api/addons/updates' } } };
    expect(verified(otherPath, pinned)).toBe(false);
    // A body that is not what its Content-Digest says: 400, unsigned.
    const refused = await post({ 'content-digest': digestHeaderOf(Buffer.from('{"fingerprints":[]}')) });
    expect(refused.statusCode).toBe(400);
    expect(refused.json<{ error: string }>().error).toMatch(/content-digest/);
    for (const name of SIGNATURE_HEADERS) expect(refused.headers[name]).toBeUndefined();
  });
});

describe('addon folder fingerprints (S3 store: the file is read from a copy)', () => {
  let s3: TestS3;
  let t: TestApp;
  let storage: Storage;
  beforeAll(async () => {
    s3 = await startS3();
    const config = loadConfig({ DATA_DIR: s3.dir, ...s3.env(`fingerprints-${path.basename(s3.dir)}`) }).storage;
    if (config.kind !== 's3') throw new Error('expected S3 storage');
    storage = new S3Storage(config, { credentials: S3RVER_CREDENTIALS });
    t = await buildTestApp({}, { storage });
  });
  afterAll(async () => {
    await t.close();
    await storage.close?.();
    await s3.close();
  });

  it('fingerprints at creation and by the job', async () => {
    const addonId = await createAddon(t, 'questie');
    const id = await createRelease(t, addonId, '1.0', addonZip({ Questie: QUESTIE }));
    expect((await matches(t, [QUESTIE_FP])).map((m) => m.release.id)).toEqual([id]);
    await forgetAll(t);
    expect(await t.app.ctx.fingerprints.run()).toEqual({ fingerprinted: 1, failed: 0 });
    expect((await matches(t, [QUESTIE_FP])).map((m) => m.release.id)).toEqual([id]);
  });
});
