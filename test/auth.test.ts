import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { LocalStorage } from '../src/storage/local.js';
import { ADMIN, buildTestApp, login, sessionCookieOf, type TestApp } from './helpers/app.js';
import { inOneWindow, MINUTE_MS } from './helpers/windows.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

const me = (headers: Record<string, string>) => t.inject({ url: '/api/admin/me', headers });

describe('administrator session', () => {
  it('logs in with a session cookie that is HttpOnly, SameSite=Lax, Path=/', async () => {
    const res = await t.inject({ method: 'POST', url: '/api/admin/login', payload: ADMIN });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ok: true, user: { id: expect.any(String), username: 'admin' } });
    const raw = String(res.headers['set-cookie']);
    expect(raw).toMatch(/^sid=/);
    expect(raw).toMatch(/HttpOnly/i);
    expect(raw).toMatch(/SameSite=Lax/i);
    expect(raw).toMatch(/Path=\//);
    expect(raw).not.toMatch(/Secure/i);
    const cookie = sessionCookieOf(res);
    expect((await me({ cookie })).json()).toEqual({
      user: { id: expect.any(String), username: 'admin', role: 'owner', totpEnabled: false },
      appName: 'app',
    });
  });

  it('marks the cookie Secure when the request came over HTTPS (through a trusted proxy)', async () => {
    const proxied = await buildTestApp({ TRUST_PROXY: '1' });
    try {
      const res = await proxied.inject({
        method: 'POST',
        url: '/api/admin/login',
        payload: ADMIN,
        headers: { 'x-forwarded-proto': 'https' },
      });
      expect(String(res.headers['set-cookie'])).toMatch(/Secure/);
    } finally {
      await proxied.close();
    }
  });

  it('refuses wrong credentials (401) and missing fields (400)', async () => {
    const wrong = await t.inject({
      method: 'POST',
      url: '/api/admin/login',
      payload: { username: 'admin', password: 'nope' },
    });
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json()).toEqual({ error: expect.any(String) });
    expect(wrong.headers['set-cookie']).toBeUndefined();
    const unknown = await t.inject({
      method: 'POST',
      url: '/api/admin/login',
      payload: { username: 'who', password: 'x' },
    });
    expect(unknown.statusCode).toBe(401);
    for (const payload of [{ username: 'admin' }, { password: 'x' }, {}]) {
      const res = await t.inject({ method: 'POST', url: '/api/admin/login', payload });
      expect(res.statusCode).toBe(400);
    }
  });

  it('stores only a hash of the session token', async () => {
    const cookie = await login(t.app, ADMIN.username, ADMIN.password);
    const token = cookie.slice('sid='.length);
    const rows = await t.database.db.selectFrom('sessions').select('tokenHash').execute();
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.some((r) => r.tokenHash === token || r.tokenHash.includes(token))).toBe(false);
  });

  it('revokes the session server-side on logout', async () => {
    const cookie = await login(t.app, ADMIN.username, ADMIN.password);
    const out = await t.inject({ method: 'POST', url: '/api/admin/logout', headers: { cookie } });
    expect(out.json()).toEqual({ ok: true });
    expect((await me({ cookie })).statusCode).toBe(401);
    expect((await t.inject({ method: 'POST', url: '/api/admin/logout' })).statusCode).toBe(200);
  });

  it('expires a session idle for more than 7 days, and keeps one used within 7 days', async () => {
    const idle = await login(t.app, ADMIN.username, ADMIN.password);
    const recent = await login(t.app, ADMIN.username, ADMIN.password);
    const { createHash } = await import('node:crypto');
    const hash = (cookie: string) => createHash('sha256').update(cookie.slice('sid='.length)).digest('hex');
    const setSeen = (cookie: string, daysAgo: number) =>
      t.database.db
        .updateTable('sessions')
        .set({ lastSeenAt: new Date(Date.now() - daysAgo * 86_400_000).toISOString() })
        .where('tokenHash', '=', hash(cookie))
        .execute();
    await setSeen(idle, 7.01);
    await setSeen(recent, 6.9);
    expect((await me({ cookie: idle })).statusCode).toBe(401);
    expect((await me({ cookie: recent })).statusCode).toBe(200);
    const refreshed = await t.database.db
      .selectFrom('sessions')
      .select('lastSeenAt')
      .where('tokenHash', '=', hash(recent))
      .executeTakeFirstOrThrow();
    expect(Date.now() - Date.parse(refreshed.lastSeenAt)).toBeLessThan(60_000);
  });

  it('survives a restart: a new app on the same database accepts the session', async () => {
    const cookie = await login(t.app, ADMIN.username, ADMIN.password);
    const config = loadConfig({ DATA_DIR: t.dir, ADMIN_PASSWORD: 'ignored-now' });
    const second = await buildApp({
      config: { ...config, database: t.testDb.config },
      database: t.database,
      storage: new LocalStorage(`${t.dir}/uploads`),
      logger: false,
    });
    try {
      const res = await second.server.inject({ url: '/api/admin/me', headers: { cookie } });
      expect(res.statusCode).toBe(200);
      // The bootstrap password is used only while there is no administrator.
      const old = await second.server.inject({
        method: 'POST',
        url: '/api/admin/login',
        payload: { username: 'admin', password: 'ignored-now' },
      });
      expect(old.statusCode).toBe(401);
    } finally {
      await second.close();
    }
  });
});

