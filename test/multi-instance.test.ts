import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SigningKey, verifyAnswer } from '../docs/examples/verify.js';
import { ADMIN, admin, buildTestApp, createPackage, createVersion, type TestApp } from './helpers/app.js';
import { createTestDatabase, ENGINE, type TestDatabase } from './helpers/db.js';
import { type ServerProcess, startServer } from './helpers/process.js';
import { startS3, type TestS3 } from './helpers/s3.js';

/** Rows flagged latest per package, read straight from the database. */
async function flaggedCount(t: TestApp, packageId: string): Promise<number> {
  const rows = await t.database.db
    .selectFrom('softwareVersions')
    .select('id')
    .where('packageId', '=', packageId)
    .where('isLatest', '=', 1)
    .execute();
  return rows.length;
}

describe('concurrent flag moves in one instance (connection pool)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t?.close());

  it('concurrent version creates all succeed and leave exactly one latest', async () => {
    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器' });
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
          version: `1.${i}`,
          versionCode: 100 + i,
          downloadType: 'url',
          externalUrl: `https://cdn.example.test/${i}.exe`,
        }),
      ),
    );
    expect(answers.map((r) => r.statusCode)).toEqual(answers.map(() => 201));
    expect(await flaggedCount(t, pkg.id)).toBe(1);
  });

  it('concurrent isLatest moves and deletes keep exactly one latest, with no spurious 409', async () => {
    const pkg = await createPackage(t, { slug: 'app-launcher-patch', name: '补丁' });
    const versions = [];
    for (let i = 0; i < 12; i++) {
      versions.push(
        await createVersion(t, pkg.id, {
          version: `2.${i}`,
          versionCode: 200 + i,
          downloadType: 'url',
          externalUrl: `https://cdn.example.test/p${i}.zip`,
        }),
      );
    }
    const moves = versions
      .slice(0, 8)
      .map((v) => admin(t, 'PUT', `/api/software/versions/${v.id}`, { isLatest: true }));
    const deletes = versions.slice(8).map((v) => admin(t, 'DELETE', `/api/software/versions/${v.id}`));
    const creates = [0, 1, 2].map((i) =>
      admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
        version: `3.${i}`,
        versionCode: 300 + i,
        downloadType: 'url',
        externalUrl: `https://cdn.example.test/q${i}.zip`,
      }),
    );
    const answers = await Promise.all([...moves, ...deletes, ...creates]);
    expect(answers.map((r) => r.statusCode).sort()).toEqual([...Array(12).fill(200), 201, 201, 201]);
    expect(await flaggedCount(t, pkg.id)).toBe(1);
  });

  it('deleting the latest twice at once: one 200, one 404, and the flag moves to the next', async () => {
    const pkg = await createPackage(t, { slug: 'twice', name: '两次' });
    const body = (code: number) => ({
      version: String(code),
      versionCode: code,
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/x',
    });
    await createVersion(t, pkg.id, body(1));
    await createVersion(t, pkg.id, body(2));
    const latest = await createVersion(t, pkg.id, body(3));
    const answers = await Promise.all([
      admin(t, 'DELETE', `/api/software/versions/${latest.id}`),
      admin(t, 'DELETE', `/api/software/versions/${latest.id}`),
    ]);
    expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 404]);
    expect(await flaggedCount(t, pkg.id)).toBe(1);
    const detail = (await t.inject({ url: `/api/software/${pkg.id}` })).json<{
      versions: { versionCode: number; isLatest: boolean }[];
    }>();
    expect(detail.versions.find((v) => v.isLatest)?.versionCode).toBe(2);
  });
});

const onPostgres = ENGINE === 'postgres' ? describe : describe.skip;

interface Answer {
  status: number;
  body: unknown;
  headers: Headers;
}

