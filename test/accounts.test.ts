import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/index.js';
import { covers, tokenRole } from '../src/domain/roles.js';
import { totpCode } from '../src/modules/auth/totp.js';
import { admin, ADMIN, buildTestApp, login, multipartBody, sessionCookieOf, type TestApp } from './helpers/app.js';
import { createTestDatabase, databaseAt } from './helpers/db.js';
import { inOneWindow, MINUTE_MS } from './helpers/windows.js';

/*
 * Team accounts (issue 12): roles owner / publisher / editor, accounts managed by owners, API tokens
 * that never outrank their creator, and an optional TOTP second factor with recovery codes.
 */

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

async function createAccount(username: string, role: string, password = `${username}-password`) {
  const res = await admin(t, 'POST', '/api/admin/users', { username, password, role });
  expect(res.statusCode, res.body).toBe(201);
  return { ...res.json<{ id: string; role: string }>(), cookie: await login(t.app, username, password), password };
}

const as = (cookie: string, method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: object) =>
  t.inject({ method, url, headers: { cookie }, ...(payload !== undefined ? { payload } : {}) });

describe('roles', () => {
  it('the bootstrap administrator is an owner, and me says so, with the service APP_NAME (the login answer keeps the contract shape)', async () => {
    expect((await admin(t, 'GET', '/api/admin/me')).json()).toEqual({
      user: { id: expect.any(String), username: ADMIN.username, role: 'owner', totpEnabled: false },
      appName: 'app',
    });
    const res = await t.inject({ method: 'POST', url: '/api/admin/login', payload: ADMIN });
    expect(res.json()).toEqual({ ok: true, user: { id: expect.any(String), username: ADMIN.username } });
  });

  it('a publisher ships software and addons and uploads, but may not write content or manage accounts', async () => {
    const publisher = await createAccount('pub', 'publisher');
    expect((await as(publisher.cookie, 'POST', '/api/software', { slug: 'pub-pkg', name: '包' })).statusCode).toBe(201);
    expect(
      (await as(publisher.cookie, 'POST', '/api/addons', { slug: 'pub-addon', name: '插件', summary: '简介' }))
        .statusCode,
    ).toBe(201);
    const { payload, headers } = multipartBody('a.zip', 'zip');
    const uploadRes = await t.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { ...headers, cookie: publisher.cookie },
      payload,
    });
    expect(uploadRes.statusCode).toBe(201);
    for (const [url, body] of [
      ['/api/articles', { slug: 'nope', title: '标题' }],
      ['/api/banners', { imageUrl: '/a.png' }],
      ['/api/gallery', { imageUrl: '/a.png' }],
      ['/api/admin/users', { username: 'x', password: 'password', role: 'owner' }],
      ['/api/admin/signing-keys/rotate', {}],
    ] as const) {
      const res = await as(publisher.cookie, 'POST', url, body);
      expect(res.statusCode, url).toBe(403);
      expect(Object.keys(res.json())).toEqual(['error']);
    }
    // Reads of the admin API stay open to every role, except accounts.
    expect((await as(publisher.cookie, 'GET', '/api/admin/devices')).statusCode).toBe(200);
    expect((await as(publisher.cookie, 'GET', '/api/admin/users')).statusCode).toBe(403);
  });

  it('an editor writes articles, banners and gallery and uploads, but not software or addons', async () => {
    const editor = await createAccount('ed', 'editor');
    expect((await as(editor.cookie, 'POST', '/api/articles', { slug: 'ed-a', title: '标题' })).statusCode).toBe(201);
    expect((await as(editor.cookie, 'POST', '/api/banners', { imageUrl: '/a.png' })).statusCode).toBe(201);
    for (const [method, url] of [
      ['POST', '/api/software'],
      ['POST', '/api/addons'],
      ['PUT', '/api/releases/unknown'],
      ['DELETE', '/api/software/versions/unknown'],
    ] as const) {
      const res = await as(editor.cookie, method, url, method === 'DELETE' ? undefined : {});
      expect(res.statusCode, `${method} ${url}`).toBe(403);
    }
  });

  it('the rules themselves (table)', () => {
    expect(covers('owner', 'editor')).toBe(true);
    expect(covers('publisher', 'editor')).toBe(false);
    expect(covers('editor', 'editor')).toBe(true);
    expect(tokenRole('owner', 'publisher')).toBe('publisher');
    expect(tokenRole('editor', 'owner')).toBe('editor');
  });
});

