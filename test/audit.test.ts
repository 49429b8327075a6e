import net from 'node:net';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditChanges, auditContextOpen, MAX_CHANGES_CHARS } from '../src/modules/audit/log.js';
import { newId } from '../src/domain/clock.js';
import { admin, ADMIN, buildTestApp, login, multipartBody, type TestApp } from './helpers/app.js';

/*
 * The audit log (issue 12): every administrator change, login, logout and failed login, with who,
 * from where, what and which fields (secrets never), written in the change's own transaction.
 */

interface AuditJson {
  id: string;
  at: string;
  actor: string;
  tokenName: string | null;
  ip: string;
  action: string;
  targetType: string;
  targetId: string | null;
  changes: Record<string, unknown>;
}

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

async function audit(query = ''): Promise<AuditJson[]> {
  const res = await admin(t, 'GET', `/api/admin/audit${query}`);
  expect(res.statusCode, res.body).toBe(200);
  return res.json<AuditJson[]>();
}

describe('audit log', () => {
  it('records a create with its new id, an update with its target, and the fields sent', async () => {
    const pkg = (await admin(t, 'POST', '/api/software', { slug: 'audited', name: '审计', nameEn: 'Audited' })).json<{
      id: string;
    }>();
    await admin(t, 'PUT', `/api/software/${pkg.id}`, { nameEn: 'Audited twice' });
    const [update, create] = await audit('?limit=2');
    expect(create).toMatchObject({
      actor: ADMIN.username,
      tokenName: null,
      ip: '127.0.0.1',
      action: 'POST /api/software',
      targetType: 'software',
      targetId: pkg.id,
      changes: { slug: 'audited', name: '审计', nameEn: 'Audited' },
    });
    expect(update).toMatchObject({
      action: 'PUT /api/software/:id',
      targetType: 'software',
      targetId: pkg.id,
      changes: { nameEn: 'Audited twice' },
    });
    expect(Date.parse(update?.at ?? '')).toBeGreaterThanOrEqual(Date.parse(create?.at ?? ''));
  });

  it('keeps each concurrent change in its own scope, and closes the context once none is in flight', async () => {
    const slugs = Array.from({ length: 12 }, (_, i) => `concurrent-${i}`);
    const created = await Promise.all(
      slugs.map(async (slug, i) => {
        // Reads without credentials run between the changes; they never open a scope.
        if (i % 3 === 0) await t.inject('/api/software/check-update?slug=none&versionCode=1');
        return (await admin(t, 'POST', '/api/software', { slug, name: slug })).json<{ id: string }>().id;
      }),
    );
    expect(auditContextOpen()).toBe(false);
    const records = await audit('?limit=12');
    expect(new Set(records.map((r) => r.targetId))).toEqual(new Set(created));
    for (const record of records) expect(slugs).toContain(record.changes.slug);
    // A change after the context was closed opens it again and is recorded.
    const again = (await admin(t, 'POST', '/api/software', { slug: 'after-close', name: 'x' })).json<{ id: string }>();
    expect((await audit('?limit=1'))[0]).toMatchObject({ targetId: again.id, changes: { slug: 'after-close' } });
    expect(auditContextOpen()).toBe(false);
  });

  it('closes the scope of a change whose client went away before its body arrived', async () => {
    await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    const address = t.app.server.server.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(
      `POST /api/software HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: ${t.cookie}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"slug":',
    );
    const until = async (open: boolean) => {
      for (let i = 0; i < 200 && auditContextOpen() !== open; i += 1) await new Promise((r) => setTimeout(r, 10));
      return auditContextOpen();
    };
    // Open while the body is awaited…
    expect(await until(true)).toBe(true);
    socket.destroy();
    // …and closed once the client is gone, with no answer ever sent.
    expect(await until(false)).toBe(false);
  });

  it('records logins, failed logins (under the name tried), logouts and token use; secrets never', async () => {
    const cookie = await login(t.app, ADMIN.username, ADMIN.password);
    await t.inject({
      method: 'POST',
      url: '/api/admin/login',
      payload: { username: 'intruder', password: 'guess-123' },
    });
    await t.inject({ method: 'POST', url: '/api/admin/logout', headers: { cookie } });
    const token = (await admin(t, 'POST', '/api/admin/tokens', { name: 'ci-bot' })).json<{ token: string }>().token;
    await t.inject({
      method: 'POST',
      url: '/api/banners',
      headers: { authorization: `Bearer ${token}` },
      payload: { imageUrl: '/uploads/2026-11/b.png' },
    });
    await admin(t, 'POST', '/api/admin/change-password', {
      currentPassword: ADMIN.password,
      newPassword: 'secret-new-password',
    });
    await admin(t, 'POST', '/api/admin/change-password', {
      currentPassword: 'secret-new-password',
      newPassword: ADMIN.password,
    });
    const records = await audit('?limit=20');
    const actions = records.map((r) => `${r.action} ${r.actor}`);
    expect(actions).toContain(`login ${ADMIN.username}`);
    expect(actions).toContain('login.failed intruder');
    expect(actions).toContain(`logout ${ADMIN.username}`);
    expect(records.find((r) => r.action === 'POST /api/banners')).toMatchObject({
      actor: ADMIN.username,
      tokenName: 'ci-bot',
    });
    expect(records.find((r) => r.action === 'POST /api/admin/change-password')?.changes).toEqual({
      currentPassword: '(secret)',
      newPassword: '(secret)',
    });
    const everything = JSON.stringify(await audit('?limit=500'));
    for (const secret of [ADMIN.password, 'secret-new-password', 'guess-123', token]) {
      expect(everything).not.toContain(secret);
    }
  });

  it('records uploads and account changes', async () => {
    const { payload, headers } = multipartBody('setup.exe', 'bytes');
    const uploaded = (
      await t.inject({ method: 'POST', url: '/api/upload', headers: { ...headers, cookie: t.cookie }, payload })
    ).json<{ filePath: string }>();
    const user = (
      await admin(t, 'POST', '/api/admin/users', { username: 'audited-editor', password: 'password-1', role: 'editor' })
    ).json<{ id: string }>();
    await admin(t, 'PUT', `/api/admin/users/${user.id}`, { role: 'publisher' });
    const [roleChange, created, upload] = await audit('?limit=3');
    expect(upload).toMatchObject({ action: 'POST /api/upload', targetType: 'files', targetId: uploaded.filePath });
    expect(created).toMatchObject({
      targetType: 'users',
      targetId: user.id,
      changes: { username: 'audited-editor', password: '(secret)', role: 'editor' },
    });
    expect(roleChange).toMatchObject({ targetId: user.id, changes: { role: 'publisher' } });
  });

  it('filters by actor and target, pages with before, and validates its query; owners only', async () => {
    const pkg = (await admin(t, 'POST', '/api/software', { slug: 'paged', name: '分页' })).json<{ id: string }>();
    await admin(t, 'PUT', `/api/software/${pkg.id}`, { nameEn: 'Paged' });
    const byTarget = await audit(`?target=${pkg.id}`);
    expect(byTarget.map((r) => r.action)).toEqual(['PUT /api/software/:id', 'POST /api/software']);
    expect((await audit('?actor=intruder')).every((r) => r.actor === 'intruder')).toBe(true);
    const first = await audit('?limit=1');
    const older = await audit(`?before=${encodeURIComponent(first[0]?.at ?? '')}&limit=1`);
    expect(older[0]?.at.localeCompare(first[0]?.at ?? '')).toBeLessThan(0);
    for (const query of ['?limit=0', '?limit=501', '?limit=x', '?before=yesterday']) {
      const res = await admin(t, 'GET', `/api/admin/audit${query}`);
      expect(res.statusCode, query).toBe(400);
    }
    const editor = await login(t.app, 'audited-editor', 'password-1');
    expect((await t.inject({ url: '/api/admin/audit', headers: { cookie: editor } })).statusCode).toBe(403);
  });

  it('keeps only the fields the route declares: nothing of a bodyless route, no undeclared field', async () => {
    const token = (await admin(t, 'POST', '/api/admin/tokens', { name: 'kept', note: 'not declared' })).json<{
      token: string;
    }>().token;
    expect((await audit('?limit=1'))[0]).toMatchObject({ action: 'POST /api/admin/tokens', changes: { name: 'kept' } });
    expect(Object.keys((await audit('?limit=1'))[0]?.changes ?? {})).toEqual(['name']);
    const rotated = await t.inject({
      method: 'POST',
      url: '/api/admin/signing-keys/rotate',
      headers: { authorization: `Bearer ${token}` },
      payload: { a: [[['sent to a route without a body']]], password: 'never kept' },
    });
    expect(rotated.statusCode, rotated.body).toBe(201);
    expect((await audit('?limit=1'))[0]).toMatchObject({
      action: 'POST /api/admin/signing-keys/rotate',
      tokenName: 'kept',
      changes: {},
    });
  });

  it(`bounds a record's fields to ${MAX_CHANGES_CHARS} characters of JSON, marking what did not fit`, () => {
    const declared = { small: {}, big: {}, after: {}, password: {} };
    const body = { small: 1, big: Array.from({ length: 5000 }, (_, i) => i), after: 'kept', password: 'p', extra: 2 };
    const json = auditChanges(body, declared);
    expect(json.length).toBeLessThanOrEqual(MAX_CHANGES_CHARS);
    expect(JSON.parse(json)).toEqual({ small: 1, big: { truncated: true }, after: 'kept', password: '(secret)' });
    // Values that fit are kept whole, up to the bound itself.
    const fits = { big: 'x'.repeat(150), list: Array.from({ length: 2000 }, () => 1) };
    const exact = auditChanges(fits, { big: {}, list: {} });
    expect(JSON.parse(exact)).toEqual(fits);
    // Many large values: each kept while the record fits, the rest marked; never past the bound.
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`f${i}`, 'y'.repeat(1000).split('')]));
    const bounded = auditChanges(many, Object.fromEntries(Object.keys(many).map((k) => [k, {}])));
    expect(bounded.length).toBeLessThanOrEqual(MAX_CHANGES_CHARS);
    const parsed = JSON.parse(bounded) as Record<string, unknown>;
    expect(Object.keys(parsed)).toEqual(Object.keys(many));
    expect(Object.values(parsed).filter((v) => Array.isArray(v)).length).toBe(3);
    // Should even the names not fit, the record is the marker alone.
    const names = Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`field-${i}`, 1]));
    expect(auditChanges(names, names)).toBe('{"truncated":true}');
  });

  it('pages exactly with its cursor: records sharing a millisecond across page boundaries come once each', async () => {
    const at = '2020-01-01T00:00:00.000Z';
    const rows = Array.from({ length: 23 }, () => ({
      id: newId(),
      at,
      actor: 'same-millisecond',
      tokenName: null,
      ip: '127.0.0.1',
      action: 'POST /api/banners',
      targetType: 'banners',
      targetId: null,
      changes: '{}',
    }));
    // One older record, so the last page ends after the millisecond.
    rows.push({ ...rows[0]!, id: newId(), at: '2019-12-31T23:59:59.999Z' });
    await t.database.db.insertInto('auditLog').values(rows).execute();
    const seen: string[] = [];
    let url: string | null = '/api/admin/audit?actor=same-millisecond&limit=5';
    let pages = 0;
    while (url !== null) {
      const res = await admin(t, 'GET', url);
      expect(res.statusCode, res.body).toBe(200);
      const page = res.json<AuditJson[]>();
      expect(page.length).toBeLessThanOrEqual(5);
      seen.push(...page.map((r) => r.id));
      const link = res.headers.link;
      pages += 1;
      if (typeof link !== 'string') {
        url = null;
      } else {
        const next = new URL(/^<([^>]+)>; rel="next"$/.exec(link)?.[1] ?? '');
        expect(next.searchParams.get('actor')).toBe('same-millisecond');
        url = `${next.pathname}${next.search}`;
      }
    }
    expect(pages).toBe(5);
    expect(seen).toEqual(
      rows
        .slice()
        .sort((a, b) => b.at.localeCompare(a.at) || (a.id < b.id ? 1 : -1))
        .map((r) => r.id),
    );
    // A full last page with nothing after it has no link.
    const whole = await admin(t, 'GET', '/api/admin/audit?actor=same-millisecond&limit=24');
    expect(whole.headers.link).toBeUndefined();
    // `before` keeps paging by time, as documented.
    expect((await audit(`?actor=same-millisecond&before=${encodeURIComponent(at)}`)).map((r) => r.at)).toEqual([
      '2019-12-31T23:59:59.999Z',
    ]);
  });

  it('refuses a cursor it did not give, or one given for other filters, with 400 {error}', async () => {
    const first = await admin(t, 'GET', '/api/admin/audit?limit=1');
    const cursor = new URL(/^<([^>]+)>/.exec(String(first.headers.link))?.[1] ?? '').searchParams.get('cursor') ?? '';
    expect(cursor).not.toBe('');
    expect((await admin(t, 'GET', `/api/admin/audit?cursor=${encodeURIComponent(cursor)}`)).statusCode).toBe(200);
    const changed = `${cursor.slice(0, 5)}${cursor[5] === 'A' ? 'B' : 'A'}${cursor.slice(6)}`;
    for (const query of [
      'cursor=not-a-cursor',
      'cursor=',
      `cursor=${encodeURIComponent(changed)}`,
      `cursor=${encodeURIComponent(`${cursor}.x`)}`,
      `cursor=${encodeURIComponent(cursor)}&actor=someone`,
    ]) {
      const res = await admin(t, 'GET', `/api/admin/audit?${query}`);
      expect(res.statusCode, query).toBe(400);
      expect(Object.keys(res.json()), query).toEqual(['error']);
    }
  });

  it('writes each record in the change’s transaction: a change that cannot be recorded does not happen', async () => {
    const before = (await t.inject('/api/banners')).json<unknown[]>().length;
    await sql`alter table audit_log rename to audit_log_away`.execute(t.database.db);
    try {
      const res = await admin(t, 'POST', '/api/banners', { imageUrl: '/uploads/2026-11/lost.png' });
      expect(res.statusCode).toBe(500);
    } finally {
      await sql`alter table audit_log_away rename to audit_log`.execute(t.database.db);
    }
    expect((await t.inject('/api/banners')).json<unknown[]>().length).toBe(before);
    // A change that fails leaves no record either.
    const count = (await audit('?limit=500')).length;
    expect((await admin(t, 'POST', '/api/software', { slug: 'audited', name: '重复' })).statusCode).toBe(409);
    expect((await audit('?limit=500')).length).toBe(count);
  });
});
