import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SigningKey } from '../docs/examples/verify.js';
import { admin, buildTestApp, type TestApp, upload } from './helpers/app.js';
import { digestHeaderOf, libraryVerifies, SIGNATURE_HEADERS, verified } from './helpers/signed.js';

let t: TestApp;

interface ReleaseFile {
  id: string;
  version: string;
  downloadUrl: string;
  sha256: string | null;
  fileSize: number;
}
interface Result {
  query: Record<string, string>;
  addon: { id: string; slug: string; name: string } | null;
  installed: ReleaseFile | null;
  updateAvailable: boolean;
  latest: ReleaseFile | null;
}

const files: { filePath: string; sha256: string }[] = [];
let addonId = '';
const releaseIds: string[] = [];

async function release(version: string, file: { filePath: string }, extra: Record<string, unknown> = {}) {
  const res = await admin(t, 'POST', '/api/releases', {
    addonId,
    version,
    downloadType: 'local',
    filePath: file.filePath,
    ...extra,
  });
  expect(res.statusCode, res.body).toBe(201);
  return res.json<{ id: string }>().id;
}

beforeAll(async () => {
  t = await buildTestApp({ PUBLIC_BASE_URL: 'https://addons.example.test' });
  const created = await admin(t, 'POST', '/api/addons', {
    slug: 'questie',
    name: '任务助手',
    nameEn: 'Questie',
    summary: '摘要',
  });
  addonId = created.json<{ id: string }>().id;
  for (const [i, content] of ['v1 bytes', 'v2 bytes', 'v3 bytes'].entries()) {
    files.push(await upload(t, `questie-${i}.zip`, content));
  }
  releaseIds.push(await release('1.0', files[0]!));
  releaseIds.push(await release('2.0', files[1]!));
  // Scheduled: invisible to addon managers until due.
  await release('3.0', files[2]!, { publishAt: new Date(Date.now() + 3_600_000).toISOString() });
  await admin(t, 'POST', '/api/addons', { slug: 'draft-addon', name: '草稿', summary: '摘要', published: false });
});
afterAll(() => t.close());

function check(installed: unknown[], query = '') {
  return t.inject({ method: 'POST', url: `/api/addons/updates${query}`, payload: { installed } });
}

