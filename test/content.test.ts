import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

interface ArticleJson {
  id: string;
  slug: string;
  title: string;
  titleZh: string;
  titleEn: string;
  summary: string;
  content: string;
  published: boolean;
  createdAt: string;
  updatedAt: string;
  lang: string;
}

let seq = 0;
const uniq = (prefix: string) => `${prefix}-${++seq}`;

async function createArticle(body: Record<string, unknown> = {}): Promise<ArticleJson> {
  const res = await admin(t, 'POST', '/api/articles', { slug: uniq('news'), title: '公告', ...body });
  if (res.statusCode !== 201) throw new Error(`create article ${res.statusCode}: ${res.body}`);
  return res.json();
}

async function get<T>(url: string, headers: Record<string, string> = {}): Promise<T> {
  const res = await t.inject({ url, headers });
  expect(res.statusCode, `${url}: ${res.body}`).toBe(200);
  return res.json<T>();
}

describe('articles', () => {
  it('creates with defaults, 201 shaped like the public read, Markdown returned raw', async () => {
    const markdown = '# 标题\n\n- 列表 *强调* <b>raw</b>\n\n```js\nconsole.log(1)\n```';
    const res = await admin(t, 'POST', '/api/articles', { slug: 'patch-notes', title: '更新公告', content: markdown });
    expect(res.statusCode).toBe(201);
    const created = res.json<ArticleJson>();
    expect(created).toMatchObject({
      slug: 'patch-notes',
      title: '更新公告',
      titleZh: '更新公告',
      titleEn: '',
      summary: '',
      summaryZh: '',
      summaryEn: '',
      content: markdown,
      contentZh: markdown,
      contentEn: '',
      coverImage: '',
      published: true,
      lang: 'zh',
    });
    expect(await get(`/api/articles/patch-notes`)).toEqual(created);
    expect(await get(`/api/articles/${created.id}`)).toEqual(created);
  });

  it('bilingual writes: fZh wins over f, fEn stored; lang=en falls back to Chinese per field', async () => {
    const a = await createArticle({
      title: '别名',
      titleZh: '中文标题',
      titleEn: 'English title',
      summary: '摘要',
      content: '正文',
      contentEn: 'Body',
    });
    expect(a.titleZh).toBe('中文标题');
    const en = await get<ArticleJson & { summaryEn: string }>(`/api/articles/${a.id}?lang=en`);
    expect(en).toMatchObject({ title: 'English title', summary: '摘要', summaryEn: '', content: 'Body', lang: 'en' });
    const viaHeader = await get<ArticleJson>(`/api/articles/${a.slug}`, { 'accept-language': 'en-GB,en;q=0.8' });
    expect(viaHeader).toMatchObject({ title: 'English title', lang: 'en' });
    const listed = (await get<ArticleJson[]>('/api/articles?lang=en')).find((x) => x.id === a.id);
    expect(listed).toMatchObject({ title: 'English title', summary: '摘要', lang: 'en' });
  });

  it('lists newest first; drafts only with published=false; limit must be a positive integer', async () => {
    const first = await createArticle();
    const draft = await createArticle({ published: false });
    const last = await createArticle();
    const ids = (list: ArticleJson[]) => list.map((x) => x.id);
    const published = await get<ArticleJson[]>('/api/articles');
    expect(ids(published).indexOf(last.id)).toBeLessThan(ids(published).indexOf(first.id));
    expect(ids(published)).not.toContain(draft.id);
    expect(published.map((x) => x.createdAt)).toEqual([...published.map((x) => x.createdAt)].sort().reverse());
    for (const value of ['true', '1', 'no', '']) {
      expect(ids(await get(`/api/articles?published=${value}`))).not.toContain(draft.id);
    }
    const all = await get<ArticleJson[]>('/api/articles?published=false');
    expect(ids(all).slice(0, 3)).toEqual([last.id, draft.id, first.id]);
    expect(ids(await get('/api/articles?limit=2'))).toEqual(ids(published).slice(0, 2));
    expect(ids(await get('/api/articles?published=false&limit=1'))).toEqual([last.id]);
    for (const bad of ['0', '-1', 'abc', '1.5', '']) {
      const res = await t.inject({ url: `/api/articles?limit=${bad}` });
      expect(res.statusCode, `limit=${bad}`).toBe(400);
      expect(res.json().error).toMatch(/limit/);
    }
    // A draft is still readable by id (the list filter is what hides it).
    expect((await get<ArticleJson>(`/api/articles/${draft.id}`)).published).toBe(false);
  });

  it('update changes only the fields sent; delete; 404, 409, 400 cases', async () => {
    const a = await createArticle({ summary: '旧摘要', coverImage: '/uploads/c.png', content: '旧' });
    const res = await admin(t, 'PUT', `/api/articles/${a.id}`, { titleEn: 'Title', published: false });
    expect(res.statusCode).toBe(200);
    const updated = res.json<ArticleJson & { coverImage: string; summaryZh: string }>();
    expect(updated).toMatchObject({
      titleEn: 'Title',
      titleZh: '公告',
      summaryZh: '旧摘要',
      coverImage: '/uploads/c.png',
      content: '旧',
      published: false,
    });
    expect(updated.updatedAt > a.updatedAt).toBe(true);
    expect((await get<ArticleJson>(`/api/articles/${a.id}?lang=en`)).title).toBe('Title');

    const taken = await createArticle({ slug: 'taken-slug' });
    expect((await admin(t, 'POST', '/api/articles', { slug: 'taken-slug', title: 'x' })).statusCode).toBe(409);
    expect((await admin(t, 'PUT', `/api/articles/${a.id}`, { slug: 'taken-slug' })).statusCode).toBe(409);
    expect((await admin(t, 'PUT', `/api/articles/${taken.id}`, { slug: 'taken-slug' })).statusCode).toBe(200);
    expect((await admin(t, 'POST', '/api/articles', { slug: uniq('x') })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/articles', { slug: uniq('x'), title: 7 })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/articles', { slug: 'Bad Slug', title: 'x' })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/articles', { title: 'x' })).statusCode).toBe(400);
    expect((await admin(t, 'PUT', `/api/articles/${a.id}`, { title: '' })).statusCode).toBe(400);
    expect((await admin(t, 'PUT', '/api/articles/nope', { title: 'x' })).statusCode).toBe(404);
    expect((await t.inject({ url: '/api/articles/nope' })).statusCode).toBe(404);

    const del = await admin(t, 'DELETE', `/api/articles/${a.id}`);
    expect(del.statusCode).toBe(200);
    expect(del.json()).toEqual({ ok: true });
    expect((await t.inject({ url: `/api/articles/${a.id}` })).statusCode).toBe(404);
    expect((await admin(t, 'DELETE', `/api/articles/${a.id}`)).statusCode).toBe(404);
  });
});

interface BannerJson {
  id: string;
  imageUrl: string;
  sortOrder: number;
  enabled: boolean;
  createdAt: string;
}

describe('banners', () => {
  it('create, order by sortOrder then createdAt, enabled=1 filter, update, delete', async () => {
    const create = async (body: object) => {
      const res = await admin(t, 'POST', '/api/banners', body);
      expect(res.statusCode, res.body).toBe(201);
      return res.json<BannerJson>();
    };
    const b1 = await create({ imageUrl: '/uploads/b1.png', sortOrder: 2 });
    expect(b1).toMatchObject({ imageUrl: '/uploads/b1.png', sortOrder: 2, enabled: true });
    const b2 = await create({ imageUrl: '/uploads/b2.png' });
    expect(b2.sortOrder).toBe(0);
    const b3 = await create({ imageUrl: '/uploads/b3.png', enabled: false });
    const b4 = await create({ imageUrl: '/uploads/b4.png', sortOrder: 2 });
    const ids = (list: BannerJson[]) => list.map((b) => b.id);
    expect(ids(await get('/api/banners'))).toEqual([b2.id, b3.id, b1.id, b4.id]);
    expect(ids(await get('/api/banners?enabled=1'))).toEqual([b2.id, b1.id, b4.id]);
    expect(ids(await get('/api/banners?enabled=0'))).toEqual([b2.id, b3.id, b1.id, b4.id]);
    // lang does not change banners.
    expect(await get('/api/banners?lang=en')).toEqual(await get('/api/banners'));

    const upd = await admin(t, 'PUT', `/api/banners/${b3.id}`, { enabled: true, sortOrder: 9 });
    expect(upd.statusCode).toBe(200);
    expect(upd.json()).toMatchObject({ id: b3.id, enabled: true, sortOrder: 9, imageUrl: '/uploads/b3.png' });
    expect(ids(await get('/api/banners?enabled=1'))).toEqual([b2.id, b1.id, b4.id, b3.id]);
    expect((await admin(t, 'PUT', `/api/banners/${b3.id}`, { imageUrl: '/uploads/new.png' })).json()).toMatchObject({
      imageUrl: '/uploads/new.png',
      sortOrder: 9,
    });
    expect((await admin(t, 'DELETE', `/api/banners/${b2.id}`)).json()).toEqual({ ok: true });
    expect(ids(await get('/api/banners'))).toEqual([b1.id, b4.id, b3.id]);

    expect((await admin(t, 'POST', '/api/banners', {})).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/banners', { imageUrl: '/x.png', sortOrder: '1' })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/banners', { imageUrl: '/x.png', enabled: 'yes' })).statusCode).toBe(400);
    expect((await admin(t, 'PUT', '/api/banners/nope', { enabled: true })).statusCode).toBe(404);
    expect((await admin(t, 'DELETE', `/api/banners/${b2.id}`)).statusCode).toBe(404);
  });
});