describe('accounts (owner)', () => {
  it('creates, lists and validates accounts; usernames are unique', async () => {
    await createAccount('listed', 'editor');
    const list = (await admin(t, 'GET', '/api/admin/users')).json<Array<Record<string, unknown>>>();
    expect(list.find((u) => u.username === 'listed')).toEqual({
      id: expect.any(String),
      username: 'listed',
      role: 'editor',
      disabled: false,
      totpEnabled: false,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });
    expect(JSON.stringify(list)).not.toMatch(/password|secret|hash/i);
    const dup = await admin(t, 'POST', '/api/admin/users', {
      username: 'listed',
      password: 'password',
      role: 'editor',
    });
    expect(dup.statusCode).toBe(409);
    const bad = [
      [{ username: 'x', password: 'password', role: 'root' }, /^body\.role: /],
      [{ username: 'x', password: 'short', role: 'editor' }, /^body\.password: /],
      [{ username: 'has space', password: 'password', role: 'editor' }, /^body\.username: /],
      [{ password: 'password', role: 'editor' }, /^body\.username: is required/],
    ] as const;
    for (const [body, message] of bad) {
      const res = await admin(t, 'POST', '/api/admin/users', body);
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatch(message);
    }
    expect((await admin(t, 'PUT', '/api/admin/users/unknown', { role: 'editor' })).statusCode).toBe(404);
  });

  it('disabling ends sessions and tokens, and a disabled login looks like a wrong password', async () => {
    const user = await createAccount('leaver', 'publisher');
    const token = (await as(user.cookie, 'POST', '/api/admin/tokens', { name: 'ci' })).json<{ token: string }>().token;
    expect((await admin(t, 'PUT', `/api/admin/users/${user.id}`, { disabled: true })).json().disabled).toBe(true);
    expect((await as(user.cookie, 'GET', '/api/admin/me')).statusCode).toBe(401);
    const bearer = await t.inject({ url: '/api/admin/me', headers: { authorization: `Bearer ${token}` } });
    expect(bearer.statusCode).toBe(401);
    const disabledLogin = await t.inject({
      method: 'POST',
      url: '/api/admin/login',
      payload: { username: 'leaver', password: user.password },
    });
    const unknownLogin = await t.inject({
      method: 'POST',
      url: '/api/admin/login',
      payload: { username: 'nobody-at-all', password: user.password },
    });
    expect(disabledLogin.statusCode).toBe(401);
    expect(disabledLogin.body).toBe(unknownLogin.body);
    await admin(t, 'PUT', `/api/admin/users/${user.id}`, { disabled: false });
    expect((await t.inject({ url: '/api/admin/me', headers: { authorization: `Bearer ${token}` } })).statusCode).toBe(
      200,
    );
  });

  it('a password reset ends the sessions; the new password works', async () => {
    const user = await createAccount('forgetful', 'editor');
    await admin(t, 'PUT', `/api/admin/users/${user.id}`, { password: 'brand-new-password' });
    expect((await as(user.cookie, 'GET', '/api/admin/me')).statusCode).toBe(401);
    await login(t.app, 'forgetful', 'brand-new-password');
  });

  it('keeps at least one enabled owner', async () => {
    const me = (await admin(t, 'GET', '/api/admin/me')).json<{ user: { id: string } }>().user;
    const others = (await admin(t, 'GET', '/api/admin/users'))
      .json<Array<{ id: string; role: string; disabled: boolean }>>()
      .filter((u) => u.role === 'owner' && !u.disabled && u.id !== me.id);
    expect(others).toEqual([]);
    expect((await admin(t, 'PUT', `/api/admin/users/${me.id}`, { role: 'editor' })).statusCode).toBe(409);
    expect((await admin(t, 'PUT', `/api/admin/users/${me.id}`, { disabled: true })).statusCode).toBe(409);
    const second = await createAccount('second-owner', 'owner');
    const demoted = await as(second.cookie, 'PUT', `/api/admin/users/${second.id}`, { role: 'publisher' });
    expect(demoted.statusCode).toBe(200);
    expect((await as(second.cookie, 'GET', '/api/admin/users')).statusCode).toBe(403);
  });
});