describe('POST /api/admin/change-password', () => {
  it('validates fields (400), refuses a wrong current password (403), changes it and revokes other sessions', async () => {
    const other = await buildTestApp();
    try {
      const mine = other.cookie;
      const elsewhere = await login(other.app, ADMIN.username, ADMIN.password);
      const token = (
        await other.inject({
          method: 'POST',
          url: '/api/admin/tokens',
          headers: { cookie: mine },
          payload: { name: 'ci' },
        })
      ).json().token;
      const change = (payload: object) =>
        other.inject({ method: 'POST', url: '/api/admin/change-password', headers: { cookie: mine }, payload });
      for (const payload of [
        {},
        { currentPassword: ADMIN.password },
        { newPassword: 'abcdef' },
        { currentPassword: ADMIN.password, newPassword: 'short' },
      ]) {
        const res = await change(payload);
        expect(res.statusCode, JSON.stringify(payload)).toBe(400);
        expect(res.json().error).toEqual(expect.any(String));
      }
      const wrong = await change({ currentPassword: 'not-it', newPassword: 'abcdefgh' });
      expect(wrong.statusCode).toBe(403);
      const ok = await change({ currentPassword: ADMIN.password, newPassword: '新的密码abc' });
      expect(ok.json()).toEqual({ ok: true });
      expect((await other.inject({ url: '/api/admin/me', headers: { cookie: mine } })).statusCode).toBe(200);
      expect((await other.inject({ url: '/api/admin/me', headers: { cookie: elsewhere } })).statusCode).toBe(401);
      expect(
        (await other.inject({ url: '/api/admin/me', headers: { authorization: `Bearer ${token}` } })).statusCode,
      ).toBe(200);
      const oldLogin = await other.inject({ method: 'POST', url: '/api/admin/login', payload: ADMIN });
      expect(oldLogin.statusCode).toBe(401);
      const newLogin = await other.inject({
        method: 'POST',
        url: '/api/admin/login',
        payload: { username: 'admin', password: '新的密码abc' },
      });
      expect(newLogin.statusCode).toBe(200);
    } finally {
      await other.close();
    }
  });

  it('answers 404 for a user that does not exist', async () => {
    await expect(t.app.ctx.auth.changePassword('no-such-user', 'a', 'abcdefg', null)).rejects.toMatchObject({
      status: 404,
    });
  });
});

describe('API tokens', () => {
  it('creates (shown once), lists without secrets, authenticates with Bearer, and revokes', async () => {
    const created = await t.inject({
      method: 'POST',
      url: '/api/admin/tokens',
      headers: { cookie: t.cookie },
      payload: { name: 'CI publish' },
    });
    expect(created.statusCode).toBe(201);
    const body = created.json();
    expect(body).toEqual({
      id: expect.any(String),
      name: 'CI publish',
      role: 'owner',
      token: expect.any(String),
      createdAt: expect.any(String),
      lastUsedAt: null,
    });
    const bearer = { authorization: `Bearer ${body.token}` };
    expect((await me(bearer)).json().user.username).toBe('admin');
    const publish = await t.inject({
      method: 'POST',
      url: '/api/software',
      headers: bearer,
      payload: { slug: 'by-token', name: '令牌' },
    });
    expect(publish.statusCode).toBe(201);
    const list = await t.inject({ url: '/api/admin/tokens', headers: bearer });
    expect(list.statusCode).toBe(200);
    expect(Array.isArray(list.json())).toBe(true);
    expect(list.body).not.toContain(body.token);
    expect(list.json().find((x: { id: string }) => x.id === body.id)).toMatchObject({
      name: 'CI publish',
      lastUsedAt: expect.any(String),
    });
    const stored = await t.database.db
      .selectFrom('apiTokens')
      .select('tokenHash')
      .where('id', '=', body.id)
      .executeTakeFirstOrThrow();
    expect(stored.tokenHash).not.toBe(body.token);
    expect(
      (await t.inject({ method: 'DELETE', url: `/api/admin/tokens/${body.id}`, headers: { cookie: t.cookie } })).json(),
    ).toEqual({ ok: true });
    expect((await me(bearer)).statusCode).toBe(401);
    expect(
      (await t.inject({ method: 'DELETE', url: `/api/admin/tokens/${body.id}`, headers: { cookie: t.cookie } }))
        .statusCode,
    ).toBe(404);
    expect(
      (
        await t.inject({
          method: 'POST',
          url: '/api/admin/tokens',
          headers: { cookie: t.cookie },
          payload: { name: '' },
        })
      ).statusCode,
    ).toBe(400);
  });

  it('refuses a malformed or unknown bearer token with 401', async () => {
    for (const authorization of ['Bearer', 'Bearer nope', 'Basic YWRtaW46eA==']) {
      expect((await me({ authorization })).statusCode).toBe(401);
    }
    expect((await me({})).json()).toEqual({ error: expect.any(String) });
  });
});

describe('login rate limit', () => {
  it('answers 429 {error} past LOGIN_RATE_LIMIT attempts a minute from one address', async () => {
    await inOneWindow(MINUTE_MS);
    const limited = await buildTestApp({ LOGIN_RATE_LIMIT: '3' });
    try {
      const attempt = () =>
        limited.inject({ method: 'POST', url: '/api/admin/login', payload: { username: 'admin', password: 'guess' } });
      // buildTestApp itself logged in once.
      expect((await attempt()).statusCode).toBe(401);
      expect((await attempt()).statusCode).toBe(401);
      const blocked = await attempt();
      expect(blocked.statusCode).toBe(429);
      expect(blocked.json()).toEqual({ error: expect.any(String) });
      expect((await limited.inject({ url: '/api/admin/me', headers: { cookie: limited.cookie } })).statusCode).toBe(
        200,
      );
    } finally {
      await limited.close();
    }
  });
});
