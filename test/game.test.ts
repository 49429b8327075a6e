import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gameTrustedComment } from 'patchwell-client/minisign';
import { generateKeyPair, parseSecretKey, signPrehash } from 'patchwell-publish/minisign';
import { prehash } from 'patchwell-client/minisign';
import type { SigningKey } from '../docs/examples/verify.js';
import { chunkKey } from '../src/modules/game/chunks.js';
import { S3Storage, type S3StorageConfig } from '../src/storage/s3.js';
import { loadConfig } from '../src/config.js';
import { admin, buildTestApp, login, type TestApp } from './helpers/app.js';
import { manifestOf, publishBuild, putChunk, sha256Of } from './helpers/game.js';
import { S3RVER_CREDENTIALS, startS3, type TestS3 } from './helpers/s3.js';
import { verified } from './helpers/signed.js';

// The game client's service half (game-files.md, "The service"), on the run's engine, on a local
// folder and on S3 (s3rver).

const HOUR_MS = 3600_000;
const exe = randomBytes(300_000);
const mpq = randomBytes(50_000);

function firstBuild(buildCode = 1, version = '1.18.1') {
  return manifestOf({ version, buildCode }, [
    { path: 'WoW.exe', content: exe, chunkBytes: 100_000, extra: { executable: true } },
    { path: 'Data/patch-3.mpq', content: mpq },
    { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist x'), extra: { policy: 'initial' } },
    { path: 'Data/empty.txt', content: Buffer.alloc(0) },
  ]);
}

async function keys(t: TestApp): Promise<SigningKey[]> {
  return (await t.inject('/api/signing-keys')).json<SigningKey[]>();
}

async function buildCount(t: TestApp): Promise<number> {
  return (await t.database.db.selectFrom('gameBuilds').select('buildCode').execute()).length;
}

/** The S3-compatible server of the S3 suite (undefined for a local folder). */
let s3: TestS3 | undefined;
let s3Storage: S3Storage | undefined;
/** HEAD requests the S3 server has received so far (0 without one). */
const storeHeads = () => s3?.requests.filter((r) => r.method === 'HEAD').length ?? 0;

/** The store-wide figures of the admin API, as `cookie` reads them. */
async function storeTotals(t: TestApp, cookie = t.cookie) {
  return t.inject({ url: '/api/admin/game/store', headers: { cookie } });
}

function suite(name: string, setup: () => Promise<TestApp>, teardown: () => Promise<void> = async () => undefined) {
  describe(name, () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await setup();
    });
    afterAll(async () => {
      await t?.close();
      await teardown();
    });

    it('answers no build before the first one', async () => {
      const res = await t.inject('/api/game/check-update?buildCode=5');
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ hasUpdate: false, forceUpdate: false, downgrade: false, latest: null });
      expect(verified(res, await keys(t))).toBe(true);
      expect((await t.inject('/api/game/builds')).json()).toEqual([]);
      expect((await t.inject('/api/game/builds/1/manifest')).statusCode).toBe(404);
      expect((await t.inject(`/api/game/chunks/${sha256Of('x')}`)).statusCode).toBe(404);
      expect((await storeTotals(t)).json()).toEqual({ chunks: 0, bytes: 0 });
    });

    it('stores chunks once, checked against their names, and says which are missing', async () => {
      const bytes = randomBytes(1000);
      const name = sha256Of(bytes);
      const other = sha256Of('never uploaded');
      const missing = await admin(t, 'POST', '/api/admin/game/chunks/missing', { chunks: [name, other, name] });
      expect(missing.json()).toEqual({ missing: [name, other] });

      const wrong = await putChunk(t, name, randomBytes(1000));
      expect(wrong.statusCode).toBe(400);
      expect(wrong.json().error).toContain(`not to the chunk's name ${name}`);
      expect(await t.app.ctx.storage.stat(chunkKey(name))).toBeNull();

      const put = await putChunk(t, name, bytes);
      expect(put.statusCode).toBe(201);
      expect(put.json()).toEqual({ sha256: name, size: 1000 });
      expect((await putChunk(t, name, bytes)).statusCode).toBe(200);
      // Wrong bytes for a stored chunk are refused too, and the stored one stays.
      expect((await putChunk(t, name, randomBytes(1000))).statusCode).toBe(400);
      expect((await t.app.ctx.storage.stat(chunkKey(name)))?.size).toBe(1000);
      const after = await admin(t, 'POST', '/api/admin/game/chunks/missing', { chunks: [name, other] });
      expect(after.json()).toEqual({ missing: [other] });

      expect((await putChunk(t, 'ABC', bytes)).statusCode).toBe(400);
      // Another content type (JSON, text), with a good or a bad name: a clear {error}, never a 500.
      for (const url of [name, 'not-a-sha256', sha256Of('json')].map((n) => `/api/admin/game/chunks/${n}`)) {
        for (const [type, payload] of [
          ['application/json', '{"bytes":"x"}'],
          ['application/json', '[1,2]'],
          ['text/plain', 'x'],
        ] as const) {
          const res = await t.inject({
            method: 'PUT',
            url,
            headers: { cookie: t.cookie, 'content-type': type },
            payload,
          });
          expect([400, 415], `${type} ${url}`).toContain(res.statusCode);
          expect(res.json().error, `${type} ${url}`).toEqual(expect.any(String));
        }
      }
      expect(await t.app.ctx.storage.stat(chunkKey(sha256Of('json')))).toBeNull();
      const tooBig = randomBytes(8 * 1024 * 1024 + 1);
      const big = await putChunk(t, sha256Of(tooBig), tooBig);
      expect(big.statusCode).toBe(413);
      expect(await t.app.ctx.storage.stat(chunkKey(sha256Of(tooBig)))).toBeNull();
      const many = Array.from({ length: 10_001 }, (_, i) => sha256Of(String(i)));
      expect((await admin(t, 'POST', '/api/admin/game/chunks/missing', { chunks: many })).statusCode).toBe(400);
      // Anonymous callers may neither ask nor store.
      const anonymous = await t.inject({
        method: 'POST',
        url: '/api/admin/game/chunks/missing',
        payload: { chunks: [] },
      });
      expect(anonymous.statusCode).toBe(401);
    });

    it('publishes a build: check-update, the list, the signed manifest and the chunks', async () => {
      const manifest = firstBuild();
      const created = await publishBuild(t, { version: '1.18.1', buildCode: 1 }, manifest, {
        changelogZh: '更新',
        changelogEn: 'Update',
      });
      expect(created.statusCode).toBe(201);
      const build = created.json();
      expect(build).toMatchObject({
        version: '1.18.1',
        buildCode: 1,
        fileCount: 4,
        totalSize: exe.length + mpq.length + 15,
        chunkCount: manifest.chunks.size,
        newBytes: exe.length + mpq.length + 15,
        manifestSha256: sha256Of(manifest.text),
        manifestSize: Buffer.byteLength(manifest.text),
        revokedAt: null,
      });
      const pinned = await keys(t);

      const check = await t.inject('/api/game/check-update?buildCode=0&lang=en');
      expect(check.statusCode).toBe(200);
      expect(verified(check, pinned)).toBe(true);
      const answer = check.json();
      expect(answer).toMatchObject({ hasUpdate: true, forceUpdate: false, downgrade: false, lang: 'en' });
      expect(answer.latest).toMatchObject({
        version: '1.18.1',
        buildCode: 1,
        changelog: 'Update',
        manifestUrl: expect.stringMatching(/^http:\/\/localhost(:80)?\/api\/game\/builds\/1\/manifest$/),
        manifestSha256: sha256Of(manifest.text),
        fileCount: 4,
        manifestSignature: null,
      });
      // Absent means 0; the same build is no update.
      expect((await t.inject('/api/game/check-update')).json().hasUpdate).toBe(true);
      expect((await t.inject('/api/game/check-update?buildCode=1')).json().hasUpdate).toBe(false);
      expect((await t.inject('/api/game/check-update?buildCode=x')).statusCode).toBe(400);

      const list = await t.inject('/api/game/builds?lang=zh');
      expect(verified(list, pinned)).toBe(true);
      expect(list.json()).toEqual([
        expect.objectContaining({ version: '1.18.1', buildCode: 1, changelog: '更新', fileCount: 4, revokedAt: null }),
      ]);

      const url = '/api/game/builds/1/manifest';
      const served = await t.inject(url);
      expect(served.statusCode).toBe(200);
      expect(served.rawPayload.toString('utf8')).toBe(manifest.text);
      expect(served.headers['content-type']).toMatch(/^application\/json/);
      expect(served.headers.etag).toBe(`"${sha256Of(manifest.text)}"`);
      expect(served.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      expect(verified(served, pinned)).toBe(true);
      const head = await t.inject({ method: 'HEAD', url });
      expect(head.headers['content-length']).toBe(String(Buffer.byteLength(manifest.text)));
      expect(head.headers.signature).toBeUndefined();
      const ranged = await t.inject({ url, headers: { range: 'bytes=5-9' } });
      expect(ranged.statusCode).toBe(206);
      expect(ranged.rawPayload.toString()).toBe(manifest.text.slice(5, 10));
      expect((await t.inject({ url, headers: { 'if-none-match': served.headers.etag as string } })).statusCode).toBe(
        304,
      );
      expect((await t.inject({ url, headers: { range: 'bytes=999999-' } })).statusCode).toBe(416);
      expect((await t.inject('/api/game/builds/2/manifest')).statusCode).toBe(404);
      expect((await t.inject('/api/game/builds/abc/manifest')).statusCode).toBe(404);
      // GET and the range from byte 5: one download; HEAD, 304 and 416 count nothing.
      const counted = (await admin(t, 'GET', '/api/admin/game/builds')).json();
      expect(counted[0].downloadCount).toBe(1);

      for (const [name, bytes] of manifest.chunks) {
        const headsBefore = storeHeads();
        const chunk = await t.inject(`/api/game/chunks/${name}`);
        if (chunk.statusCode === 302) {
          // The chunk's size is recorded: the redirect costs the store no HEAD.
          expect(storeHeads()).toBe(headsBefore);
          expect(chunk.headers.etag).toBe(`"${name}"`);
          // HEAD itself is answered by the service, which asks the store (the count sees it).
          const head = await t.inject({ method: 'HEAD', url: `/api/game/chunks/${name}` });
          expect(head.headers['content-length']).toBe(String(bytes.length));
          expect(storeHeads()).toBe(headsBefore + 1);
          const fetched = Buffer.from(await (await fetch(String(chunk.headers.location))).arrayBuffer());
          expect(fetched.equals(bytes)).toBe(true);
          continue;
        }
        expect(chunk.statusCode).toBe(200);
        expect(chunk.rawPayload.equals(bytes)).toBe(true);
        expect(chunk.headers.etag).toBe(`"${name}"`);
        expect(chunk.headers['cache-control']).toBe('public, max-age=31536000, immutable');
        expect(chunk.headers['content-type']).toBe('application/octet-stream');
        expect(chunk.headers.signature).toBeUndefined();
        const part = await t.inject({ url: `/api/game/chunks/${name}`, headers: { range: 'bytes=0-3' } });
        expect(part.statusCode).toBe(206);
        expect(part.rawPayload.equals(bytes.subarray(0, 4))).toBe(true);
      }
      expect((await t.inject('/api/game/chunks/not-a-hash')).statusCode).toBe(400);

      // The store-wide figures: every chunk once (the 1,000-byte one of the test before, not in a build, too).
      const totals = await storeTotals(t);
      expect(totals.statusCode).toBe(200);
      expect(totals.json()).toEqual({ chunks: manifest.chunks.size + 1, bytes: exe.length + mpq.length + 15 + 1000 });
      // Read by every role, as the builds are; not by anonymous callers.
      const account = await admin(t, 'POST', '/api/admin/users', {
        username: 'game-editor',
        password: 'game-editor-pass',
        role: 'editor',
      });
      expect(account.statusCode).toBe(201);
      const editor = await login(t.app, 'game-editor', 'game-editor-pass');
      expect((await storeTotals(t, editor)).json()).toEqual(totals.json());
      expect((await t.inject('/api/admin/game/store')).statusCode).toBe(401);
    });

    it('refuses a buildCode already used, replays an Idempotency-Key, and makes one build of concurrent publishes', async () => {
      const manifest = firstBuild();
      const again = await publishBuild(t, { version: '1.18.1', buildCode: 1 }, manifest);
      expect(again.statusCode).toBe(409);

      const second = firstBuild(2, '1.18.2');
      const headers = { 'idempotency-key': 'build-2' };
      const first = await publishBuild(t, { version: '1.18.2', buildCode: 2 }, second, {}, headers);
      expect(first.statusCode).toBe(201);
      // Nothing but the manifest's numbers changed: every chunk is shared with build 1.
      expect(first.json().newBytes).toBe(0);
      const replay = await publishBuild(t, { version: '1.18.2', buildCode: 2 }, second, {}, headers);
      expect(replay.statusCode).toBe(201);
      expect(replay.json()).toEqual(first.json());

      const third = firstBuild(3, '1.18.3');
      const answers = await Promise.all(
        [0, 1, 2].map(() => publishBuild(t, { version: '1.18.3', buildCode: 3 }, third)),
      );
      expect(answers.map((a) => a.statusCode).sort()).toEqual([201, 409, 409]);
      expect(await buildCount(t)).toBe(3);
    });

    it('refuses a bad build with 400 naming the fault, creating nothing', async () => {
      const before = await buildCount(t);
      const good = firstBuild(10, '2.0');
      const cases: [Record<string, unknown>, string][] = [
        [{ manifest: manifestOf({ version: '2.0', buildCode: 10 }, [{ path: '../x', content: mpq }]).text }, 'segment'],
        [{ manifest: manifestOf({ version: '2.0', buildCode: 10 }, [{ path: 'C:/x', content: mpq }]).text }, 'drive'],
        [
          { manifest: manifestOf({ version: '2.0', buildCode: 10 }, [{ path: 'a\\b', content: mpq }]).text },
          'forbidden',
        ],
        [
          { manifest: manifestOf({ version: '2.0', buildCode: 10 }, [{ path: 'AUX.dll', content: mpq }]).text },
          'reserves',
        ],
        [
          {
            manifest: manifestOf({ version: '2.0', buildCode: 10 }, [
              { path: 'a.mpq', content: mpq },
              { path: 'A.MPQ', content: mpq },
            ]).text,
          },
          'differ only in case',
        ],
        [
          {
            manifest: manifestOf({ version: '2.0', buildCode: 10 }, [
              { path: 'Data', content: mpq },
              { path: 'Data/x', content: mpq },
            ]).text,
          },
          'which is a file',
        ],
        [
          {
            manifest: manifestOf({ version: '2.0', buildCode: 10 }, [{ path: 'x', content: mpq }], {
              remove: ['WTF/*'],
            }).text,
          },
          'may not reach into the player folder "WTF/"',
        ],
        [{ manifest: good.text.replace('"size":300000', '"size":300001') }, 'chunks add up'],
        [
          {
            manifest: manifestOf({ version: '2.0', buildCode: 10 }, [
              { path: 'x', content: Buffer.from('unknown chunk') },
            ]).text,
          },
          'is not stored',
        ],
        [{ buildCode: 11 }, 'buildCode is 10'],
        [{ version: '2.1' }, 'version is "2.0"'],
        [
          { manifest: manifestOf({ app: 'other', version: '2.0', buildCode: 10 }, [{ path: 'x', content: mpq }]).text },
          'app is "other"',
        ],
        [{ manifestSignature: 'not a signature' }, 'body.manifestSignature'],
        [{ manifest: '{"format":1' }, 'not JSON'],
      ];
      for (const [change, message] of cases) {
        const res = await t.inject({
          method: 'POST',
          url: '/api/admin/game/builds',
          headers: { cookie: t.cookie },
          payload: { version: '2.0', buildCode: 10, manifest: good.text, ...change },
        });
        expect(res.statusCode, message).toBe(400);
        expect(res.json().error, message).toContain(message);
      }
      const files = Array.from({ length: 100_001 }, (_, i) => ({ path: `f/${i}`, content: Buffer.alloc(0) }));
      const huge = manifestOf({ version: '2.0', buildCode: 10 }, files);
      const tooMany = await t.inject({
        method: 'POST',
        url: '/api/admin/game/builds',
        headers: { cookie: t.cookie },
        payload: { version: '2.0', buildCode: 10, manifest: huge.text },
      });
      expect(tooMany.statusCode).toBe(400);
      expect(tooMany.json().error).toContain('100001 files');
      expect(await buildCount(t)).toBe(before);
    });

    it('schedules, revokes (downgrade, 410) and edits builds, with events and audit records', async () => {
      const soon = new Date(Date.now() + HOUR_MS).toISOString();
      const scheduled = await publishBuild(t, { version: '1.18.4', buildCode: 4 }, firstBuild(4, '1.18.4'), {
        publishAt: soon,
        forceUpdate: true,
      });
      expect(scheduled.statusCode).toBe(201);
      expect((await t.inject('/api/game/check-update?buildCode=3')).json().hasUpdate).toBe(false);
      expect((await t.inject('/api/game/builds/4/manifest')).statusCode).toBe(404);
      expect((await t.inject('/api/game/builds')).json().map((b: { buildCode: number }) => b.buildCode)).toEqual([
        3, 2, 1,
      ]);
      expect((await admin(t, 'GET', '/api/admin/game/builds')).json()[0]).toMatchObject({
        buildCode: 4,
        publishAt: soon,
      });

      // Published now: forced for every launcher below it.
      const edited = await admin(t, 'PUT', '/api/admin/game/builds/4', { publishAt: null, changelogEn: 'Forced' });
      expect(edited.statusCode).toBe(200);
      expect(edited.json()).toMatchObject({ publishAt: null, changelogEn: 'Forced', forceUpdate: true });
      expect((await t.inject('/api/game/check-update?buildCode=1')).json()).toMatchObject({
        hasUpdate: true,
        forceUpdate: true,
        latest: { buildCode: 4 },
      });

      const revoked = await admin(t, 'POST', '/api/admin/game/builds/4/revoke');
      expect(revoked.statusCode).toBe(200);
      expect(revoked.json().revokedAt).not.toBeNull();
      expect((await t.inject('/api/game/builds/4/manifest')).statusCode).toBe(410);
      // A launcher on the revoked build goes back to build 3, forced.
      expect((await t.inject('/api/game/check-update?buildCode=4')).json()).toMatchObject({
        hasUpdate: true,
        forceUpdate: true,
        downgrade: true,
        latest: { buildCode: 3 },
      });
      // Build 3 is the latest for the others; forceUpdate still counts the published build 4 above 2.
      expect((await t.inject('/api/game/check-update?buildCode=3')).json()).toMatchObject({
        hasUpdate: false,
        downgrade: false,
      });
      expect((await t.inject('/api/game/builds')).json()[0]).toMatchObject({ buildCode: 4 });
      expect((await admin(t, 'POST', '/api/admin/game/builds/4/unrevoke')).json().revokedAt).toBeNull();
      expect((await t.inject('/api/game/builds/4/manifest')).statusCode).toBe(200);
      expect((await admin(t, 'POST', '/api/admin/game/builds/99/revoke')).statusCode).toBe(404);

      const events = await t.database.db
        .selectFrom('webhookEvents')
        .select(['event', 'subjectId'])
        .where('event', 'like', 'game.%')
        .execute();
      expect(events).toEqual(
        expect.arrayContaining([
          { event: 'game.build.published', subjectId: '1' },
          { event: 'game.build.published', subjectId: '4' },
          { event: 'game.build.revoked', subjectId: '4' },
        ]),
      );
      const audit = await t.database.db.selectFrom('auditLog').select(['action', 'targetId']).execute();
      expect(audit).toEqual(
        expect.arrayContaining([
          { action: 'POST /api/admin/game/builds/:buildCode/revoke', targetId: '4' },
          { action: 'PUT /api/admin/game/builds/:buildCode', targetId: '4' },
          expect.objectContaining({ action: 'POST /api/admin/game/builds' }),
          expect.objectContaining({ action: 'PUT /api/admin/game/chunks/:sha256' }),
        ]),
      );
    });

    it('sweeps chunks no build names once untouched for the expiry, never one a build names', async () => {
      const db = t.database.db;
      const old = new Date(Date.now() - 48 * HOUR_MS).toISOString();
      const lone = randomBytes(500);
      const recent = randomBytes(500);
      const own = manifestOf({ version: '9', buildCode: 9 }, [{ path: 'only-in-9.bin', content: randomBytes(700) }]);
      expect((await publishBuild(t, { version: '9', buildCode: 9 }, own)).statusCode).toBe(201);
      const [ownName] = [...own.chunks.keys()];
      await putChunk(t, sha256Of(lone), lone);
      await putChunk(t, sha256Of(recent), recent);
      // Everything old but `recent`: named chunks stay however old they are.
      await db.updateTable('gameChunks').set({ touchedAt: old }).where('sha256', '!=', sha256Of(recent)).execute();

      const counts = await t.app.ctx.uploadSweep.run();
      expect(counts).not.toBeNull();
      const left = new Set((await db.selectFrom('gameChunks').select('sha256').execute()).map((r) => r.sha256));
      expect(left.has(sha256Of(lone))).toBe(false);
      expect(await t.app.ctx.storage.stat(chunkKey(sha256Of(lone)))).toBeNull();
      expect(left.has(sha256Of(recent))).toBe(true);
      expect(left.has(ownName!)).toBe(true);
      for (const name of firstBuild().chunks.keys()) {
        expect(left.has(name)).toBe(true);
        expect(await t.app.ctx.storage.stat(chunkKey(name))).not.toBeNull();
      }

      // Asking whether an old chunk is missing touches it: a build about to name it keeps it.
      await db.updateTable('gameChunks').set({ touchedAt: old }).where('sha256', '=', sha256Of(recent)).execute();
      await admin(t, 'POST', '/api/admin/game/chunks/missing', { chunks: [sha256Of(recent)] });
      await t.app.ctx.uploadSweep.run();
      expect(await t.app.ctx.storage.stat(chunkKey(sha256Of(recent)))).not.toBeNull();

      // A deleted build's own chunks go with a sweep once old (not before); the shared ones stay.
      await db
        .updateTable('gameChunks')
        .set({ touchedAt: new Date().toISOString() })
        .where('sha256', '=', ownName!)
        .execute();
      expect((await admin(t, 'DELETE', '/api/admin/game/builds/9')).statusCode).toBe(200);
      expect((await admin(t, 'DELETE', '/api/admin/game/builds/9')).statusCode).toBe(404);
      await t.app.ctx.uploadSweep.run();
      expect(await t.app.ctx.storage.stat(chunkKey(ownName!))).not.toBeNull();
      await db.updateTable('gameChunks').set({ touchedAt: old }).execute();
      await t.app.ctx.uploadSweep.run();
      expect(await t.app.ctx.storage.stat(chunkKey(ownName!))).toBeNull();
      expect(await t.app.ctx.storage.stat(chunkKey(sha256Of(recent)))).toBeNull();
      expect(await t.app.ctx.storage.stat(chunkKey([...firstBuild().chunks.keys()][0]!))).not.toBeNull();
    });

    it('never sweeps a chunk of a build created while the sweep runs', async () => {
      const db = t.database.db;
      const old = new Date(Date.now() - 48 * HOUR_MS).toISOString();
      const expiry = t.app.ctx.config.uploadExpiryHours * HOUR_MS;
      for (let round = 0; round < 4; round += 1) {
        const code = 50 + round;
        const manifest = manifestOf({ version: `r${round}`, buildCode: code }, [
          { path: 'race.bin', content: randomBytes(20_000), chunkBytes: 1000 },
        ]);
        for (const [name, bytes] of manifest.chunks) await putChunk(t, name, bytes);
        await db
          .updateTable('gameChunks')
          .set({ touchedAt: old })
          .where('sha256', 'in', [...manifest.chunks.keys()])
          .execute();
        const [created] = await Promise.all([
          t.inject({
            method: 'POST',
            url: '/api/admin/game/builds',
            headers: { cookie: t.cookie },
            payload: { version: `r${round}`, buildCode: code, manifest: manifest.text },
          }),
          t.app.ctx.gameChunks.sweep(new Date(Date.now() - expiry).toISOString()),
        ]);
        // Either the build came first (its chunks stay) or the sweep did (the build is refused).
        if (created.statusCode === 201) {
          const rows = await db
            .selectFrom('gameChunks')
            .select('sha256')
            .where('sha256', 'in', [...manifest.chunks.keys()])
            .execute();
          expect(rows.length).toBe(manifest.chunks.size);
          for (const name of manifest.chunks.keys())
            expect(await t.app.ctx.storage.stat(chunkKey(name))).not.toBeNull();
        } else {
          expect(created.statusCode).toBe(400);
          expect(created.json().error).toContain('is not stored');
        }
      }
    });

    it('counts the store in /metrics, and the chunk bytes it sends itself', async () => {
      const served = async () =>
        Number(/served_bytes_total\{kind="game"\} (\d+)/.exec((await t.inject('/metrics')).body)?.[1] ?? 0);
      const before = await served();
      const { sha256, size } = await t.database.db
        .selectFrom('gameChunks')
        .select(['sha256', 'size'])
        .executeTakeFirstOrThrow();
      const chunk = await t.inject(`/api/game/chunks/${sha256}`);
      // Sent by the service: counted; a presigned redirect sends none.
      expect(await served()).toBe(before + (chunk.statusCode === 200 ? Number(size) : 0));
      expect([200, 302]).toContain(chunk.statusCode);
      const text = (await t.inject('/metrics')).body;
      const chunks = await t.database.db.selectFrom('gameChunks').select('size').execute();
      expect(text).toContain(`game_store{figure="chunks"} ${chunks.length}`);
      expect(text).toContain(`game_store{figure="chunk_bytes"} ${chunks.reduce((n, c) => n + Number(c.size), 0)}`);
      expect(text).toContain(`game_store{figure="builds"} ${await buildCount(t)}`);
      expect(text).toMatch(/game_chunks_swept_total [1-9]/);
    });
  });
}