describe('API tokens and roles', () => {
  it('a token acts with its role, never above its creator, even after the creator is demoted', async () => {
    const editor = await createAccount('tok-ed', 'editor');
    const refused = await as(editor.cookie, 'POST', '/api/admin/tokens', { name: 'x', role: 'publisher' });
    expect(refused.statusCode).toBe(403);
    const own = await as(editor.cookie, 'POST', '/api/admin/tokens', { name: 'mine' });
    expect(own.json().role).toBe('editor');

    const publisherToken = (await admin(t, 'POST', '/api/admin/tokens', { name: 'ci', role: 'publisher' })).json<{
      token: string;
      role: string;
    }>();
    expect(publisherToken.role).toBe('publisher');
    const bearer = (method: 'POST', url: string, payload: object, token: string) =>
      t.inject({ method, url, headers: { authorization: `Bearer ${token}` }, payload });
    expect(
      (await bearer('POST', '/api/software', { slug: 'tok-pkg', name: '包' }, publisherToken.token)).statusCode,
    ).toBe(201);
    expect(
      (await bearer('POST', '/api/articles', { slug: 'tok-a', title: '题' }, publisherToken.token)).statusCode,
    ).toBe(403);

    // An owner's token of an account later demoted to editor acts as an editor.
    const owner = await createAccount('tok-owner', 'owner');
    const ownerToken = (await as(owner.cookie, 'POST', '/api/admin/tokens', { name: 'all' })).json<{ token: string }>();
    await admin(t, 'PUT', `/api/admin/users/${owner.id}`, { role: 'editor' });
    expect((await bearer('POST', '/api/software', { slug: 'demoted', name: '包' }, ownerToken.token)).statusCode).toBe(
      403,
    );
    expect(
      (await bearer('POST', '/api/articles', { slug: 'demoted-a', title: '题' }, ownerToken.token)).statusCode,
    ).toBe(201);

    // Non-owners see and revoke only their own tokens.
    const seen = (await as(editor.cookie, 'GET', '/api/admin/tokens')).json<Array<{ name: string }>>();
    expect(seen.map((s) => s.name)).toEqual(['mine']);
    const ownerTokens = (await admin(t, 'GET', '/api/admin/tokens')).json<Array<{ id: string; name: string }>>();
    const ci = ownerTokens.find((x) => x.name === 'ci');
    expect(ci).toBeDefined();
    expect((await as(editor.cookie, 'DELETE', `/api/admin/tokens/${ci?.id}`)).statusCode).toBe(404);
  });
});

