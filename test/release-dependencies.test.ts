import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';

let t: TestApp;
let addonId = '';

beforeAll(async () => {
  t = await buildTestApp();
  for (const slug of ['libstub', 'ace3', 'main-addon']) {
    const res = await admin(t, 'POST', '/api/addons', { slug, name: slug, summary: '摘要' });
    expect(res.statusCode).toBe(201);
    if (slug === 'main-addon') addonId = res.json<{ id: string }>().id;
  }
});
afterAll(() => t.close());

function createRelease(body: Record<string, unknown>) {
  return admin(t, 'POST', '/api/releases', {
    addonId,
    version: '1.0',
    downloadType: 'url',
    externalUrl: 'https://cdn.example.test/m.zip',
    ...body,
  });
}

describe('release dependencies', () => {
  it('stores required and optional addons with an optional minimum version, and every answer carries them', async () => {
    const res = await createRelease({
      dependencies: [{ slug: 'libstub' }, { slug: 'ace3', minVersion: '3.0', optional: true }],
    });
    expect(res.statusCode, res.body).toBe(201);
    const expected = [
      { slug: 'libstub', minVersion: null, optional: false },
      { slug: 'ace3', minVersion: '3.0', optional: true },
    ];
    const release = res.json<{ id: string; dependencies: unknown }>();
    expect(release.dependencies).toEqual(expected);
    const detail = (await t.inject('/api/addons/main-addon')).json<{ releases: { dependencies: unknown }[] }>();
    expect(detail.releases[0]?.dependencies).toEqual(expected);
    const listed = (await t.inject('/api/addons?search=main-addon')).json<
      { releases: { dependencies: unknown }[] }[]
    >();
    expect(listed[0]?.releases[0]?.dependencies).toEqual(expected);
    const releases = (await t.inject(`/api/releases?addonId=${addonId}`)).json<{ dependencies: unknown }[]>();
    expect(releases[0]?.dependencies).toEqual(expected);
    const updates = (
      await t.inject({
        method: 'POST',
        url: '/api/addons/updates',
        payload: { installed: [{ slug: 'main-addon', version: '0.9' }] },
      })
    ).json<{ results: { latest: { dependencies: unknown } }[] }>();
    expect(updates.results[0]?.latest.dependencies).toEqual(expected);

    // An update replaces the list; one without the field keeps it.
    const cleared = await admin(t, 'PUT', `/api/releases/${release.id}`, { dependencies: [] });
    expect(cleared.json<{ dependencies: unknown }>().dependencies).toEqual([]);
    await admin(t, 'PUT', `/api/releases/${release.id}`, { dependencies: [{ slug: 'ace3' }] });
    const kept = await admin(t, 'PUT', `/api/releases/${release.id}`, { changelog: '改动' });
    expect(kept.json<{ dependencies: unknown }>().dependencies).toEqual([
      { slug: 'ace3', minVersion: null, optional: false },
    ]);
  });

  it('shows an empty list for a release without dependencies', async () => {
    const res = await createRelease({ version: '1.1' });
    expect(res.json<{ dependencies: unknown }>().dependencies).toEqual([]);
  });

  it('refuses unknown addons, the addon itself, duplicates and malformed entries with 400 naming the field', async () => {
    for (const dependencies of [
      [{ slug: 'no-such-addon' }],
      [{ slug: 'main-addon' }],
      [{ slug: 'libstub' }, { slug: 'libstub', optional: true }],
      [{ slug: 'Bad Slug' }],
      [{ slug: 'libstub', minVersion: '' }],
      [{ slug: 'libstub', optional: 'yes' }],
      Array.from({ length: 51 }, (_, i) => ({ slug: `lib-${i}` })),
      'libstub',
    ]) {
      const res = await createRelease({ version: '9.9', dependencies });
      expect(res.statusCode, JSON.stringify(dependencies).slice(0, 80)).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(/dependencies/);
    }
    const releases = (await t.inject(`/api/releases?addonId=${addonId}`)).json<{ version: string }[]>();
    expect(releases.map((r) => r.version)).not.toContain('9.9');
  });
});