describe('POST /api/addons/updates', () => {
  it('answers every entry in order: by slug and version, by file hash, unknown ones', async () => {
    const res = await check(
      [
        { slug: 'questie', version: '1.0' },
        { sha256: files[1]!.sha256 },
        { slug: 'questie', version: '0.9-local' },
        { slug: 'nope', version: '1' },
        { sha256: 'f'.repeat(64) },
        { sha256: files[2]!.sha256 },
        { slug: 'draft-addon', version: '1' },
      ],
      '?lang=en',
    );
    expect(res.statusCode).toBe(200);
    const { results } = res.json<{ results: Result[] }>();
    expect(results.map((r) => r.updateAvailable)).toEqual([true, false, true, false, false, false, false]);
    const [old, current, unknownVersion, unknownSlug, unknownHash, scheduled, draft] = results;
    expect(old?.query).toEqual({ slug: 'questie', version: '1.0' });
    expect(old?.addon).toMatchObject({ id: addonId, slug: 'questie', name: 'Questie' });
    expect(old?.installed).toMatchObject({ id: releaseIds[0], version: '1.0' });
    expect(old?.latest).toEqual({
      id: releaseIds[1],
      version: '2.0',
      downloadUrl: `https://addons.example.test/api/download/${releaseIds[1]}`,
      sha256: files[1]!.sha256,
      fileSize: 8,
      createdAt: expect.any(String),
      dependencies: [],
    });
    expect(current?.installed?.id).toBe(releaseIds[1]);
    expect(current?.latest?.id).toBe(releaseIds[1]);
    // A version the catalogue does not know counts as outdated.
    expect(unknownVersion).toMatchObject({ installed: null, latest: { id: releaseIds[1] } });
    for (const none of [unknownSlug, unknownHash, scheduled, draft]) {
      expect(none).toMatchObject({ addon: null, installed: null, latest: null });
    }
  });

  it('follows the latest flag: an installed release newer than the flagged one has no update', async () => {
    expect((await admin(t, 'PUT', `/api/releases/${releaseIds[0]}`, { isLatest: true })).statusCode).toBe(200);
    const { results } = (await check([{ slug: 'questie', version: '2.0' }, { sha256: files[0]!.sha256 }])).json<{
      results: Result[];
    }>();
    expect(results.map((r) => [r.updateAvailable, r.latest?.id])).toEqual([
      [false, releaseIds[0]],
      [false, releaseIds[0]],
    ]);
    expect((await admin(t, 'PUT', `/api/releases/${releaseIds[1]}`, { isLatest: true })).statusCode).toBe(200);
    const after = (await check([{ sha256: files[0]!.sha256 }])).json<{ results: Result[] }>();
    expect(after.results[0]).toMatchObject({ updateAvailable: true, latest: { id: releaseIds[1] } });
  });

  it('is signed like the other answers that say what to download, over the bytes as sent (compressed too)', async () => {
    const keys = (await t.inject('/api/signing-keys')).json<SigningKey[]>();
    const res = await check([{ slug: 'questie', version: '1.0' }]);
    expect(verified(res, keys)).toBe(true);
    expect(await libraryVerifies(res, keys[0]!)).toBe(true);
    const installed = Array.from({ length: 40 }, () => ({ slug: 'questie', version: '1.0' }));
    for (const encoding of ['br', 'gzip']) {
      const compressed = await t.inject({
        method: 'POST',
        url: '/api/addons/updates',
        headers: { 'accept-encoding': encoding },
        payload: { installed },
      });
      expect(compressed.headers['content-encoding']).toBe(encoding);
      expect(compressed.headers['content-digest']).toBe(digestHeaderOf(compressed.rawPayload));
      expect(verified(compressed, keys)).toBe(true);
      expect(await libraryVerifies(compressed, keys[0]!)).toBe(true);
    }
    const refused = await check([]);
    expect(refused.statusCode).toBe(400);
    for (const name of SIGNATURE_HEADERS) expect(refused.headers[name]).toBeUndefined();
  });

  it('validates the body: 1 to 500 entries, each a slug and version or a hash, naming the field', async () => {
    const many = Array.from({ length: 501 }, () => ({ slug: 'questie', version: '1.0' }));
    expect((await check(many.slice(0, 500))).statusCode).toBe(200);
    for (const bad of [many, [], [{ slug: 'questie' }], [{ sha256: 'xyz' }], [{ slug: '', version: '1' }], [5]]) {
      const res = await check(bad);
      expect(res.statusCode, JSON.stringify(bad).slice(0, 60)).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(/installed/);
    }
    const noBody = await t.inject({ method: 'POST', url: '/api/addons/updates', payload: {} });
    expect(noBody.statusCode).toBe(400);
  });
});

describe('GET /api/releases/by-hash/{sha256}', () => {
  it('identifies a published file (any case of hex), signed', async () => {
    const keys = (await t.inject('/api/signing-keys')).json<SigningKey[]>();
    const res = await t.inject(`/api/releases/by-hash/${files[0]!.sha256.toUpperCase()}`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      addon: { id: addonId, slug: 'questie' },
      release: { id: releaseIds[0], version: '1.0', sha256: files[0]!.sha256 },
    });
    expect(verified(res, keys)).toBe(true);
    expect(await libraryVerifies(res, keys[0]!)).toBe(true);
  });

  it('answers 404 for an unknown or scheduled file, 400 for a malformed hash', async () => {
    expect((await t.inject(`/api/releases/by-hash/${'0'.repeat(64)}`)).statusCode).toBe(404);
    expect((await t.inject(`/api/releases/by-hash/${files[2]!.sha256}`)).statusCode).toBe(404);
    const bad = await t.inject('/api/releases/by-hash/not-a-hash');
    expect(bad.statusCode).toBe(400);
    expect(bad.json<{ error: string }>().error).toMatch(/sha256/);
  });

  it('sees a new release after the write, without a restart', async () => {
    const file = await upload(t, 'questie-4.zip', 'v4 bytes');
    const id = await release('4.0', file);
    const res = await t.inject(`/api/releases/by-hash/${file.sha256}`);
    expect(res.json()).toMatchObject({ release: { id, version: '4.0' } });
    const { results } = (await check([{ slug: 'questie', version: '2.0' }])).json<{ results: Result[] }>();
    expect(results[0]).toMatchObject({ updateAvailable: true, latest: { id } });
  });
});

