import { parseFeed } from '@rowanmanning/feed-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, createPackage, createVersion, type TestApp } from './helpers/app.js';

let t: TestApp;

async function feed(url: string, headers: Record<string, string> = {}) {
  const res = await t.inject({ url, headers });
  expect(res.statusCode, `${url} ${res.body.slice(0, 200)}`).toBe(200);
  return { res, parsed: parseFeed(res.body) };
}

beforeAll(async () => {
  t = await buildTestApp({ PUBLIC_BASE_URL: 'https://site.example.test', APP_NAME: 'feedy' });
  for (const [slug, zh, en] of [
    ['first', '第一篇', 'First'],
    ['second', '第二篇 <script>alert(1)</script> & ]]>', 'Second <b>&amp;</b> ]]>'],
  ] as const) {
    const res = await admin(t, 'POST', '/api/articles', {
      slug,
      titleZh: zh,
      titleEn: en,
      summaryZh: `${zh}摘要`,
      contentZh: '正文',
    });
    expect(res.statusCode, res.body).toBe(201);
  }
  const future = new Date(Date.now() + 3_600_000).toISOString();
  await admin(t, 'POST', '/api/articles', { slug: 'later', titleZh: '以后', contentZh: '正文', publishAt: future });
  await admin(t, 'POST', '/api/articles', { slug: 'draft', titleZh: '草稿', contentZh: '正文', published: false });

  const addon = (
    await admin(t, 'POST', '/api/addons', { slug: 'atlas', name: '地图', nameEn: 'Atlas', summary: '摘要' })
  ).json<{ id: string }>();
  for (const version of ['1.0', '1.1']) {
    await admin(t, 'POST', '/api/releases', {
      addonId: addon.id,
      version,
      changelog: `改动 ${version}`,
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/a.zip',
    });
  }
  await admin(t, 'POST', '/api/releases', {
    addonId: addon.id,
    version: '2.0',
    downloadType: 'url',
    externalUrl: 'https://cdn.example.test/a.zip',
    publishAt: future,
  });

  const pkg = await createPackage(t, { slug: 'feedy-launcher', name: '启动器', nameEn: 'Launcher' });
  await createVersion(t, pkg.id, {
    version: '1.0.0',
    versionCode: 1,
    externalUrl: 'https://cdn.example.test/l1.exe',
    downloadType: 'url',
  });
  await createVersion(t, pkg.id, {
    version: '1.1.0',
    versionCode: 2,
    externalUrl: 'https://cdn.example.test/l2.exe',
    downloadType: 'url',
    rolloutPercent: 10,
  });
  const revoked = await createVersion(t, pkg.id, {
    version: '1.0.1',
    versionCode: 3,
    externalUrl: 'https://cdn.example.test/l3.exe',
    downloadType: 'url',
  });
  expect((await admin(t, 'POST', `/api/software/versions/${revoked.id}/revoke`)).statusCode).toBe(200);
});
afterAll(() => t.close());

describe('article feeds', () => {
  it('RSS 2.0 and Atom list published articles newest first, localised, with escaped titles', async () => {
    const rss = await feed('/feeds/articles.rss');
    expect(rss.res.headers['content-type']).toBe('application/rss+xml; charset=utf-8');
    expect(rss.parsed.meta.type).toBe('rss');
    expect(rss.parsed.items.map((i) => i.title)).toEqual(['第二篇 <script>alert(1)</script> & ]]>', '第一篇']);
    const atom = await feed('/feeds/articles.atom?lang=en');
    expect(atom.res.headers['content-type']).toBe('application/atom+xml; charset=utf-8');
    expect(atom.parsed.meta.type).toBe('atom');
    expect(atom.parsed.items.map((i) => i.title)).toEqual(['Second <b>&amp;</b> ]]>', 'First']);
    expect(atom.parsed.items[0]?.url).toBe('https://site.example.test/api/articles/second?lang=en');
    // The contract's negotiation: Accept-Language when no lang is given.
    const negotiated = await feed('/feeds/articles.atom', { 'accept-language': 'en-US,en;q=0.9' });
    expect(negotiated.parsed.items[1]?.title).toBe('First');
  });

  it('answers 304 to either validator, and a new article changes the feed', async () => {
    const { res } = await feed('/feeds/articles.atom');
    const etag = String(res.headers.etag);
    const modified = String(res.headers['last-modified']);
    expect((await t.inject({ url: '/feeds/articles.atom', headers: { 'if-none-match': etag } })).statusCode).toBe(304);
    expect(
      (await t.inject({ url: '/feeds/articles.atom', headers: { 'if-modified-since': modified } })).statusCode,
    ).toBe(304);
    expect((await t.inject({ url: '/feeds/articles.atom', headers: { 'if-none-match': '"other"' } })).statusCode).toBe(
      200,
    );
    expect(
      (await t.inject({ url: '/feeds/articles.atom', headers: { 'if-modified-since': new Date(0).toUTCString() } }))
        .statusCode,
    ).toBe(200);
    await admin(t, 'POST', '/api/articles', { slug: 'third', titleZh: '第三篇', contentZh: '正文' });
    const after = await feed('/feeds/articles.atom');
    expect(after.res.headers.etag).not.toBe(etag);
    expect(after.parsed.items[0]?.title).toBe('第三篇');
    expect((await t.inject({ url: '/feeds/articles.atom', headers: { 'if-none-match': etag } })).statusCode).toBe(200);
  });
});

describe('release and launcher feeds', () => {
  it('lists published addon releases, scheduled ones hidden', async () => {
    const { parsed } = await feed('/feeds/releases.atom?lang=en');
    expect(parsed.items.map((i) => i.title)).toEqual(['Atlas 1.1', 'Atlas 1.0']);
    expect(parsed.items[0]?.description ?? parsed.items[0]?.content).toContain('改动 1.1');
  });

  it('lists versions offered to everyone: not staged below 100 %, not revoked', async () => {
    const { parsed } = await feed('/feeds/launcher.atom?lang=en');
    expect(parsed.items.map((i) => i.title)).toEqual(['Launcher 1.0.0']);
  });
});
