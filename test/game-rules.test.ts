import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';
import { createTestDatabase, databaseAt, ENGINE, type TestDatabase } from './helpers/db.js';
import {
  type GameFile,
  manifestOf,
  publishBuild,
  putChunk,
  RULE_BREAKS,
  sha256Of,
  SPEC_EXAMPLE,
  SPEC_REMOVE,
} from './helpers/game.js';
import { loginCookie, type ServerProcess, startServer } from './helpers/process.js';

// Issue 51 at the service: a build that would take what is the player's is refused (400 naming the
// rule), a buildCode not above every build held is refused (409), race-safe; builds stored before
// the rules stay stored and listed, are named at start, marked for administrators, never offered.

const HOUR_MS = 3600_000;
const file = (filePath: string, content: string): GameFile => ({ path: filePath, content: Buffer.from(content) });

interface AdminBuild {
  buildCode: number;
  broken: string | null;
  createdAt: string;
}

describe('the manifest rules at the service', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t?.close());

  const builds = async () => (await admin(t, 'GET', '/api/admin/game/builds')).json<AdminBuild[]>();
  const publish = (buildCode: number, files: readonly GameFile[], body: Record<string, unknown> = {}) =>
    publishBuild(
      t,
      { version: `v${buildCode}`, buildCode },
      manifestOf({ version: `v${buildCode}`, buildCode }, files),
      body,
    );

  it.each(RULE_BREAKS)('refuses a build with $name: 400 naming the rule, nothing created', async (row) => {
    const manifest = manifestOf({ version: '1.0', buildCode: 10 }, row.files, row.extra);
    const res = await publishBuild(t, { version: '1.0', buildCode: 10 }, manifest);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error).toContain(`body.manifest: ${row.rule}`);
    expect(await builds()).toEqual([]);
  });

  it("takes the spec's example (a listed file matching a remove pattern); a buildCode must be above every build held (409)", async () => {
    const example = manifestOf({ version: '1.18.3', buildCode: 1183 }, SPEC_EXAMPLE, SPEC_REMOVE);
    const created = await publishBuild(t, { version: '1.18.3', buildCode: 1183 }, example);
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json().broken).toBeNull();
    expect((await t.inject('/api/game/builds/1183/manifest')).body).toBe(example.text);

    const higher = await publish(2018, [file('WoW.exe', 'build 2018')]);
    expect(higher.statusCode, higher.body).toBe(201);
    // Issue 51's row: 1190 after 2018 would be stored and never offered to anyone.
    const lower = await publish(1190, [file('WoW.exe', 'build 1190')]);
    expect(lower.statusCode).toBe(409);
    expect(lower.json()).toEqual({
      error:
        'buildCode 1190 is not above 2018, the highest build this service holds (published, scheduled or revoked): ' +
        'launchers only move up (to send them back, revoke the builds above)',
    });
    const used = await publish(2018, [file('WoW.exe', 'another 2018')]);
    expect(used.statusCode).toBe(409);
    expect(used.json().error).toBe('buildCode 2018 is already used');
    expect((await publish(1183, [file('WoW.exe', 'another 1183')])).json().error).toBe(
      'buildCode 1183 is already used',
    );

    // A scheduled build counts, and so does a revoked one.
    const soon = new Date(Date.now() + HOUR_MS).toISOString();
    expect((await publish(2100, [file('WoW.exe', 'build 2100')], { publishAt: soon })).statusCode).toBe(201);
    expect((await publish(2050, [file('WoW.exe', 'build 2050')])).json().error).toMatch(
      /^buildCode 2050 is not above 2100/,
    );
    expect((await admin(t, 'POST', '/api/admin/game/builds/2100/revoke')).statusCode).toBe(200);
    const belowRevoked = await publish(2060, [file('WoW.exe', 'build 2060')]);
    expect(belowRevoked.statusCode).toBe(409);
    expect(belowRevoked.json().error).toMatch(/^buildCode 2060 is not above 2100/);
    expect((await builds()).map((b) => b.buildCode)).toEqual([2100, 2018, 1183]);
    // Once the highest is deleted, the service no longer holds it.
    expect((await admin(t, 'DELETE', '/api/admin/game/builds/2100')).statusCode).toBe(200);
    expect((await publish(2060, [file('WoW.exe', 'build 2060')])).statusCode).toBe(201);
  });

  it('creations at once take turns: a lower buildCode is never stored after a higher one', async () => {
    // Ten creations at once, highest code first: each is either stored above every build created
    // before it, or refused with 409.
    const codes = Array.from({ length: 10 }, (_, i) => 3000 - i * 10);
    const manifests = codes.map((code) =>
      manifestOf({ version: `v${code}`, buildCode: code }, [file('WoW.exe', `${code}`)]),
    );
    for (const manifest of manifests) {
      for (const [name, bytes] of manifest.chunks) expect((await putChunk(t, name, bytes)).statusCode).toBe(201);
    }
    const answers = await Promise.all(
      codes.map((code, i) =>
        t.inject({
          method: 'POST',
          url: '/api/admin/game/builds',
          headers: { cookie: t.cookie },
          payload: { version: `v${code}`, buildCode: code, manifest: manifests[i]!.text },
        }),
      ),
    );
    for (const answer of answers) {
      expect([201, 409], answer.body).toContain(answer.statusCode);
      if (answer.statusCode === 409) expect(answer.json().error).toMatch(/is not above/);
    }
    const stored = (await builds()).filter((b) => b.buildCode >= codes.at(-1)!);
    expect(stored.length).toBe(answers.filter((a) => a.statusCode === 201).length);
    // Stored in turn: a build created after another has the higher code.
    const byTime = [...stored].sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    for (let i = 1; i < byTime.length; i += 1) {
      if (byTime[i]!.createdAt > byTime[i - 1]!.createdAt) {
        expect(byTime[i]!.buildCode).toBeGreaterThan(byTime[i - 1]!.buildCode);
      }
    }
  });

  it.runIf(ENGINE === 'postgres')(
    'PostgreSQL: a creation waits for the one under way, so the lower one held up is not overtaken',
    async () => {
      if (t.testDb.config.kind !== 'postgres') return;
      const low = manifestOf({ version: 'low', buildCode: 4010 }, [file('WoW.exe', 'low 4010')]);
      const high = manifestOf({ version: 'high', buildCode: 4020 }, [file('WoW.exe', 'high 4020')]);
      for (const manifest of [low, high]) {
        for (const [name, bytes] of manifest.chunks) await putChunk(t, name, bytes);
      }
      // Another session holds the low build's chunk row: its creation stops there, inside its transaction.
      const holder = new pg.Client({ connectionString: t.testDb.config.url });
      await holder.connect();
      const waiting = async () =>
        Number(
          (
            await holder.query<{ n: string }>(
              "select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
            )
          ).rows[0]?.n,
        );
      try {
        await holder.query('begin');
        await holder.query('select sha256 from game_chunks where sha256 = $1 for update', [[...low.chunks.keys()][0]]);
        const finished: string[] = [];
        const create = (name: string, version: string, buildCode: number, text: string) =>
          t
            .inject({
              method: 'POST',
              url: '/api/admin/game/builds',
              headers: { cookie: t.cookie },
              payload: { version, buildCode, manifest: text },
            })
            .then((answer) => {
              finished.push(name);
              return answer;
            });
        const lowAnswer = create('low', 'low', 4010, low.text);
        await expect.poll(waiting, { timeout: 10_000 }).toBe(1);
        const highAnswer = create('high', 'high', 4020, high.text);
        // The higher one waits for the lower one's turn to end (a second waiter), never finishing first.
        let state: number | string = 1;
        await expect
          .poll(async () => (state = finished.length > 0 ? `finished: ${finished.join()}` : await waiting()), {
            timeout: 10_000,
          })
          .not.toBe(1);
        expect(state).toBe(2);
        await holder.query('commit');
        expect((await lowAnswer).statusCode).toBe(201);
        expect((await highAnswer).statusCode).toBe(201);
        expect(finished).toEqual(['low', 'high']);
      } finally {
        await holder.end();
      }
    },
  );
});