interface GalleryJson {
  id: string;
  imageUrl: string;
  title: string;
  titleZh: string;
  titleEn: string;
  sortOrder: number;
  enabled: boolean;
  lang: string;
}

describe('gallery', () => {
  it('create, order, enabled=1 filter, lang with fallback, update, delete', async () => {
    const create = async (body: object) => {
      const res = await admin(t, 'POST', '/api/gallery', body);
      expect(res.statusCode, res.body).toBe(201);
      return res.json<GalleryJson>();
    };
    const g1 = await create({ imageUrl: '/uploads/g1.png', title: '雪山', titleEn: 'Snow peak', sortOrder: 1 });
    expect(g1).toMatchObject({ title: '雪山', titleZh: '雪山', titleEn: 'Snow peak', enabled: true, lang: 'zh' });
    const g2 = await create({ imageUrl: '/uploads/g2.png', title: '沙漠', enabled: false });
    const g3 = await create({ imageUrl: '/uploads/g3.png' });
    expect(g3).toMatchObject({ title: '', titleZh: '', titleEn: '', sortOrder: 0 });
    const ids = (list: GalleryJson[]) => list.map((g) => g.id);
    expect(ids(await get('/api/gallery'))).toEqual([g2.id, g3.id, g1.id]);
    expect(ids(await get('/api/gallery?enabled=1'))).toEqual([g3.id, g1.id]);
    const en = await get<GalleryJson[]>('/api/gallery?lang=en');
    expect(en.find((g) => g.id === g1.id)).toMatchObject({ title: 'Snow peak', lang: 'en' });
    expect(en.find((g) => g.id === g2.id)).toMatchObject({ title: '沙漠', titleEn: '', lang: 'en' });

    const upd = await admin(t, 'PUT', `/api/gallery/${g2.id}?lang=en`, { titleEn: 'Desert', enabled: true });
    expect(upd.statusCode).toBe(200);
    expect(upd.json()).toMatchObject({ title: 'Desert', titleZh: '沙漠', enabled: true, sortOrder: 0, lang: 'en' });
    expect(ids(await get('/api/gallery?enabled=1'))).toEqual([g2.id, g3.id, g1.id]);
    expect((await admin(t, 'PUT', `/api/gallery/${g1.id}`, { sortOrder: -5 })).json()).toMatchObject({
      sortOrder: -5,
      title: '雪山',
    });
    expect(ids(await get('/api/gallery'))[0]).toBe(g1.id);
    expect((await admin(t, 'DELETE', `/api/gallery/${g3.id}`)).json()).toEqual({ ok: true });
    expect(ids(await get('/api/gallery'))).toEqual([g1.id, g2.id]);

    expect((await admin(t, 'POST', '/api/gallery', { title: 'x' })).statusCode).toBe(400);
    expect((await admin(t, 'POST', '/api/gallery', { imageUrl: '/x.png', title: 1 })).statusCode).toBe(400);
    expect((await admin(t, 'PUT', '/api/gallery/nope', { title: 'x' })).statusCode).toBe(404);
    expect((await admin(t, 'DELETE', `/api/gallery/${g3.id}`)).statusCode).toBe(404);
  });
});

describe('authentication', () => {
  it('every content write needs an administrator (401)', async () => {
    for (const [method, url] of [
      ['POST', '/api/articles'],
      ['PUT', '/api/articles/x'],
      ['DELETE', '/api/articles/x'],
      ['POST', '/api/banners'],
      ['PUT', '/api/banners/x'],
      ['DELETE', '/api/banners/x'],
      ['POST', '/api/gallery'],
      ['PUT', '/api/gallery/x'],
      ['DELETE', '/api/gallery/x'],
    ] as const) {
      const res = await t.inject({ method, url, payload: { title: 1 } });
      expect(res.statusCode, `${method} ${url}`).toBe(401);
      expect(res.json()).toHaveProperty('error');
    }
  });
});
