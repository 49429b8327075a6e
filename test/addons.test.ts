import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../src/app.js';
import { admin, buildSecondApp, buildTestApp, type TestApp, upload } from './helpers/app.js';

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

/**
 * Download counters show in reads within 2 seconds (contract: they may come from a cache refreshed
 * at most every second). Retries `check` until it passes, for at most those 2 seconds.
 */
function withinCounterDelay(check: () => Promise<void>): Promise<void> {
  return vi.waitFor(check, { timeout: 2000, interval: 50 });
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

describe('GET /api/addons', () => {
  it('lists published addons by updatedAt descending; published=false includes drafts; other values do not', async () => {
    const a = await createAddon({ category: 'order-test' });
    const b = await createAddon({ category: 'order-test' });
    const draft = await createAddon({ category: 'order-test', published: false });
    expect(draft.published).toBe(false);
    const published = await list('?category=order-test');
    expect(published.map((x) => x.id)).toEqual([b.id, a.id]);
    for (const value of ['true', '1', '0', 'no', '']) {
      expect((await list(`?category=order-test&published=${value}`)).map((x) => x.id)).toEqual([b.id, a.id]);
    }
    expect((await list('?category=order-test&published=false')).map((x) => x.id)).toEqual([draft.id, b.id, a.id]);
    // An update moves the addon to the front.
    await admin(t, 'PUT', `/api/addons/${a.id}`, { nameEn: 'touched' });
    expect((await list('?category=order-test')).map((x) => x.id)).toEqual([a.id, b.id]);
  });

  it('filters by category', async () => {
    const ui = await createAddon({ category: 'cat-ui' });
    await createAddon({ category: 'cat-combat' });
    expect((await list('?category=cat-ui')).map((x) => x.id)).toEqual([ui.id]);
    expect(await list('?category=cat-none')).toEqual([]);
    expect((await list()).some((x) => x.category === 'cat-combat')).toBe(true);
  });

  it('shows the latest release only (zero or one), the release count, screenshots and totalDownloads', async () => {
    const a = await createAddon({ category: 'shape-test' });
    const empty = await createAddon({ category: 'shape-test' });
    await createRelease(a.id, { version: '1.0' });
    const r2 = await createRelease(a.id, { version: '2.0' });
    await admin(t, 'POST', `/api/addons/${a.id}/screenshots`, { imageUrl: '/uploads/one.png', sortOrder: 2 });
    await admin(t, 'POST', `/api/addons/${a.id}/screenshots`, { imageUrl: '/uploads/two.png', sortOrder: 1 });
    const found = await list('?category=shape-test');
    const item = found.find((x) => x.id === a.id);
    expect(item?.releases.map((r) => r.id)).toEqual([r2.id]);
    expect(item?.releases[0]).toMatchObject({ isLatest: true, wowVersion: '1.18', version: '2.0' });
    expect(item?._count.releases).toBe(2);
    expect(item?.screenshots.map((s) => s.imageUrl)).toEqual(['/uploads/two.png', '/uploads/one.png']);
    expect(item).toMatchObject({ totalDownloads: 0, lang: 'zh' });
    const none = found.find((x) => x.id === empty.id);
    expect(none?.releases).toEqual([]);
    expect(none?._count.releases).toBe(0);
    // Any wow value is the 1.18 channel.
    expect((await list('?category=shape-test&wow=1.12')).find((x) => x.id === a.id)?.releases[0]?.id).toBe(r2.id);
  });

  it('localises every element and falls back to Chinese when the English text is empty', async () => {
    const a = await createAddon({ category: 'lang-test', name: '名称', nameEn: 'Name', summary: '摘要' });
    const r = await createRelease(a.id, { changelog: '修复', changelogEn: '' });
    const [en] = await list('?category=lang-test&lang=en');
    expect(en).toMatchObject({ name: 'Name', nameZh: '名称', summary: '摘要', summaryEn: '', lang: 'en' });
    expect(en?.releases[0]).toMatchObject({ id: r.id, changelog: '修复', changelogZh: '修复', changelogEn: '' });
    const [zh] = await list('?category=lang-test&lang=zh');
    expect(zh).toMatchObject({ name: '名称', lang: 'zh' });
    const [locale] = await list('?category=lang-test&locale=EN-us');
    expect(locale).toMatchObject({ name: 'Name', lang: 'en' });
  });

  it('search: case-insensitive, every term in the name or summary of either language, Chinese substrings', async () => {
    const bag = await createAddon({
      category: 'search-test',
      name: '背包整合',
      nameEn: 'Bag Organizer',
      summary: '自动整理背包物品',
      summaryEn: 'Sorts your inventory automatically',
    });
    const map = await createAddon({
      category: 'search-test',
      name: '世界地图增强',
      nameEn: 'World Map Plus',
      summary: '在地图上显示坐标',
      summaryEn: 'Shows coordinates on the map',
    });
    const ids = async (search: string) =>
      (await list(`?category=search-test&search=${encodeURIComponent(search)}`)).map((x) => x.id).sort();
    expect(await ids('背包')).toEqual([bag.id]);
    expect(await ids('整理背')).toEqual([bag.id]); // a Chinese substring of the summary
    expect(await ids('地图')).toEqual([map.id]);
    expect(await ids('BAG')).toEqual([bag.id]);
    expect(await ids('inventory')).toEqual([bag.id]); // English summary
    expect(await ids('map coordinates')).toEqual([map.id]); // two terms, name + summary
    expect(await ids('  world   坐标 ')).toEqual([map.id]); // mixed languages, extra whitespace
    expect(await ids('map inventory')).toEqual([]); // every term must match
    expect(await ids('o')).toEqual([bag.id, map.id].sort());
    expect(await ids('nothing-like-this')).toEqual([]);
    expect((await t.inject({ url: `/api/addons?search=${'x'.repeat(201)}` })).statusCode).toBe(400);
    expect(await ids('')).toEqual([bag.id, map.id].sort()); // empty search: no filter
    // The index follows writes.
    await admin(t, 'PUT', `/api/addons/${map.id}`, { summaryEn: 'Now with inventory links' });
    expect(await ids('inventory')).toEqual([bag.id, map.id].sort());
    // Drafts are found only with published=false.
    const draft = await createAddon({ category: 'search-test', name: '草稿背包', published: false });
    expect(await ids('草稿')).toEqual([]);
    const withDrafts = await list(`?category=search-test&published=false&search=${encodeURIComponent('草稿')}`);
    expect(withDrafts.map((x) => x.id)).toEqual([draft.id]);
  });
  it('an element of the list is the addon as the detail shows it (one release), whatever its text', async () => {
    const tricky = '"totalDownloads":-7919000000001 "downloadCount":-7919000000002 \\ "quoted" 换行\n';
    const a = await createAddon({ category: 'same-shape', description: tricky, summaryEn: tricky });
    const empty = await createAddon({ category: 'same-shape', nameEn: 'No releases' });
    await createRelease(a.id, { changelog: tricky });
    await admin(t, 'POST', `/api/addons/${a.id}/screenshots`, { imageUrl: '/uploads/x.png' });
    for (const lang of ['zh', 'en']) {
      const listed = await list(`?category=same-shape&lang=${lang}`);
      expect(listed).toEqual([await detail(a.id, `?lang=${lang}`), await detail(empty.id, `?lang=${lang}`)]);
    }
  });
});

describe('releases and the latest flag', () => {
  const latestOf = async (addonId: string) =>
    (await detail(addonId)).releases.filter((r) => r.isLatest).map((r) => r.id);

  it('a new release becomes the latest; the previous loses the flag', async () => {
    const a = await createAddon({});
    const r1 = await createRelease(a.id);
    expect(r1.isLatest).toBe(true);
    const r2 = await createRelease(a.id);
    expect(r2).toMatchObject({ isLatest: true, addonId: a.id, wowVersion: '1.18', lang: 'zh' });
    expect(r2.addon).toMatchObject({ id: a.id, slug: a.slug, name: '插件' });
    expect(await latestOf(a.id)).toEqual([r2.id]);
    const d = await detail(a.id);
    expect(d.releases.map((r) => r.id)).toEqual([r2.id, r1.id]); // createdAt descending
    expect(d._count.releases).toBe(2);
  });

  it('isLatest: true on update moves the flag; other fields change alone', async () => {
    const a = await createAddon({});
    const r1 = await createRelease(a.id, { changelog: '旧', gameVersion: '1.12.1' });
    const r2 = await createRelease(a.id);
    const res = await admin(t, 'PUT', `/api/releases/${r1.id}`, { isLatest: true });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ id: r1.id, isLatest: true, changelog: '旧', gameVersion: '1.12.1' });
    expect(await latestOf(a.id)).toEqual([r1.id]);
    const [listed] = (await list('?published=false')).filter((x) => x.id === a.id);
    expect(listed?.releases.map((r) => r.id)).toEqual([r1.id]);
    const edit = await admin(t, 'PUT', `/api/releases/${r2.id}?lang=en`, { changelogEn: 'Fixes', version: '9.9' });
    expect(edit.json()).toMatchObject({ changelog: 'Fixes', version: '9.9', isLatest: false, lang: 'en' });
    expect(await latestOf(a.id)).toEqual([r1.id]);
    expect((await admin(t, 'PUT', '/api/releases/nope', { version: '1' })).statusCode).toBe(404);
    expect((await admin(t, 'PUT', `/api/releases/${r2.id}`, { version: 1 })).statusCode).toBe(400);
  });

  it('deleting the latest moves the flag to the newest remaining release', async () => {
    const a = await createAddon({});
    const r1 = await createRelease(a.id);
    const r2 = await createRelease(a.id);
    const r3 = await createRelease(a.id);
    await admin(t, 'PUT', `/api/releases/${r1.id}`, { isLatest: true });
    const del = await admin(t, 'DELETE', `/api/releases/${r1.id}`);
    expect(del.statusCode).toBe(200);
    expect(del.json()).toEqual({ ok: true });
    expect(await latestOf(a.id)).toEqual([r3.id]);
    await admin(t, 'DELETE', `/api/releases/${r3.id}`);
    expect(await latestOf(a.id)).toEqual([r2.id]);
    // Deleting a release that is not the latest keeps the flag.
    const r4 = await createRelease(a.id);
    await admin(t, 'DELETE', `/api/releases/${r2.id}`);
    expect(await latestOf(a.id)).toEqual([r4.id]);
    await admin(t, 'DELETE', `/api/releases/${r4.id}`);
    expect((await detail(a.id)).releases).toEqual([]);
    expect((await admin(t, 'DELETE', `/api/releases/${r4.id}`)).statusCode).toBe(404);
  });

  it('validates release bodies: unknown addon 404, externalUrl for url, filePath in the store', async () => {
    const a = await createAddon({});
    const unknown = await admin(t, 'POST', '/api/releases', { addonId: 'nope', version: '1' });
    expect(unknown.statusCode).toBe(404);
    const noUrl = await admin(t, 'POST', '/api/releases', { addonId: a.id, version: '1', downloadType: 'url' });
    expect(noUrl.statusCode).toBe(400);
    expect(noUrl.json().error).toMatch(/externalUrl/);
    const badUrl = await admin(t, 'POST', '/api/releases', {
      addonId: a.id,
      version: '1',
      downloadType: 'url',
      externalUrl: 'ftp://x',
    });
    expect(badUrl.statusCode).toBe(400);
    for (const filePath of ['/etc/passwd', '/uploads/../../etc/passwd', '/uploads/missing.zip']) {
      const res = await admin(t, 'POST', '/api/releases', { addonId: a.id, version: '1', filePath });
      expect(res.statusCode, filePath).toBe(400);
      expect(res.json().error).toMatch(/filePath/);
    }
    expect((await admin(t, 'POST', '/api/releases', { addonId: a.id })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/releases', { addonId: a.id, version: 2 })).statusCode).toBe(400);
    // Switching an existing release to url without a link is refused too.
    const r = await createRelease(a.id);
    const cleared = await admin(t, 'PUT', `/api/releases/${r.id}`, { externalUrl: null });
    expect(cleared.statusCode).toBe(400);
    expect((await detail(a.id))._count.releases).toBe(1);
  });

  it('fills fileSize and sha256 from the store; wowVersion is always 1.18', async () => {
    const a = await createAddon({});
    const file = await upload(t, 'addon.zip', 'z'.repeat(4321));
    const r = await createRelease(a.id, {
      downloadType: 'local',
      filePath: file.filePath,
      externalUrl: null,
      wowVersion: '1.12',
    });
    expect(r).toMatchObject({ fileSize: 4321, sha256: file.sha256, externalUrl: null, wowVersion: '1.18' });
    expect((await detail(a.id)).releases[0]).toMatchObject({ fileSize: 4321, sha256: file.sha256 });
  });

  it('GET /api/releases lists newest first with the addon summary and lang; addonId filters', async () => {
    const a = await createAddon({ name: '甲', nameEn: 'Alpha' });
    const b = await createAddon({ name: '乙' });
    const ra = await createRelease(a.id, { changelog: '甲一' });
    const rb = await createRelease(b.id);
    const ra2 = await createRelease(a.id);
    const all = (await t.inject({ url: '/api/releases?lang=en' })).json<ReleaseJson[]>();
    const mine = all.filter((r) => [ra.id, rb.id, ra2.id].includes(r.id));
    expect(mine.map((r) => r.id)).toEqual([ra2.id, rb.id, ra.id]);
    expect(all.map((r) => r.createdAt)).toEqual([...all.map((r) => r.createdAt)].sort().reverse());
    expect(mine[0]).toMatchObject({ lang: 'en', isLatest: true, addon: { id: a.id, name: 'Alpha', slug: a.slug } });
    expect(mine[1]).toMatchObject({ addon: { id: b.id, name: '乙', nameEn: '' } }); // fallback
    expect(mine[2]).toMatchObject({ isLatest: false, changelog: '甲一' });
    const onlyA = (await t.inject({ url: `/api/releases?addonId=${a.id}` })).json<ReleaseJson[]>();
    expect(onlyA.map((r) => r.id)).toEqual([ra2.id, ra.id]);
    expect(onlyA[0]?.lang).toBe('zh');
  });
});

describe('screenshots', () => {
  it('are added, ordered by sortOrder then createdAt, updated and deleted', async () => {
    const a = await createAddon({});
    const add = (body: object) => admin(t, 'POST', `/api/addons/${a.id}/screenshots`, body);
    const s1 = await add({ imageUrl: '/uploads/1.png', sortOrder: 5 });
    expect(s1.statusCode).toBe(201);
    expect(s1.json()).toMatchObject({ addonId: a.id, imageUrl: '/uploads/1.png', sortOrder: 5 });
    const s2 = (await add({ imageUrl: '/uploads/2.png' })).json();
    expect(s2.sortOrder).toBe(0);
    const s3 = (await add({ imageUrl: '/uploads/3.png' })).json();
    expect((await detail(a.id)).screenshots.map((s) => s.id)).toEqual([s2.id, s3.id, s1.json().id]);
    const moved = await admin(t, 'PUT', `/api/screenshots/${s3.id}`, { sortOrder: -1 });
    expect(moved.statusCode).toBe(200);
    expect(moved.json()).toMatchObject({ id: s3.id, sortOrder: -1, imageUrl: '/uploads/3.png' });
    expect((await detail(a.id)).screenshots.map((s) => s.id)).toEqual([s3.id, s2.id, s1.json().id]);
    expect((await admin(t, 'DELETE', `/api/screenshots/${s2.id}`)).json()).toEqual({ ok: true });
    expect((await detail(a.id)).screenshots.map((s) => s.id)).toEqual([s3.id, s1.json().id]);
    expect((await admin(t, 'DELETE', `/api/screenshots/${s2.id}`)).statusCode).toBe(404);
    expect((await add({})).statusCode).toBe(400);
    expect((await add({ imageUrl: 5 })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/addons/nope/screenshots', { imageUrl: '/x.png' })).statusCode).toBe(404);
    expect((await admin(t, 'PUT', '/api/screenshots/nope', { sortOrder: 1 })).statusCode).toBe(404);
  });
});

describe('GET /api/download/{releaseId}', () => {
  it('streams a local file as an attachment and counts the release and the addon', async () => {
    const a = await createAddon({ slug: 'dl-addon' });
    const file = await upload(t, 'bag-addon.zip', 'p'.repeat(2000));
    const r = await createRelease(a.id, { downloadType: 'local', filePath: file.filePath, externalUrl: null });
    const res = await t.inject({ url: `/api/download/${r.id}` });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/octet-stream');
    expect(res.headers['content-length']).toBe('2000');
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="bag-addon.zip"/);
    expect(res.headers.etag).toBeDefined();
    expect(res.body).toBe('p'.repeat(2000));
    // HEAD, a resumed range and a 304 do not count; a range from 0 does.
    expect((await t.inject({ method: 'HEAD', url: `/api/download/${r.id}` })).statusCode).toBe(200);
    const resumed = await t.inject({ url: `/api/download/${r.id}`, headers: { range: 'bytes=100-' } });
    expect(resumed.statusCode).toBe(206);
    const notModified = await t.inject({
      url: `/api/download/${r.id}`,
      headers: { 'if-none-match': String(res.headers.etag) },
    });
    expect(notModified.statusCode).toBe(304);
    expect((await t.inject({ url: `/api/download/${r.id}`, headers: { range: 'bytes=0-9' } })).statusCode).toBe(206);
    await withinCounterDelay(async () => {
      const d = await detail(a.id);
      expect(d.totalDownloads).toBe(2);
      expect(d.releases[0]?.downloadCount).toBe(2);
      const listed = (await list('?published=false')).find((x) => x.id === a.id);
      expect(listed?.totalDownloads).toBe(2);
      expect(listed?.releases[0]?.downloadCount).toBe(2);
    });
    await t.inject({ url: `/api/download/${r.id}` });
    await withinCounterDelay(async () => {
      const again = (await list('?published=false')).find((x) => x.id === a.id);
      expect(again?.totalDownloads).toBe(3);
      expect(again?.releases[0]?.downloadCount).toBe(3);
      const rel = (await t.inject({ url: `/api/releases?addonId=${a.id}` })).json<ReleaseJson[]>();
      expect(rel[0]?.downloadCount).toBe(3);
    });
  });

  it('redirects an external link with 302 and counts it', async () => {
    const a = await createAddon({});
    const r = await createRelease(a.id, { externalUrl: 'https://cdn.example.test/x.zip' });
    const counts = async () =>
      (await t.inject({ url: `/api/releases?addonId=${a.id}` })).json<ReleaseJson[]>().map((x) => x.downloadCount);
    expect(await counts()).toEqual([0]);
    expect((await detail(a.id)).totalDownloads).toBe(0);
    const res = await t.inject({ url: `/api/download/${r.id}` });
    expect(res.statusCode).toBe(302);
    expect(res.headers.location).toBe('https://cdn.example.test/x.zip');
    await withinCounterDelay(async () => {
      expect((await detail(a.id)).totalDownloads).toBe(1);
      expect(await counts()).toEqual([1]);
    });
  });

  it('answers 404 for an unknown release or a missing file, without counting', async () => {
    expect((await t.inject({ url: '/api/download/nope' })).statusCode).toBe(404);
    const a = await createAddon({});
    const noFile = await createRelease(a.id, { downloadType: 'local', externalUrl: null });
    const res = await t.inject({ url: `/api/download/${noFile.id}` });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toHaveProperty('error');
    expect((await detail(a.id)).totalDownloads).toBe(0);
  });

  it('counts exactly under 50 concurrent downloads, across releases of one addon', async () => {
    const a = await createAddon({});
    const file = await upload(t, 'c.zip', 'c'.repeat(512));
    const r1 = await createRelease(a.id, { downloadType: 'local', filePath: file.filePath });
    const r2 = await createRelease(a.id, { downloadType: 'local', filePath: file.filePath });
    await list('?published=false'); // warm the counters held in memory
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => t.inject({ url: `/api/download/${i % 5 === 0 ? r1.id : r2.id}` })),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    await withinCounterDelay(async () => {
      const d = await detail(a.id);
      expect(d.totalDownloads).toBe(50);
      expect(d.releases.find((r) => r.id === r1.id)?.downloadCount).toBe(10);
      expect(d.releases.find((r) => r.id === r2.id)?.downloadCount).toBe(40);
      const listed = (await list('?published=false')).find((x) => x.id === a.id);
      expect(listed?.totalDownloads).toBe(50);
      expect(listed?.releases[0]).toMatchObject({ id: r2.id, downloadCount: 40 });
    });
    // totalDownloads stays the sum of the releases' counts when a release goes.
    await admin(t, 'DELETE', `/api/releases/${r1.id}`);
    expect((await detail(a.id)).totalDownloads).toBe(40);
  });
});

describe('concurrency and other instances', () => {
  it('concurrent release creates and flag moves leave exactly one latest, with no spurious 409', async () => {
    const a = await createAddon({});
    const created = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        admin(t, 'POST', '/api/releases', {
          addonId: a.id,
          version: `c${i}`,
          downloadType: 'url',
          externalUrl: 'https://cdn.example.test/c.zip',
        }),
      ),
    );
    expect(created.map((r) => r.statusCode)).toEqual(created.map(() => 201));
    const ids = created.map((r) => r.json<ReleaseJson>().id);
    const moves = await Promise.all([
      ...ids.slice(0, 6).map((id) => admin(t, 'PUT', `/api/releases/${id}`, { isLatest: true })),
      ...ids.slice(6, 10).map((id) => admin(t, 'DELETE', `/api/releases/${id}`)),
    ]);
    expect(moves.map((r) => r.statusCode)).toEqual(moves.map(() => 200));
    const flagged = await t.database.db
      .selectFrom('releases')
      .select('id')
      .where('addonId', '=', a.id)
      .where('isLatest', '=', 1)
      .execute();
    expect(flagged).toHaveLength(1);
    expect((await detail(a.id)).releases.filter((r) => r.isLatest)).toHaveLength(1);
  });

  it('a large answer (over 500 addons) shows every download within 2 seconds', async () => {
    const now = new Date().toISOString();
    const addons = Array.from({ length: 600 }, (_, i) => ({
      id: `bulk-${i}`,
      slug: `bulk-${i}`,
      nameZh: `批量 ${i}`,
      nameEn: '',
      summaryZh: '批量',
      summaryEn: '',
      descriptionZh: '',
      descriptionEn: '',
      iconUrl: null,
      category: 'bulk',
      published: 1,
      totalDownloads: 0,
      createdAt: now,
      updatedAt: now,
    }));
    for (let i = 0; i < addons.length; i += 100) {
      await t.database.db
        .insertInto('addons')
        .values(addons.slice(i, i + 100))
        .execute();
    }
    const r = await createRelease('bulk-0'); // also clears the caches
    const before = await list('?category=bulk');
    expect(before).toHaveLength(600);
    expect(before[0]).toMatchObject({ id: 'bulk-0', totalDownloads: 0 });
    for (let n = 1; n <= 2; n += 1) {
      expect((await t.inject({ url: `/api/download/${r.id}` })).statusCode).toBe(302);
      const counted = Date.now();
      await withinCounterDelay(async () => {
        const [first] = await list('?category=bulk');
        expect(first).toMatchObject({ id: 'bulk-0', totalDownloads: n });
        expect(first?.releases[0]).toMatchObject({ id: r.id, downloadCount: n });
      });
      expect(Date.now() - counted).toBeLessThan(2000);
    }
  });

  describe('a second instance on the same database', () => {
    let other: App;
    beforeAll(async () => {
      other = await buildSecondApp(t);
    });
    afterAll(() => other.close());

    it('downloads counted there show here within 2 s; writes there show here within 5 s', async () => {
      const a = await createAddon({ category: 'multi' });
      const r = await createRelease(a.id);
      await list('?category=multi'); // this instance now holds the catalogue and its counters
      await detail(a.id);
      const served = await Promise.all(
        Array.from({ length: 10 }, () => other.server.inject({ url: `/api/download/${r.id}` })),
      );
      expect(served.map((x) => x.statusCode)).toEqual(served.map(() => 302));
      await withinCounterDelay(async () => {
        const [listed] = await list('?category=multi');
        expect(listed).toMatchObject({ id: a.id, totalDownloads: 10 });
        expect(listed?.releases[0]?.downloadCount).toBe(10);
        expect((await detail(a.id)).totalDownloads).toBe(10);
      });

      const created = await other.server.inject({
        method: 'POST',
        url: '/api/addons',
        headers: { cookie: t.cookie },
        payload: { slug: uniq('multi'), name: '另一实例', summary: '摘要', category: 'multi' },
      });
      expect(created.statusCode).toBe(201);
      const deadline = Date.now() + 5000;
      let ids: string[] = [];
      while (Date.now() < deadline) {
        ids = (await list('?category=multi')).map((x) => x.id);
        if (ids.length === 2) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(ids).toEqual([created.json<AddonJson>().id, a.id]);
    });
  });
});
