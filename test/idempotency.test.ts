import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../src/app.js';
import { storedKey } from '../src/modules/idempotency/plugin.js';
import { buildSecondApp, buildTestApp, createPackage, type TestApp } from './helpers/app.js';

/**
 * Idempotency-Key (draft-ietf-httpapi-idempotency-key-header) on version and release creation
 * (issue 38): the same key and body answer the first success again, another body 422, a request
 * still running with the key 409; kept in the database, so shared by every instance.
 */

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

const post = (app: App, url: string, key: string | null, payload: object) =>
  app.server.inject({
    method: 'POST',
    url,
    headers: { cookie: t.cookie, ...(key === null ? {} : { 'idempotency-key': key }) },
    payload,
  });

const versionsOf = (packageId: string) =>
  t.app.ctx.db.selectFrom('softwareVersions').select('id').where('packageId', '=', packageId).execute();

describe('Idempotency-Key on version creation', () => {
  const body = {
    version: '4.0.0',
    versionCode: 400,
    downloadType: 'url',
    externalUrl: 'https://cdn.example.test/4.zip',
  };

  it('same key and body: the first answer again (on another instance too), one version; another body: 422', async () => {
    const pkg = await createPackage(t, { slug: 'idem-one', name: 'Idem' });
    const url = `/api/software/${pkg.id}/versions`;
    const first = await post(t.app, url, '"ci-run-1"', body);
    expect(first.statusCode, first.body).toBe(201);
    const again = await post(t.app, url, '"ci-run-1"', body);
    expect(again.statusCode).toBe(201);
    expect(again.json()).toEqual(first.json());
    expect(again.headers['idempotent-replayed']).toBe('true');
    // A bare token is the same key as its sf-string form; another instance shares the keys.
    const elsewhere = await post(second, url, 'ci-run-1', body);
    expect(elsewhere.statusCode).toBe(201);
    expect(elsewhere.json()).toEqual(first.json());
    expect(await versionsOf(pkg.id)).toHaveLength(1);

    const other = await post(t.app, url, 'ci-run-1', { ...body, version: '4.0.1' });
    expect(other.statusCode).toBe(422);
    expect(other.json()).toEqual({ error: expect.stringContaining('Idempotency-Key') });
    expect(await versionsOf(pkg.id)).toHaveLength(1);
  });

  it('a request still running with the key: 409 with Retry-After, whatever the body; a refused request keeps no key', async () => {
    const pkg = await createPackage(t, { slug: 'idem-two', name: 'Idem' });
    const url = `/api/software/${pkg.id}/versions`;
    const userId = (await t.inject({ url: '/api/admin/me', headers: { cookie: t.cookie } })).json<{
      user: { id: string };
    }>().user.id;
    const key = storedKey(userId, '/api/software/:id/versions', 'running');
    const running = await post(t.app, url, 'running', body);
    expect(running.statusCode).toBe(201);
    // As if the first request were still being answered (by any instance).
    await t.app.ctx.db
      .updateTable('idempotencyKeys')
      .set({ statusCode: null, response: null })
      .where('key', '=', key)
      .execute();
    const busy = await post(second, url, 'running', body);
    expect(busy.statusCode).toBe(409);
    expect(busy.headers['retry-after']).toBe('1');
    expect(busy.json()).toEqual({ error: expect.stringContaining('still') });
    // Another body under a running key waits too: a concurrent run with its own upload learns the outcome.
    const busyOther = await post(second, url, 'running', { ...body, versionCode: 402 });
    expect(busyOther.statusCode).toBe(409);

    const refused = await post(t.app, `/api/software/${pkg.id}/versions`, 'bad', { ...body, versionCode: 'x' });
    expect(refused.statusCode).toBe(400);
    const fixed = await post(t.app, url, 'bad', { ...body, versionCode: 401 });
    expect(fixed.statusCode).toBe(201);
  });

  it('concurrent requests with one key make one version', async () => {
    const pkg = await createPackage(t, { slug: 'idem-three', name: 'Idem' });
    const url = `/api/software/${pkg.id}/versions`;
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post(i % 2 === 0 ? t.app : second, url, 'together', body)),
    );
    const created = answers.filter((a) => a.statusCode === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    expect(answers.every((a) => a.statusCode === 201 || a.statusCode === 409)).toBe(true);
    expect(new Set(created.map((a) => a.json<{ id: string }>().id)).size).toBe(1);
    expect(await versionsOf(pkg.id)).toHaveLength(1);
  });

  it('a malformed key is a 400; requests without a key are unchanged', async () => {
    const pkg = await createPackage(t, { slug: 'idem-four', name: 'Idem' });
    const url = `/api/software/${pkg.id}/versions`;
    const bad = await post(t.app, url, '""', body);
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ error: expect.stringContaining('Idempotency-Key') });
    expect((await post(t.app, url, null, body)).statusCode).toBe(201);
    expect((await post(t.app, url, null, { ...body, versionCode: 401 })).statusCode).toBe(201);
    expect(await versionsOf(pkg.id)).toHaveLength(2);
  });
});