describe('TOTP second factor', () => {
  it('enrols, confirms, then asks for a code at login; codes and recovery codes are good once', async () => {
    const user = await createAccount('two-factor', 'publisher');
    const enrolment = (await as(user.cookie, 'POST', '/api/admin/totp/enroll')).json<{
      secret: string;
      otpauthUrl: string;
    }>();
    expect(enrolment.otpauthUrl).toMatch(/^otpauth:\/\/totp\/.*two-factor\?.*secret=[A-Z2-7]+/);
    const totpOfMe = async () => (await as(user.cookie, 'GET', '/api/admin/me')).json().user.totpEnabled;
    // Enrolled is not on: only a confirmed code turns it on.
    expect(await totpOfMe()).toBe(false);
    const wrong = await as(user.cookie, 'POST', '/api/admin/totp/confirm', { code: '000000' });
    // (1 in a million that 000000 is the current code.)
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json().error).toMatch(/^body\.code: /);
    const confirmCode = totpCode(enrolment.secret);
    const confirmed = await as(user.cookie, 'POST', '/api/admin/totp/confirm', { code: confirmCode });
    expect(confirmed.statusCode).toBe(200);
    const { recoveryCodes } = confirmed.json<{ recoveryCodes: string[] }>();
    expect(recoveryCodes).toHaveLength(10);
    expect(await totpOfMe()).toBe(true);
    expect((await as(user.cookie, 'POST', '/api/admin/totp/enroll')).statusCode).toBe(409);

    const attempt = (body: object) => t.inject({ method: 'POST', url: '/api/admin/login', payload: body });
    const noCode = await attempt({ username: 'two-factor', password: user.password });
    expect(noCode.statusCode).toBe(401);
    expect(noCode.json()).toEqual({ error: expect.any(String), totpRequired: true });
    // A wrong password says nothing about the second factor, as for an unknown account.
    const wrongPassword = await attempt({ username: 'two-factor', password: 'not-it' });
    const unknown = await attempt({ username: 'nobody', password: 'not-it' });
    expect(wrongPassword.body).toBe(unknown.body);
    expect(wrongPassword.json().totpRequired).toBeUndefined();

    // The code used to confirm was spent; the next time step's code is not valid yet or was not used.
    // The very code that confirmed (recomputing it could cross into the next 30 s step).
    const replay = await attempt({ username: 'two-factor', password: user.password, totp: confirmCode });
    expect(replay.statusCode).toBe(401);
    const next = totpCode(enrolment.secret, Date.now() + 30_000);
    const withCode = await attempt({ username: 'two-factor', password: user.password, totp: next });
    expect(withCode.statusCode, withCode.body).toBe(200);
    expect((await attempt({ username: 'two-factor', password: user.password, totp: next })).statusCode).toBe(401);

    const recovery = recoveryCodes[0] ?? '';
    expect((await attempt({ username: 'two-factor', password: user.password, totp: recovery })).statusCode).toBe(200);
    expect((await attempt({ username: 'two-factor', password: user.password, totp: recovery })).statusCode).toBe(401);

    const cookie = sessionCookieOf(
      await attempt({ username: 'two-factor', password: user.password, totp: recoveryCodes[1] }),
    );
    expect((await as(cookie, 'POST', '/api/admin/totp/disable', { password: 'wrong' })).statusCode).toBe(403);
    expect((await as(cookie, 'POST', '/api/admin/totp/disable', { password: user.password })).statusCode).toBe(200);
    expect((await attempt({ username: 'two-factor', password: user.password })).statusCode).toBe(200);
  });

  it('failed codes count toward the login rate limit', async () => {
    await inOneWindow(MINUTE_MS);
    const limited = await buildTestApp({ LOGIN_RATE_LIMIT: '5' });
    try {
      const cookie = limited.cookie;
      const secret = (
        await limited.inject({ method: 'POST', url: '/api/admin/totp/enroll', headers: { cookie } })
      ).json<{ secret: string }>().secret;
      await limited.inject({
        method: 'POST',
        url: '/api/admin/totp/confirm',
        headers: { cookie },
        payload: { code: totpCode(secret) },
      });
      const statuses: number[] = [];
      for (let i = 0; i < 7; i++) {
        const res = await limited.inject({
          method: 'POST',
          url: '/api/admin/login',
          payload: { ...ADMIN, totp: '000000' },
        });
        statuses.push(res.statusCode);
      }
      expect(statuses.slice(-2)).toEqual([429, 429]);
      // The initial login of the test app counted as well.
      expect(statuses.filter((s) => s === 401).length).toBe(4);
    } finally {
      await limited.close();
    }
  });
});

describe('migration', () => {
  it('makes the administrators of an existing installation owners', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-accounts-'));
    const database = await createTestDatabase(dir);
    try {
      const raw = await databaseAt(database, '002_catalogue');
      await sql`insert into users (id, username, password_hash, created_at, updated_at)
                values ('old', 'veteran', 'x', '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z')`.execute(raw);
      await raw.destroy();
      const handle = await openDatabase(database.config);
      const row = await handle.db
        .selectFrom('users')
        .select(['role', 'disabled'])
        .where('id', '=', 'old')
        .executeTakeFirst();
      expect(row).toEqual({ role: 'owner', disabled: 0 });
      await handle.close();
    } finally {
      await database.drop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