onPostgres('two service processes on one PostgreSQL database and one S3 store', () => {
  let dir: string;
  let database: TestDatabase;
  let s3: TestS3;
  let a: ServerProcess;
  let b: ServerProcess;
  let cookie: string;

  async function call(
    server: ServerProcess,
    method: string,
    url: string,
    options: { json?: unknown; auth?: string; body?: FormData; headers?: Record<string, string> } = {},
  ): Promise<Answer> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.auth?.startsWith('sid=')) headers.cookie = options.auth;
    else if (options.auth) headers.authorization = `Bearer ${options.auth}`;
    if (options.json !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${server.url}${url}`, {
      method,
      headers,
      body: options.json !== undefined ? JSON.stringify(options.json) : options.body,
      redirect: 'manual',
    });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // a file
    }
    return { status: res.status, body, headers: res.headers };
  }

  async function login(server: ServerProcess): Promise<string> {
    const res = await fetch(`${server.url}/api/admin/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(ADMIN),
    });
    expect(res.status).toBe(200);
    const sid = res.headers.getSetCookie().find((c) => c.startsWith('sid='));
    return (sid ?? '').split(';')[0] ?? '';
  }

  async function pollUntil<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await read();
      if (done(value) || Date.now() > deadline) return value;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-multi-'));
    database = await createTestDatabase(dir);
    if (database.config.kind !== 'postgres') throw new Error('expected a PostgreSQL test database');
    s3 = await startS3();
    const env = (name: string) => ({
      DATA_DIR: path.join(dir, name),
      DATABASE_URL: database.config.kind === 'postgres' ? database.config.url : '',
      ...s3.env('shared'),
      ADMIN_USERNAME: ADMIN.username,
      ADMIN_PASSWORD: ADMIN.password,
      CACHE_CHECK_MS: '1000',
      HEARTBEAT_FLUSH_MS: '200',
      LOGIN_RATE_LIMIT: '1000',
    });
    // Both start at once: migrations and the administrator bootstrap must cope with a twin.
    [a, b] = await Promise.all([startServer(env('a')), startServer(env('b'))]);
    cookie = await login(a);
  });

  afterAll(async () => {
    const codes = await Promise.all([a?.stop(), b?.stop()]);
    await s3?.close();
    await database?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
    // A graceful stop writes what it buffered and exits cleanly.
    expect(codes).toEqual([0, 0]);
  });

  it('sessions and API tokens made on one instance work on the other', async () => {
    expect((await call(b, 'GET', '/api/admin/me', { auth: cookie })).status).toBe(200);
    const otherSession = await login(b);
    expect((await call(a, 'GET', '/api/admin/me', { auth: otherSession })).status).toBe(200);

    const made = await call(b, 'POST', '/api/admin/tokens', { auth: otherSession, json: { name: 'ci' } });
    expect(made.status).toBe(201);
    const { id, token } = made.body as { id: string; token: string };
    expect((await call(a, 'GET', '/api/admin/me', { auth: token })).status).toBe(200);
    expect((await call(a, 'DELETE', `/api/admin/tokens/${id}`, { auth: cookie })).status).toBe(200);
    expect((await call(b, 'GET', '/api/admin/me', { auth: token })).status).toBe(401);

    expect((await call(a, 'POST', '/api/admin/logout', { auth: otherSession })).status).toBe(200);
    expect((await call(b, 'GET', '/api/admin/me', { auth: otherSession })).status).toBe(401);
  });

  it('a version published through one instance is answered by check-update on the other within 5 s', async () => {
    const form = new FormData();
    form.append('file', new Blob([Buffer.from('installer bytes '.repeat(64))]), 'setup.exe');
    const uploaded = await call(a, 'POST', '/api/upload', { auth: cookie, body: form });
    expect(uploaded.status).toBe(201);
    const { filePath } = uploaded.body as { filePath: string };

    const pkg = await call(a, 'POST', '/api/software', {
      auth: cookie,
      json: { slug: 'app-launcher', name: '启动器' },
    });
    expect(pkg.status).toBe(201);
    const packageId = (pkg.body as { id: string }).id;
    const v1 = await call(a, 'POST', `/api/software/${packageId}/versions`, {
      auth: cookie,
      json: { version: '1.0.0', versionCode: 100, filePath },
    });
    expect(v1.status).toBe(201);

    // B reads (and caches) version 1 first, so the test sees cache coherence, not a cold read.
    const check = () => call(b, 'GET', '/api/software/check-update?slug=app-launcher&versionCode=50');
    const code = (r: Answer) => (r.body as { latest?: { versionCode?: number } }).latest?.versionCode;
    expect(code(await pollUntil(check, (r) => code(r) === 100, 5000))).toBe(100);
    expect(code(await check())).toBe(100);

    const published = Date.now();
    const v2 = await call(a, 'POST', `/api/software/${packageId}/versions`, {
      auth: cookie,
      json: { version: '1.1.0', versionCode: 110, filePath, forceUpdate: true },
    });
    expect(v2.status).toBe(201);
    const seen = await pollUntil(check, (r) => code(r) === 110, 5000);
    expect(code(seen)).toBe(110);
    expect(Date.now() - published).toBeLessThan(5000);
    expect(seen.body).toMatchObject({ hasUpdate: true, forceUpdate: true });

    // The file uploaded through A is served by B from the shared store.
    const downloadUrl = (seen.body as { latest: { downloadUrl: string } }).latest.downloadUrl;
    const file = await call(b, 'GET', new URL(downloadUrl).pathname);
    expect(file.status).toBe(200);
    expect(file.body).toBe('installer bytes '.repeat(64));
  });

  it('200 concurrent counted downloads spread over both instances add exactly 200', async () => {
    const detail = await call(a, 'GET', '/api/software/app-launcher');
    const latest = (detail.body as { versions: { id: string; downloadCount: number; launcherDownloadCount: number }[] })
      .versions[0]!;
    const before = latest;
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        call(i % 2 === 0 ? a : b, 'GET', `/api/software/download/${latest.id}${i % 4 === 0 ? '?source=launcher' : ''}`),
      ),
    );
    expect(answers.filter((r) => r.status === 200)).toHaveLength(200);
    const after = (
      (await call(b, 'GET', '/api/software/app-launcher')).body as {
        versions: { downloadCount: number; launcherDownloadCount: number }[];
      }
    ).versions[0]!;
    expect(after.downloadCount - before.downloadCount).toBe(200);
    expect(after.launcherDownloadCount - before.launcherDownloadCount).toBe(50);
  });

  it('heartbeats through both instances show in the stats', async () => {
    const beats = [];
    for (let i = 0; i < 30; i++) {
      const body = { deviceId: `device-${i % 20}`, os: i % 2 === 0 ? 'windows' : 'macos', appVersion: '1.1.0' };
      beats.push(call(i % 2 === 0 ? a : b, 'POST', '/api/launcher/heartbeat', { json: body }));
    }
    expect((await Promise.all(beats)).map((r) => r.status)).toEqual(Array(30).fill(200));
    // Acknowledged heartbeats show within 2 s (the contract): each instance flushes its own buffer on
    // its own clock, so all 20 devices may be stored before the last beats of one instance are.
    const shown = Date.now() + 2000;
    const stats = () => call(a, 'GET', '/api/admin/devices/stats', { auth: cookie });
    const total = (r: Answer) => (r.body as { total?: number }).total;
    const seen = await pollUntil(stats, (r) => total(r) === 20, shown - Date.now());
    expect(seen.body).toMatchObject({ online: 20, total: 20 });
    type Device = { deviceId: string; heartbeatCount: number };
    const devices = () => call(b, 'GET', '/api/admin/devices?limit=100', { auth: cookie });
    const beatsOf = (r: Answer) => (r.body as Device[]).reduce((sum, d) => sum + d.heartbeatCount, 0);
    const onB = await pollUntil(devices, (r) => beatsOf(r) === 30, shown - Date.now());
    expect(onB.body).toHaveLength(20);
    expect(beatsOf(onB)).toBe(30);
  });

  it('a ramp, a halt and a revoke made on one instance are answered by the other within 5 s', async () => {
    const pkg = await call(a, 'POST', '/api/software', { auth: cookie, json: { slug: 'staged', name: '分阶段' } });
    const packageId = (pkg.body as { id: string }).id;
    const publish = (code: number, extra: object = {}) =>
      call(a, 'POST', `/api/software/${packageId}/versions`, {
        auth: cookie,
        json: {
          version: `${code}`,
          versionCode: code,
          downloadType: 'url',
          externalUrl: `https://x.test/${code}`,
          ...extra,
        },
      });
    await publish(1);
    const staged = ((await publish(2, { rolloutPercent: 0 })).body as { id: string }).id;
    const device = 'multi-device';
    const offered = async () => {
      const res = await call(b, 'GET', `/api/software/check-update?slug=staged&versionCode=1&deviceId=${device}`);
      return res.body as { latest: { versionCode: number }; downgrade: boolean };
    };
    expect((await offered()).latest.versionCode).toBe(1);

    const within5s = async (
      change: () => Promise<Answer>,
      done: (body: Awaited<ReturnType<typeof offered>>) => boolean,
    ) => {
      const started = Date.now();
      expect((await change()).status).toBe(200);
      const seen = await pollUntil(offered, done, 5000);
      expect(done(seen)).toBe(true);
      expect(Date.now() - started).toBeLessThan(5000);
    };
    const put = (json: object) => () => call(a, 'PUT', `/api/software/versions/${staged}`, { auth: cookie, json });
    await within5s(put({ rolloutPercent: 100 }), (body) => body.latest.versionCode === 2);
    await within5s(put({ rolloutPercent: 0 }), (body) => body.latest.versionCode === 1);
    await within5s(put({ rolloutPercent: 100 }), (body) => body.latest.versionCode === 2);
    const revoke = () => call(a, 'POST', `/api/software/versions/${staged}/revoke`, { auth: cookie });
    await within5s(revoke, (body) => body.latest.versionCode === 1);
    const onRevoked = await call(b, 'GET', `/api/software/check-update?slug=staged&versionCode=2&deviceId=${device}`);
    expect(onRevoked.body).toMatchObject({ hasUpdate: true, forceUpdate: true, downgrade: true });
  });

  it('a scheduled version appears on both instances within 1 s of its time', async () => {
    const pkg = await call(a, 'POST', '/api/software', { auth: cookie, json: { slug: 'scheduled', name: '定时' } });
    const packageId = (pkg.body as { id: string }).id;
    const body = (code: number, publishAt: string | null) => ({
      version: `${code}`,
      versionCode: code,
      downloadType: 'url',
      externalUrl: `https://x.test/s${code}`,
      publishAt,
    });
    await call(a, 'POST', `/api/software/${packageId}/versions`, { auth: cookie, json: body(1, null) });
    const time = Date.now() + 3000;
    await call(b, 'POST', `/api/software/${packageId}/versions`, {
      auth: cookie,
      json: body(2, new Date(time).toISOString()),
    });
    const code = async (server: ServerProcess) =>
      (
        (await call(server, 'GET', '/api/software/check-update?slug=scheduled')).body as {
          latest: { versionCode: number };
        }
      ).latest.versionCode;
    // Both instances read (and cache) the answer before the time.
    expect([await code(a), await code(b)]).toEqual([1, 1]);
    const seen = await Promise.all(
      [a, b].map(async (server) => {
        for (;;) {
          if ((await code(server)) === 2) return Date.now();
          if (Date.now() > time + 5000) return Infinity;
          await new Promise((r) => setTimeout(r, 20));
        }
      }),
    );
    for (const at of seen) {
      expect(at).toBeGreaterThanOrEqual(time);
      expect(at - time).toBeLessThan(1000);
    }
  });

  it("a signing key rotated on one instance signs the other instance's answers within 5 s", async () => {
    const rotated = await call(a, 'POST', '/api/admin/signing-keys/rotate', { auth: cookie });
    expect(rotated.status).toBe(201);
    const keyId = (rotated.body as { keyId: string }).keyId;
    const keyIds = (headers: Headers) =>
      [...(headers.get('signature-input') ?? '').matchAll(/(sig\d+)=[^,]*;keyid="([^"]+)"/g)].map((m) => m.slice(1));
    const signed = await pollUntil(
      () => call(b, 'GET', '/api/software/check-update?slug=scheduled'),
      (r) => keyIds(r.headers)[0]?.[1] === keyId,
      5000,
    );
    const listed = (await call(b, 'GET', '/api/signing-keys')).body as (SigningKey & { status: string })[];
    expect(keyIds(signed.headers)).toEqual(listed.map((k, i) => [`sig${i + 1}`, k.keyId]));
    // Both signatures verify, each with its own key, over the bytes as received.
    const url = new URL(`${b.url}/api/software/check-update?slug=scheduled&versionCode=0`);
    const res = await fetch(url);
    const body = new Uint8Array(await res.arrayBuffer());
    for (const key of listed) expect(verifyAnswer(body, res.headers, { url }, [key]), key.status).toBe(true);
  });

  it('publishing concurrently on both instances leaves one latest and no spurious 409', async () => {
    const pkg = await call(b, 'POST', '/api/software', {
      auth: cookie,
      json: { slug: 'app-launcher-patch', name: '补丁' },
    });
    const packageId = (pkg.body as { id: string }).id;
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(i % 2 === 0 ? a : b, 'POST', `/api/software/${packageId}/versions`, {
          auth: cookie,
          json: { version: `5.${i}`, versionCode: 500 + i, downloadType: 'url', externalUrl: `https://x.test/${i}` },
        }),
      ),
    );
    expect(answers.map((r) => r.status)).toEqual(Array(20).fill(201));
    const ids = answers.map((r) => (r.body as { id: string }).id);
    const moves = await Promise.all(
      ids.map((id, i) =>
        call(i % 2 === 0 ? b : a, 'PUT', `/api/software/versions/${id}`, { auth: cookie, json: { isLatest: true } }),
      ),
    );
    expect(moves.map((r) => r.status)).toEqual(Array(20).fill(200));

    const client = new pg.Client({ connectionString: database.config.kind === 'postgres' ? database.config.url : '' });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: string }>(
        'select count(*) as n from software_versions where package_id = $1 and is_latest = 1',
        [packageId],
      );
      expect(Number(rows[0]?.n)).toBe(1);
    } finally {
      await client.end();
    }
  });
});