describe('POST /api/addons/updates with changelogs (opt-in)', () => {
  interface Changelog {
    version: string;
    changelog: string;
    createdAt: string;
  }
  type Asked = Result & { changelogs: Changelog[]; changelogsOmitted: number };
  const ids = new Map<string, string>();

  /** An addon with a release (url) per version, created in this order a few ms apart (newest last). */
  async function addonWith(slug: string, versions: readonly string[], changelog = (v: string) => `改动 ${v}`) {
    const made = await admin(t, 'POST', '/api/addons', { slug, name: slug, summary: '摘要' });
    expect(made.statusCode, made.body).toBe(201);
    for (const version of versions) {
      await new Promise((resolve) => setTimeout(resolve, 3));
      const res = await admin(t, 'POST', '/api/releases', {
        addonId: made.json<{ id: string }>().id,
        version,
        downloadType: 'url',
        externalUrl: `https://cdn.example.test/${slug}-${version}.zip`,
        changelogZh: changelog(version),
        changelogEn: version === '1.1' ? '' : `Changes ${version}`,
      });
      expect(res.statusCode, res.body).toBe(201);
      ids.set(`${slug}@${version}`, res.json<{ id: string }>().id);
    }
    return made.json<{ id: string }>().id;
  }

  const ask = async (installed: unknown[], extra: Record<string, unknown> = {}, query = '') => {
    const res = await t.inject({
      method: 'POST',
      url: `/api/addons/updates${query}`,
      payload: { installed, changelogs: true, ...extra },
    });
    expect(res.statusCode, res.body).toBe(200);
    return res.json<{ results: Asked[] }>().results;
  };
  const versionsOf = (result: Asked | undefined) => result?.changelogs.map((c) => c.version);

  beforeAll(async () => {
    await addonWith('changes', ['1.0', '1.1', '1.2', '1.3']);
    const at = new Date(Date.now() + 3_600_000).toISOString();
    const scheduled = await admin(t, 'POST', '/api/releases', {
      addonId: (await admin(t, 'GET', '/api/admin/addons/changes')).json<{ id: string }>().id,
      version: '2.0',
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/changes-2.0.zip',
      changelogZh: '未来',
      publishAt: at,
    });
    expect(scheduled.statusCode, scheduled.body).toBe(201);
  });

  it('not asked (absent or false): the answer is as before, byte for byte', async () => {
    const installed = [{ slug: 'changes', version: '1.0' }];
    const plain = await t.inject({ method: 'POST', url: '/api/addons/updates', payload: { installed } });
    const notAsked = await t.inject({
      method: 'POST',
      url: '/api/addons/updates',
      payload: { installed, changelogs: false },
    });
    expect(notAsked.rawPayload.equals(plain.rawPayload)).toBe(true);
    const [result] = plain.json<{ results: Record<string, unknown>[] }>().results;
    expect(Object.keys(result ?? {})).toEqual(['query', 'addon', 'installed', 'updateAvailable', 'latest']);
  });

  it('carries the releases above the installed one up to the latest, newest first, in the language asked', async () => {
    const [old, current, unknown, nope] = await ask(
      [
        { slug: 'changes', version: '1.0' },
        { slug: 'changes', version: '1.3' },
        { slug: 'changes', version: '0.9-local' },
        { slug: 'nope', version: '1' },
      ],
      { lang: 'en' },
    );
    // The scheduled 2.0 is not there (nor its changelog): the same rules as `latest`.
    expect(old?.latest?.version).toBe('1.3');
    expect(old?.changelogs).toEqual([
      { version: '1.3', changelog: 'Changes 1.3', createdAt: expect.any(String) },
      { version: '1.2', changelog: 'Changes 1.2', createdAt: expect.any(String) },
      // No English text: the Chinese one, as every localised field.
      { version: '1.1', changelog: '改动 1.1', createdAt: expect.any(String) },
    ]);
    expect(old?.changelogsOmitted).toBe(0);
    const detail = (await t.inject('/api/addons/changes')).json<{
      releases: { version: string; createdAt: string }[];
    }>();
    for (const entry of old?.changelogs ?? []) {
      expect(entry.createdAt).toBe(detail.releases.find((r) => r.version === entry.version)?.createdAt);
    }
    expect(current).toMatchObject({ updateAvailable: false, changelogs: [], changelogsOmitted: 0 });
    // An installed version the catalogue does not know: where it stood is unknown, only the latest's.
    expect(versionsOf(unknown)).toEqual(['1.3']);
    expect(nope).toMatchObject({ addon: null, changelogs: [], changelogsOmitted: 0 });
  });

  it("the body's lang wins over the query's, and the answer is signed over the request's digest", async () => {
    const keys = (await t.inject('/api/signing-keys')).json<SigningKey[]>();
    const body = Buffer.from(
      JSON.stringify({ installed: [{ slug: 'changes', version: '1.2' }], changelogs: true, lang: 'zh' }),
    );
    const res = await t.inject({
      method: 'POST',
      url: '/api/addons/updates?lang=en',
      headers: { 'content-type': 'application/json', 'content-digest': digestHeaderOf(body) },
      payload: body,
    });
    expect(res.headers['signature-input']).toContain('"content-digest";req');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json<{ results: Asked[] }>().results[0]?.changelogs).toEqual([
      { version: '1.3', changelog: '改动 1.3', createdAt: expect.any(String) },
    ]);
    expect(verified(res, keys)).toBe(true);
    expect(await libraryVerifies(res, keys[0]!)).toBe(true);
    const query = await ask([{ slug: 'changes', version: '1.2' }], {}, '?lang=en');
    expect(query[0]?.changelogs[0]?.changelog).toBe('Changes 1.3');
  });

  it('follows the latest flag: nothing above the flagged release', async () => {
    const flag = (version: string) =>
      admin(t, 'PUT', `/api/releases/${ids.get(`changes@${version}`)}`, { isLatest: true });
    expect((await flag('1.2')).statusCode).toBe(200);
    try {
      const [result] = await ask([{ slug: 'changes', version: '1.0' }]);
      expect(versionsOf(result)).toEqual(['1.2', '1.1']);
    } finally {
      expect((await flag('1.3')).statusCode).toBe(200);
    }
  });

  it('an unpublished addon has none', async () => {
    const hidden = await addonWith('hidden-changes', ['1.0', '1.1']);
    expect((await admin(t, 'PUT', `/api/addons/${hidden}`, { published: false })).statusCode).toBe(200);
    const [result] = await ask([{ slug: 'hidden-changes', version: '1.0' }]);
    expect(result).toMatchObject({ addon: null, changelogs: [], changelogsOmitted: 0 });
  });

  it('is bounded: 50 per addon, 1,000 entries and 1 MiB per answer; what is left out is counted', async () => {
    const many = Array.from({ length: 53 }, (_, i) => `5.${i}`);
    await addonWith('many-changes', many);
    const [capped] = await ask([{ slug: 'many-changes', version: '5.0' }]);
    expect(capped?.changelogs).toHaveLength(50);
    expect(versionsOf(capped)?.slice(0, 2)).toEqual(['5.52', '5.51']);
    expect(capped?.changelogsOmitted).toBe(2);

    // 500 entries of 50 each: the first 20 carry theirs, then none (entries bound).
    const results = await ask(Array.from({ length: 500 }, () => ({ slug: 'many-changes', version: '5.0' })));
    expect(results.slice(0, 20).every((r) => r.changelogs.length === 50)).toBe(true);
    expect(results.slice(20).every((r) => r.changelogs.length === 0 && r.changelogsOmitted === 52)).toBe(true);

    // Changelogs of 100,000 characters: ten fit in 1 MiB; the rest of the answer carries none.
    await addonWith('long-changes', ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12'], (v) =>
      v.padEnd(100_000, '.'),
    );
    const [long, after] = await ask([
      { slug: 'long-changes', version: '1' },
      { slug: 'changes', version: '1.0' },
    ]);
    expect(versionsOf(long)).toEqual(['12', '11', '10', '9', '8', '7', '6', '5', '4', '3']);
    expect(long?.changelogsOmitted).toBe(1);
    expect(after).toMatchObject({ updateAvailable: true, changelogs: [], changelogsOmitted: 3 });
  });

  it('validates changelogs and lang, naming the field', async () => {
    for (const [extra, field] of [
      [{ changelogs: 'yes' }, /changelogs/],
      [{ lang: 'fr' }, /lang/],
    ] as const) {
      const res = await t.inject({
        method: 'POST',
        url: '/api/addons/updates',
        payload: { installed: [{ slug: 'changes', version: '1.0' }], ...extra },
      });
      expect(res.statusCode).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(field);
    }
  });
});