describe('builds stored before the rules (an upgraded service)', () => {
  let dir: string;
  let database: TestDatabase;
  let server: ServerProcess;
  let cookie: string;

  /** Builds an older service accepted: two valid ones and three that break a player-safety rule. */
  const stored = [
    { code: 1, files: [file('WoW.exe', 'one')], forceUpdate: 0 },
    // Forced, but broken: it forces nothing.
    {
      code: 2,
      files: [file('WoW.exe', 'two'), file('WTF/Config.wtf', 'SET a "b"')],
      forceUpdate: 1,
      rule: 'files[1].policy: "WTF/Config.wtf" is in a player folder',
    },
    { code: 3, files: [file('WoW.exe', 'three'), file('Data/patch-3.mpq', 'p3')], forceUpdate: 0 },
    { code: 4, files: [], forceUpdate: 0, rule: 'files: a build lists at least one file' },
    {
      code: 5,
      files: [file('WoW.exe', 'five'), file('Data/x.mpq', 'x')],
      remove: ['Logs/*'],
      forceUpdate: 0,
      rule: 'remove[0]: "Logs/*" may not reach into the player folder "Logs/"',
    },
  ];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-game-broken-'));
    database = await createTestDatabase(dir);
    const raw = await databaseAt(database, '015_stored_file_names');
    for (const build of stored) {
      const { text } = manifestOf(
        { version: `1.18.${build.code}`, buildCode: build.code },
        build.files,
        build.remove ? { remove: build.remove } : {},
      );
      const at = new Date(Date.now() - HOUR_MS).toISOString();
      await sql`insert into game_builds (build_code, version, force_update, manifest, manifest_sha256, manifest_size,
                  total_size, file_count, chunk_count, new_bytes, created_at, updated_at)
                values (${build.code}, ${`1.18.${build.code}`}, ${build.forceUpdate}, ${text}, ${sha256Of(text)},
                  ${Buffer.byteLength(text)}, 0, ${build.files.length}, 0, 0, ${at}, ${at})`.execute(raw);
    }
    await raw.destroy();
    const env: Record<string, string> = { DATA_DIR: dir, ADMIN_PASSWORD: 'broken-pass-1', LOG_LEVEL: 'warn' };
    if (database.config.kind === 'postgres') env.DATABASE_URL = database.config.url;
    server = await startServer(env);
    cookie = await loginCookie(server.url, 'broken-pass-1');
  });
  afterAll(async () => {
    await server?.stop('SIGKILL');
    await database?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const get = async <T>(url: string, headers: Record<string, string> = {}) => {
    const res = await fetch(`${server.url}${url}`, { headers });
    expect(res.status, url).toBe(200);
    return (await res.json()) as T;
  };

  it('logs one warning per broken build at start, naming the build and the rule', async () => {
    await expect.poll(() => server.output().match(/never offered/g)?.length ?? 0).toBe(3);
    const warnings = server
      .output()
      .split('\n')
      .filter((line) => line.includes('never offered'))
      .map((line) => JSON.parse(line) as { level: number; msg: string });
    expect(warnings.map((w) => w.level)).toEqual([40, 40, 40]);
    for (const build of stored.filter((b) => b.rule !== undefined)) {
      const line = warnings.filter((w) => w.msg.includes(`(buildCode ${build.code})`));
      expect(line).toHaveLength(1);
      expect(line[0]!.msg).toContain(`game build 1.18.${build.code} (buildCode ${build.code})`);
      expect(line[0]!.msg).toContain(build.rule);
    }
  });

  it('keeps them stored and listed; the admin listing marks each with its rule', async () => {
    const listed = await get<AdminBuild[]>('/api/admin/game/builds', { cookie });
    expect(listed).toHaveLength(5);
    for (const build of stored) {
      const row = listed.find((b) => b.buildCode === build.code);
      if (build.rule === undefined) expect(row?.broken).toBeNull();
      else expect(row?.broken).toContain(build.rule);
    }
    const published = await get<{ buildCode: number }[]>('/api/game/builds');
    expect(published.map((b) => b.buildCode)).toEqual([5, 4, 3, 2, 1]);
    // Its manifest is still served: nothing about the stored build changed.
    expect((await fetch(`${server.url}/api/game/builds/4/manifest`)).status).toBe(200);
  });

  it('check-update offers the highest valid build instead, and hasUpdate, forceUpdate, downgrade follow from it', async () => {
    type Check = { hasUpdate: boolean; forceUpdate: boolean; downgrade: boolean; latest: { buildCode: number } | null };
    const check = (code: number) => get<Check>(`/api/game/check-update?buildCode=${code}`);
    // Build 2's forceUpdate forces nothing: it is not offered.
    expect(await check(0)).toMatchObject({
      hasUpdate: true,
      forceUpdate: false,
      downgrade: false,
      latest: { buildCode: 3 },
    });
    expect(await check(1)).toMatchObject({ hasUpdate: true, forceUpdate: false, latest: { buildCode: 3 } });
    // A launcher on a broken build is on a build code like any other: offered a valid one above it, never sent down.
    expect(await check(2)).toMatchObject({
      hasUpdate: true,
      forceUpdate: false,
      downgrade: false,
      latest: { buildCode: 3 },
    });
    expect(await check(3)).toMatchObject({ hasUpdate: false, latest: { buildCode: 3 } });
    expect(await check(5)).toMatchObject({
      hasUpdate: false,
      forceUpdate: false,
      downgrade: false,
      latest: { buildCode: 3 },
    });
  });

  it('a new build must be above the broken ones too (409), and once stored it is offered', async () => {
    const json = { cookie, 'content-type': 'application/json' };
    const post = (buildCode: number) => {
      const manifest = manifestOf({ version: `2.${buildCode}`, buildCode }, [file('WoW.exe', `new ${buildCode}`)]);
      return {
        manifest,
        send: () =>
          fetch(`${server.url}/api/admin/game/builds`, {
            method: 'POST',
            headers: json,
            body: JSON.stringify({ version: `2.${buildCode}`, buildCode, manifest: manifest.text, forceUpdate: true }),
          }),
      };
    };
    const six = post(6);
    for (const [name, bytes] of six.manifest.chunks) {
      const put = await fetch(`${server.url}/api/admin/game/chunks/${name}`, {
        method: 'PUT',
        headers: { cookie, 'content-type': 'application/octet-stream' },
        body: new Uint8Array(bytes),
      });
      expect(put.status).toBe(201);
    }
    const refused = await post(4).send();
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { error: string }).error).toBe('buildCode 4 is already used');
    const created = await six.send();
    expect(created.status, await created.clone().text()).toBe(201);
    expect(((await created.json()) as { broken: string | null }).broken).toBeNull();
    expect(await get(`/api/game/check-update?buildCode=5`)).toMatchObject({
      hasUpdate: true,
      forceUpdate: true,
      latest: { buildCode: 6 },
    });
  });
});
