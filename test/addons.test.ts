import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp, upload } from './helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

interface AddonJson {
  id: string;
  slug: string;
  name: string;
  nameZh: string;
  nameEn: string;
  summary: string;
  description: string;
  category: string;
  published: boolean;
  totalDownloads: number;
  iconUrl: string | null;
  updatedAt: string;
  releases: ReleaseJson[];
  screenshots: { id: string; imageUrl: string; sortOrder: number }[];
  _count: { releases: number };
  lang: string;
}

interface ReleaseJson {
  id: string;
  addonId: string;
  version: string;
  changelog: string;
  isLatest: boolean;
  downloadCount: number;
  fileSize: number;
  sha256: string | null;
  externalUrl: string | null;
  wowVersion: string;
  createdAt: string;
  addon?: { id: string; slug: string; name: string };
  lang?: string;
}

let seq = 0;
const uniq = (prefix: string) => `${prefix}-${++seq}`;

async function createAddon(body: Record<string, unknown>): Promise<AddonJson> {
  const res = await admin(t, 'POST', '/api/addons', {
    slug: uniq('addon'),
    name: '插件',
    summary: '简介',
    ...body,
  });
  if (res.statusCode !== 201) throw new Error(`create addon ${res.statusCode}: ${res.body}`);
  return res.json();
}

async function createRelease(addonId: string, body: Record<string, unknown> = {}): Promise<ReleaseJson> {
  const res = await admin(t, 'POST', '/api/releases', {
    addonId,
    version: uniq('1.0'),
    downloadType: 'url',
    externalUrl: 'https://cdn.example.test/a.zip',
    ...body,
  });
  if (res.statusCode !== 201) throw new Error(`create release ${res.statusCode}: ${res.body}`);
  return res.json();
}

async function list(query = ''): Promise<AddonJson[]> {
  const res = await t.inject({ url: `/api/addons${query}` });
  expect(res.statusCode).toBe(200);
  return res.json();
}

async function detail(idOrSlug: string, query = ''): Promise<AddonJson> {
  const res = await t.inject({ url: `/api/addons/${idOrSlug}${query}` });
  expect(res.statusCode).toBe(200);
  return res.json();
}