describe('Idempotency-Key on release creation', () => {
  it('same key and body: one release, the first answer again; another body 422', async () => {
    const addon = await t.inject({
      method: 'POST',
      url: '/api/addons',
      headers: { cookie: t.cookie },
      payload: { slug: 'idem-addon', name: '插件', summary: '简介' },
    });
    const addonId = addon.json<{ id: string }>().id;
    const body = { addonId, version: '1.0', downloadType: 'url', externalUrl: 'https://cdn.example.test/a.zip' };
    const first = await post(t.app, '/api/releases', 'release-1', body);
    expect(first.statusCode, first.body).toBe(201);
    const again = await post(second, '/api/releases', 'release-1', body);
    expect(again.statusCode).toBe(201);
    expect(again.json()).toEqual(first.json());
    expect((await post(t.app, '/api/releases', 'release-1', { ...body, version: '1.1' })).statusCode).toBe(422);
    const rows = await t.app.ctx.db.selectFrom('releases').select('id').where('addonId', '=', addonId).execute();
    expect(rows).toHaveLength(1);
  });
});

describe('a versionCode is used once per package', () => {
  const body = (version: string) => ({
    version,
    versionCode: 700,
    downloadType: 'url',
    externalUrl: `https://cdn.example.test/${version}.zip`,
  });

  it('two concurrent creations with the same versionCode and different files (two instances, no key): one 201, one 409', async () => {
    const pkg = await createPackage(t, { slug: 'code-once', name: 'Code once' });
    const url = `/api/software/${pkg.id}/versions`;
    const answers = await Promise.all([post(t.app, url, null, body('7.0.0')), post(second, url, null, body('7.0.1'))]);
    expect(answers.map((res) => res.statusCode).sort()).toEqual([201, 409]);
    const refused = answers.find((res) => res.statusCode === 409);
    expect(refused?.json()).toEqual({
      error: expect.stringMatching(/versionCode 700 is already used in this package/),
    });
    expect(await versionsOf(pkg.id)).toHaveLength(1);

    // A replay of the first under its Idempotency-Key is not a reuse; another package may use the code.
    const keyed = await createPackage(t, { slug: 'code-once-keyed', name: 'Keyed' });
    const keyedUrl = `/api/software/${keyed.id}/versions`;
    expect((await post(t.app, keyedUrl, '"code-700"', body('7.0.0'))).statusCode).toBe(201);
    const replay = await post(second, keyedUrl, '"code-700"', body('7.0.0'));
    expect(replay.statusCode).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(await versionsOf(keyed.id)).toHaveLength(1);
  });

  it('an update to a versionCode another version holds: 409, nothing changed', async () => {
    const pkg = await createPackage(t, { slug: 'code-move', name: 'Code move' });
    const url = `/api/software/${pkg.id}/versions`;
    expect((await post(t.app, url, null, body('7.0.0'))).statusCode).toBe(201);
    const other = await post(t.app, url, null, { ...body('7.1.0'), versionCode: 710 });
    const id = other.json<{ id: string }>().id;
    const moved = await t.inject({
      method: 'PUT',
      url: `/api/software/versions/${id}`,
      headers: { cookie: t.cookie },
      payload: { versionCode: 700 },
    });
    expect(moved.statusCode).toBe(409);
    expect(moved.json()).toEqual({ error: expect.stringMatching(/versionCode 700 is already used/) });
    const kept = await t.inject({
      method: 'PUT',
      url: `/api/software/versions/${id}`,
      headers: { cookie: t.cookie },
      payload: { versionCode: 710, version: '7.1.1' },
    });
    expect(kept.statusCode).toBe(200);
  });
});