suite('game builds on a local folder', () => buildTestApp());

suite(
  'game builds on S3 with presigned downloads',
  async () => {
    s3 = await startS3();
    const config = loadConfig({
      DATA_DIR: '/nonexistent',
      ...s3.env('game', { S3_PRESIGN_DOWNLOADS: 'true' }),
    }).storage as S3StorageConfig;
    s3Storage = new S3Storage(config, { credentials: S3RVER_CREDENTIALS });
    return buildTestApp({}, { storage: s3Storage });
  },
  async () => {
    await s3Storage?.close();
    await s3?.close();
  },
);

describe('PUBLISHER_KEYS: a build needs the manifest signed for this app and build', () => {
  let t: TestApp;
  let dir: string;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-game-keys-'));
    const pair = await generateKeyPair('');
    fs.writeFileSync(path.join(dir, 'keys'), pair.publicKeyFile);
    t = await buildTestApp({ PUBLISHER_KEYS: path.join(dir, 'keys'), APP_NAME: 'acme' });
    Object.assign(t, { secret: await parseSecretKey(pair.secretKeyFile, '') });
  });
  afterAll(async () => {
    await t?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a missing or wrong signature and accepts the right one', async () => {
    const secret = (t as TestApp & { secret: Awaited<ReturnType<typeof parseSecretKey>> }).secret;
    const manifest = manifestOf({ app: 'acme', version: '1.0', buildCode: 7 }, [{ path: 'x.bin', content: mpq }]);
    const digest = await prehash([Buffer.from(manifest.text)]);
    const sign = (buildCode: number) =>
      signPrehash(secret, digest, gameTrustedComment({ app: 'acme', buildCode, sha256: sha256Of(manifest.text) }));
    const build = { version: '1.0', buildCode: 7 };
    const unsigned = await publishBuild(t, build, manifest);
    expect(unsigned.statusCode).toBe(400);
    expect(unsigned.json().error).toContain('body.manifestSignature: is required');
    const wrong = await publishBuild(t, build, manifest, { manifestSignature: sign(8) });
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json().error).toContain('buildCode=8');
    const right = await publishBuild(t, build, manifest, { manifestSignature: sign(7) });
    expect(right.statusCode).toBe(201);
    const check = (await t.inject('/api/game/check-update')).json();
    expect(check.latest.manifestSignature).toBe(right.json().manifestSignature);
  });
});