describe('addon create, read, update, delete', () => {
  it('creates with defaults and answers 201 shaped like the public read', async () => {
    const res = await admin(t, 'POST', '/api/addons', { slug: 'quest-helper', name: '任务助手', summary: '任务指引' });
    expect(res.statusCode).toBe(201);
    const created = res.json<AddonJson>();
    expect(created).toMatchObject({
      slug: 'quest-helper',
      name: '任务助手',
      nameZh: '任务助手',
      nameEn: '',
      summary: '任务指引',
      description: '',
      descriptionZh: '',
      descriptionEn: '',
      iconUrl: null,
      category: 'general',
      published: true,
      totalDownloads: 0,
      releases: [],
      screenshots: [],
      _count: { releases: 0 },
      lang: 'zh',
    });
    expect(await detail('quest-helper')).toEqual(created);
    expect(await detail(created.id)).toEqual(created);
  });

  it('fZh wins over the alias f, fEn is stored, lang=en falls back to Chinese when English is empty', async () => {
    const a = await createAddon({ name: '别名', nameZh: '中文名', nameEn: 'English', summary: '只有中文' });
    expect(a).toMatchObject({ nameZh: '中文名', nameEn: 'English', name: '中文名' });
    const en = await detail(a.id, '?lang=en');
    expect(en).toMatchObject({ name: 'English', summary: '只有中文', summaryEn: '', lang: 'en' });
    const viaHeader = await t.inject({ url: `/api/addons/${a.id}`, headers: { 'accept-language': 'en-US,en;q=0.9' } });
    expect(viaHeader.json()).toMatchObject({ name: 'English', lang: 'en' });
  });

  it('rejects bad bodies with 400 naming the field, duplicate slugs with 409, unknown ids with 404', async () => {
    const noSummary = await admin(t, 'POST', '/api/addons', { slug: uniq('x'), name: '名' });
    expect(noSummary.statusCode).toBe(400);
    expect(noSummary.json().error).toMatch(/summary/);
    const noName = await admin(t, 'POST', '/api/addons', { slug: uniq('x'), summary: '名' });
    expect(noName.statusCode).toBe(400);
    expect(noName.json().error).toMatch(/name/);
    const numeric = await admin(t, 'POST', '/api/addons', { slug: uniq('x'), name: 123, summary: 's' });
    expect(numeric.statusCode).toBe(400);
    expect(numeric.json().error).toMatch(/body\.name/);
    const badSlug = await admin(t, 'POST', '/api/addons', { slug: '-Bad Slug', name: 'n', summary: 's' });
    expect(badSlug.statusCode).toBe(400);
    expect(badSlug.json().error).toMatch(/slug/);
    const tooLong = await admin(t, 'POST', '/api/addons', { slug: 'a'.repeat(65), name: 'n', summary: 's' });
    expect(tooLong.statusCode).toBe(400);
    const ok = await admin(t, 'POST', '/api/addons', { slug: 'a'.repeat(64), name: 'n', summary: 's' });
    expect(ok.statusCode).toBe(201);

    const first = await createAddon({ slug: 'dup-slug' });
    const dup = await admin(t, 'POST', '/api/addons', { slug: 'dup-slug', name: 'n', summary: 's' });
    expect(dup.statusCode).toBe(409);
    expect(dup.json()).toHaveProperty('error');
    const other = await createAddon({});
    const dupOnUpdate = await admin(t, 'PUT', `/api/addons/${other.id}`, { slug: 'dup-slug' });
    expect(dupOnUpdate.statusCode).toBe(409);
    const sameSlugOnItself = await admin(t, 'PUT', `/api/addons/${first.id}`, { slug: 'dup-slug' });
    expect(sameSlugOnItself.statusCode).toBe(200);

    expect((await admin(t, 'PUT', '/api/addons/nope', { name: 'x' })).statusCode).toBe(404);
    expect((await admin(t, 'DELETE', '/api/addons/nope')).statusCode).toBe(404);
    expect((await t.inject({ url: '/api/addons/nope' })).statusCode).toBe(404);
    expect((await t.inject({ url: '/api/addons/nope' })).json()).toHaveProperty('error');
  });

  it('needs an administrator for every write (401 before validation)', async () => {
    const a = await createAddon({});
    for (const [method, url] of [
      ['POST', '/api/addons'],
      ['PUT', `/api/addons/${a.id}`],
      ['DELETE', `/api/addons/${a.id}`],
      ['POST', '/api/releases'],
      ['PUT', '/api/releases/x'],
      ['DELETE', '/api/releases/x'],
      ['POST', `/api/addons/${a.id}/screenshots`],
      ['PUT', '/api/screenshots/x'],
      ['DELETE', '/api/screenshots/x'],
    ] as const) {
      const res = await t.inject({ method, url, payload: { name: 1 } });
      expect(res.statusCode, `${method} ${url}`).toBe(401);
    }
  });

  it('update changes only the fields sent and toggles published', async () => {
    const a = await createAddon({
      nameEn: 'Keep',
      description: '## 说明',
      descriptionEn: '## Notes',
      iconUrl: '/uploads/icon.png',
      category: 'ui',
    });
    const res = await admin(t, 'PUT', `/api/addons/${a.id}?lang=en`, { published: false, summaryEn: 'Short' });
    expect(res.statusCode).toBe(200);
    const updated = res.json<AddonJson>();
    expect(updated).toMatchObject({
      published: false,
      nameEn: 'Keep',
      name: 'Keep',
      summary: 'Short',
      summaryZh: '简介',
      description: '## Notes',
      iconUrl: '/uploads/icon.png',
      category: 'ui',
      lang: 'en',
    });
    expect(updated.updatedAt > a.updatedAt).toBe(true);
    const back = await admin(t, 'PUT', `/api/addons/${a.id}`, { published: true, iconUrl: null });
    expect(back.json()).toMatchObject({ published: true, iconUrl: null });
    expect((await admin(t, 'PUT', `/api/addons/${a.id}`, { name: '' })).statusCode).toBe(400);
    expect((await admin(t, 'PUT', `/api/addons/${a.id}`, { published: 'no' })).statusCode).toBe(400);
  });

  it('delete removes the addon, its releases and its screenshots', async () => {
    const a = await createAddon({});
    const r = await createRelease(a.id);
    const shot = await admin(t, 'POST', `/api/addons/${a.id}/screenshots`, { imageUrl: '/uploads/s.png' });
    expect(shot.statusCode).toBe(201);
    const res = await admin(t, 'DELETE', `/api/addons/${a.id}`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ok: true });
    expect((await t.inject({ url: `/api/addons/${a.id}` })).statusCode).toBe(404);
    expect((await t.inject({ url: `/api/download/${r.id}` })).statusCode).toBe(404);
    const releases = await t.inject({ url: `/api/releases?addonId=${a.id}` });
    expect(releases.json()).toEqual([]);
    expect((await admin(t, 'PUT', `/api/screenshots/${shot.json().id}`, { sortOrder: 1 })).statusCode).toBe(404);
    expect((await list('?published=false')).some((x) => x.id === a.id)).toBe(false);
  });
});