describe('game bodies that never end, and chunks offloaded to the proxy', () => {
  let t: TestApp;
  let port = 0;
  beforeAll(async () => {
    t = await buildTestApp({ BODY_TIMEOUT_MS: '1000', DOWNLOAD_OFFLOAD: 'x-accel-redirect' });
    port = Number(new URL(await t.app.server.listen({ host: '127.0.0.1', port: 0 })).port);
  });
  afterAll(() => t?.close());

  /** Sends headers and the first bytes of a body that never ends; resolves with what came back once closed (within 8 s). */
  function neverEnding(head: string, first: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write(head + first));
      let received = '';
      socket.on('data', (chunk) => (received += chunk.toString()));
      socket.on('close', () => resolve(received));
      socket.on('error', reject);
      setTimeout(() => reject(new Error('not cut off within 8 s')), 8000).unref();
    });
  }

  it('cuts off a chunk upload and a build whose body never ends, storing nothing', async () => {
    const bytes = randomBytes(10_000);
    const name = sha256Of(bytes);
    const chunk = await neverEnding(
      `PUT /api/admin/game/chunks/${name} HTTP/1.1\r\nHost: x\r\nCookie: ${t.cookie}\r\n` +
        'Content-Type: application/octet-stream\r\nContent-Length: 10000\r\n\r\n',
      bytes.subarray(0, 100).toString('latin1'),
    );
    // Cut off: the connection closes (with a 408 when it still can), nothing answered 2xx.
    expect(chunk).not.toMatch(/^HTTP\/1.1 2/);
    expect(await t.app.ctx.storage.stat(chunkKey(name))).toBeNull();
    expect(await t.database.db.selectFrom('gameChunks').select('sha256').execute()).toEqual([]);
    const build = await neverEnding(
      `POST /api/admin/game/builds HTTP/1.1\r\nHost: x\r\nCookie: ${t.cookie}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n',
      '{"version":"1",',
    );
    expect(build).not.toMatch(/^HTTP\/1.1 2/);
    expect(await buildCount(t)).toBe(0);
  }, 20_000);

  it('hands chunk bytes to the proxy (X-Accel-Redirect) with the immutable headers', async () => {
    const manifest = firstBuild();
    expect((await publishBuild(t, { version: '1.18.1', buildCode: 1 }, manifest)).statusCode).toBe(201);
    const [name] = [...manifest.chunks.keys()];
    const res = await t.inject(`/api/game/chunks/${name}`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-accel-redirect']).toBe(`/internal-uploads/${chunkKey(name!)}`);
    expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(res.headers.etag).toBe(`"${name}"`);
    // The manifest is signed, so the service sends it itself.
    const served = await t.inject('/api/game/builds/1/manifest');
    expect(served.headers['x-accel-redirect']).toBeUndefined();
    expect(served.rawPayload.toString()).toBe(manifest.text);
  });
});
