import fs from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '../src/http/input.js';
import { isHttpUrl, isImageRef } from '../src/http/urls.js';
import { LocalStorage } from '../src/storage/local.js';
import { admin, buildTestApp, createPackage, multipartBody, type TestApp, upload } from './helpers/app.js';

/*
 * One test per failure class an outside, hostile test of the service found (issue 9). Each failed
 * before the fix.
 */

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp({ CORS_ORIGIN: 'https://site.example.com' });
});
afterAll(() => t.close());

async function newAddon() {
  const res = await admin(t, 'POST', '/api/addons', {
    slug: `hard-${Math.random().toString(36).slice(2, 10)}`,
    name: '插件',
    summary: '简介',
  });
  expect(res.statusCode).toBe(201);
  return res.json<{ id: string }>();
}

const BAD_LINKS = [
  'https://cdn.example.com/addon.zip\n',
  'https://cdn.example.com/addon.zip\r',
  'https://cdn.example.com/\taddon.zip',
  'https://cdn.example.com/addon.zip\u0000',
  ' https://cdn.example.com/addon.zip',
  'https://cdn.example.com/addon.zip ',
  'http:evil.example',
  'https:///evil.example/x',
  'https://user:secret@cdn.example.com/addon.zip',
  'https://token@cdn.example.com/addon.zip',
  'ftp://cdn.example.com/addon.zip',
  'javascript:alert(1)',
  '/relative/addon.zip',
];

describe('class 1: download links', () => {
  it('refuses links with control characters, spaces, a missing // or credentials, naming the field', async () => {
    const addon = await newAddon();
    const pkg = await createPackage(t, { slug: 'links-pkg', name: '链接' });
    for (const externalUrl of BAD_LINKS) {
      const release = await admin(t, 'POST', '/api/releases', {
        addonId: addon.id,
        version: '1.0',
        downloadType: 'url',
        externalUrl,
      });
      expect(release.statusCode, JSON.stringify(externalUrl)).toBe(400);
      expect(release.json().error).toMatch(/^body\.externalUrl: /);
      const version = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
        version: '1.0',
        versionCode: 1,
        downloadType: 'url',
        externalUrl,
      });
      expect(version.statusCode, JSON.stringify(externalUrl)).toBe(400);
      expect(version.json().error).toMatch(/^body\.externalUrl: /);
    }
    expect((await t.inject(`/api/releases?addonId=${addon.id}`)).json()).toEqual([]);
  });

  it('stores the canonical URL and counts a redirect it sends', async () => {
    const addon = await newAddon();
    const res = await admin(t, 'POST', '/api/releases', {
      addonId: addon.id,
      version: '1.0',
      downloadType: 'url',
      externalUrl: 'HTTPS://CDN.Example.com:443/插件 包.zip'.replace(' ', '%20'),
    });
    expect(res.statusCode).toBe(201);
    const release = res.json<{ id: string; externalUrl: string }>();
    expect(release.externalUrl).toBe('https://cdn.example.com/%E6%8F%92%E4%BB%B6%20%E5%8C%85.zip');
    const download = await t.inject(`/api/download/${release.id}`);
    expect(download.statusCode).toBe(302);
    expect(download.headers.location).toBe(release.externalUrl);
    const row = await t.database.db
      .selectFrom('releases')
      .select('downloadCount')
      .where('id', '=', release.id)
      .executeTakeFirstOrThrow();
    expect(row.downloadCount).toBe(1);
  });

  it('answers a stored link that cannot be sent with {error}, and counts nothing', async () => {
    const addon = await newAddon();
    const release = (
      await admin(t, 'POST', '/api/releases', {
        addonId: addon.id,
        version: '1.0',
        downloadType: 'url',
        externalUrl: 'https://cdn.example.com/ok.zip',
      })
    ).json<{ id: string }>();
    // A row written before links were checked.
    await t.database.db
      .updateTable('releases')
      .set({ externalUrl: 'https://cdn.example.com/addon.zip\n' })
      .where('id', '=', release.id)
      .execute();
    for (let i = 0; i < 3; i++) {
      const res = await t.inject(`/api/download/${release.id}`);
      expect(res.statusCode).toBe(404);
      expect(Object.keys(res.json())).toEqual(['error']);
    }
    const row = await t.database.db
      .selectFrom('releases')
      .select('downloadCount')
      .where('id', '=', release.id)
      .executeTakeFirstOrThrow();
    expect(row.downloadCount).toBe(0);
    const totals = await t.database.db
      .selectFrom('addons')
      .select('totalDownloads')
      .where('id', '=', addon.id)
      .executeTakeFirstOrThrow();
    expect(totals.totalDownloads).toBe(0);
  });

  it('the link check itself (table)', () => {
    for (const link of BAD_LINKS) expect(isHttpUrl(link), JSON.stringify(link)).toBe(false);
    for (const link of ['https://cdn.example.com/a.zip?x=1&y=2', 'http://127.0.0.1:8080/a', 'https://例子.测试/包.zip'])
      expect(isHttpUrl(link), link).toBe(true);
  });
});

describe('class 2: symbolic links in the local store', () => {
  it('serves and accepts nothing that a link leads to outside the store', async () => {
    const root = path.join(t.dir, 'uploads');
    const links = path.join(root, 'links');
    fs.mkdirSync(links, { recursive: true });
    fs.symlinkSync('/etc/passwd', path.join(links, 'passwd-link'));
    fs.symlinkSync(t.dir, path.join(links, 'dir-link'));
    fs.writeFileSync(path.join(t.dir, 'secret.txt'), 'secret');
    for (const url of ['/uploads/links/passwd-link', '/uploads/links/dir-link/secret.txt']) {
      const res = await t.inject(url);
      expect(res.statusCode, url).toBe(404);
      expect(res.body).not.toContain('root:');
      expect(res.body).not.toContain('secret');
    }
    if (t.testDb.config.kind === 'sqlite') {
      expect((await t.inject('/uploads/links/dir-link/app.db')).statusCode).toBe(404);
    }
    const pkg = await createPackage(t, { slug: 'symlink-pkg', name: '链接' });
    for (const filePath of ['/uploads/links/passwd-link', '/uploads/links/dir-link/secret.txt']) {
      const res = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
        version: '1',
        versionCode: 1,
        filePath,
      });
      expect(res.statusCode, filePath).toBe(400);
      expect(res.json().error).toMatch(/^body\.filePath: /);
    }
  });

  it('still serves a link that stays inside the store', async () => {
    const file = await upload(t, 'inside.bin', 'inside the store');
    const target = path.join(t.dir, 'uploads', file.filePath.slice('/uploads/'.length));
    fs.mkdirSync(path.join(t.dir, 'uploads', 'aliases'), { recursive: true });
    fs.symlinkSync(target, path.join(t.dir, 'uploads', 'aliases', 'inside.bin'));
    const res = await t.inject('/uploads/aliases/inside.bin');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('inside the store');
  });
});

describe('class 2b: a read after a stat', () => {
  it('reads the file the stat checked, never another key’s, and a link planted before the stat is refused', async () => {
    const root = path.join(t.dir, 'uploads');
    const store = new LocalStorage(root);
    fs.mkdirSync(path.join(root, 'pair'), { recursive: true });
    fs.writeFileSync(path.join(root, 'pair', 'a.bin'), 'AAAA');
    fs.writeFileSync(path.join(root, 'pair', 'b.bin'), 'BBBB');
    const text = async (stream: Readable) => Buffer.concat(await stream.toArray()).toString();
    const infoA = await store.stat('pair/a.bin');
    expect(infoA).not.toBeNull();
    expect(await text(await store.read('pair/a.bin', undefined, infoA!))).toBe('AAAA');
    // Another key's stat answer is not taken for this key.
    expect(await text(await store.read('pair/b.bin', undefined, infoA!))).toBe('BBBB');
    fs.symlinkSync('/etc/passwd', path.join(root, 'pair', 'planted'));
    expect(await store.stat('pair/planted')).toBeNull();
    await expect(store.read('pair/planted')).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe('class 3: broken multipart bodies', () => {
  it('answers 400 {error} to an unterminated or boundary-less upload and keeps nothing', async () => {
    const filesBefore = await t.database.db.selectFrom('files').select('key').execute();
    const cases = [
      {
        type: 'multipart/form-data; boundary=abc',
        body: '--abc\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\nunterminated',
      },
      { type: 'multipart/form-data', body: 'no boundary at all' },
      { type: 'multipart/form-data; boundary=abc', body: '--abc\r\nbroken header without colon\r\n\r\nx\r\n--abc--' },
    ];
    for (const { type, body } of cases) {
      const res = await t.inject({
        method: 'POST',
        url: '/api/upload',
        headers: { cookie: t.cookie, 'content-type': type },
        payload: body,
      });
      expect(res.statusCode, body).toBe(400);
      expect(Object.keys(res.json())).toEqual(['error']);
    }
    expect(await t.database.db.selectFrom('files').select('key').execute()).toEqual(filesBefore);
    expect(fs.readdirSync(path.join(t.dir, 'uploads', '.tmp'))).toEqual([]);
  });
});

const SCRIPT_REFS = [
  'javascript:alert(1)',
  'JavaScript:alert(1)',
  'data:text/html,<script>alert(1)</script>',
  'data:image/svg+xml;base64,PHN2Zz4=',
  '" onerror="alert(1)',
  "x' onerror='alert(1)",
  '&#106;avascript:alert(1)',
  'javascript&colon;alert(1)',
  '//evil.example/x.png',
  'vbscript:msgbox(1)',
  ' https://cdn.example.com/a.png',
  '/uploads/../../etc/passwd',
];

describe('class 4: image fields', () => {
  it('refuse script and other schemes in every image field, naming the field', async () => {
    const addon = await newAddon();
    const article = (await admin(t, 'POST', '/api/articles', { slug: 'img-article', title: '标题' })).json<{
      id: string;
    }>();
    const banner = (await admin(t, 'POST', '/api/banners', { imageUrl: '/uploads/2026-01/b.png' })).json<{
      id: string;
    }>();
    const gallery = (await admin(t, 'POST', '/api/gallery', { imageUrl: 'https://img.example.com/g.png' })).json<{
      id: string;
    }>();
    const shot = (
      await admin(t, 'POST', `/api/addons/${addon.id}/screenshots`, { imageUrl: '/uploads/2026-01/s.png' })
    ).json<{ id: string }>();
    const writes: Array<[method: 'POST' | 'PUT', url: string, field: string, extra: object]> = [
      ['POST', '/api/banners', 'imageUrl', {}],
      ['PUT', `/api/banners/${banner.id}`, 'imageUrl', {}],
      ['POST', '/api/gallery', 'imageUrl', {}],
      ['PUT', `/api/gallery/${gallery.id}`, 'imageUrl', {}],
      ['POST', `/api/addons/${addon.id}/screenshots`, 'imageUrl', {}],
      ['PUT', `/api/screenshots/${shot.id}`, 'imageUrl', {}],
      ['POST', '/api/addons', 'iconUrl', { slug: 'icon-addon', name: '图标', summary: '简介' }],
      ['PUT', `/api/addons/${addon.id}`, 'iconUrl', {}],
      ['POST', '/api/articles', 'coverImage', { slug: 'cover-article', title: '封面' }],
      ['PUT', `/api/articles/${article.id}`, 'coverImage', {}],
    ];
    for (const [method, url, field, extra] of writes) {
      for (const value of SCRIPT_REFS) {
        const res = await admin(t, method, url, { ...extra, [field]: value });
        expect(res.statusCode, `${method} ${url} ${field}=${value}`).toBe(400);
        expect(res.json().error).toMatch(new RegExp(`^body\\.${field}: `));
      }
    }
    for (const [method, url, field, extra] of writes.filter(([m]) => m === 'PUT')) {
      for (const value of ['https://img.example.com/a.png?w=1&h=2', '/uploads/2026-01/ok.png', '/images/site.png']) {
        const res = await admin(t, method, url, { ...extra, [field]: value });
        expect(res.statusCode, `${method} ${url} ${field}=${value}`).toBe(200);
        expect(res.json()[field]).toBe(value);
      }
    }
  });

  it('the image check itself (table)', () => {
    for (const value of SCRIPT_REFS) expect(isImageRef(value), value).toBe(false);
    for (const value of ['', '/uploads/2026-11/a.png', 'https://a.example/b.png', '/img/a.png', 'img/a.png'])
      expect(isImageRef(value), value).toBe(true);
  });
});

describe('class 5: cross-origin writes with the administrator cookie', () => {
  const write = (
    headers: Record<string, string>,
    url = '/api/banners',
    payload: object | string = { imageUrl: '/a.png' },
  ) => t.inject({ method: 'POST', url, headers: { cookie: t.cookie, ...headers }, payload });

  it('refuses another origin of the same site or another site, for JSON, text and multipart bodies, with 403 {error}', async () => {
    const attempts: Array<Record<string, string>> = [
      { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
      { origin: 'https://blog.localhost', 'sec-fetch-site': 'same-site' },
      { origin: 'https://evil.example' },
      { origin: 'null', 'sec-fetch-site': 'cross-site' },
      { 'sec-fetch-site': 'same-site' },
    ];
    for (const headers of attempts) {
      const json = await write(headers);
      expect(json.statusCode, JSON.stringify(headers)).toBe(403);
      expect(Object.keys(json.json())).toEqual(['error']);
      const text = await write({ ...headers, 'content-type': 'text/plain' }, '/api/banners', '{"imageUrl":"/a.png"}');
      expect(text.statusCode).toBe(403);
      const { payload, headers: multipart } = multipartBody('x.bin', 'x');
      const uploadRes = await write({ ...headers, ...multipart }, '/api/upload', payload);
      expect(uploadRes.statusCode).toBe(403);
      const logout = await write(headers, '/api/admin/logout', {});
      expect(logout.statusCode).toBe(403);
    }
    // The session survived the refused logouts.
    expect((await t.inject({ url: '/api/admin/me', headers: { cookie: t.cookie } })).statusCode).toBe(200);
  });

  it('lets through this origin, trusted origins, browsers navigating directly, non-browser clients and API tokens', async () => {
    const allowed: Array<Record<string, string>> = [
      { origin: 'http://localhost:80', 'sec-fetch-site': 'same-origin' },
      { 'sec-fetch-site': 'same-origin' },
      { 'sec-fetch-site': 'none' },
      { origin: 'http://localhost:80' },
      { origin: 'https://site.example.com', 'sec-fetch-site': 'cross-site' },
      {},
    ];
    for (const headers of allowed) {
      const res = await write(headers);
      expect(res.statusCode, JSON.stringify(headers)).toBe(201);
    }
    const token = (await admin(t, 'POST', '/api/admin/tokens', { name: 'ci' })).json<{ token: string }>().token;
    const bearer = await t.inject({
      method: 'POST',
      url: '/api/banners',
      headers: { authorization: `Bearer ${token}`, origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
      payload: { imageUrl: '/a.png' },
    });
    expect(bearer.statusCode).toBe(201);
    // Reads are never refused.
    const read = await t.inject({
      url: '/api/admin/me',
      headers: { cookie: t.cookie, origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
    });
    expect(read.statusCode).toBe(200);
  });
});

describe('class 6: device table flood', () => {
  it('bounds new devices per client address per hour; known devices keep beating; other addresses are unaffected', async () => {
    const bounded = await buildTestApp({ DEVICES_PER_IP_HOUR: '5' });
    try {
      const beat = (deviceId: string, remoteAddress = '203.0.113.7') =>
        bounded.inject({ method: 'POST', url: '/api/launcher/heartbeat', payload: { deviceId }, remoteAddress });
      // A device that beat in an earlier hour (already in the database).
      await beat('veteran', '198.51.100.1');
      await bounded.app.ctx.devices.flush();
      for (let i = 0; i < 5; i++) expect((await beat(`cafe-${i}`)).statusCode).toBe(200);
      const over = await beat('flood-1');
      expect(over.statusCode).toBe(429);
      expect(Object.keys(over.json())).toEqual(['error']);
      expect((await beat('cafe-0')).statusCode).toBe(200);
      expect((await beat('veteran')).statusCode).toBe(200);
      expect((await beat('flood-2', '203.0.113.8')).statusCode).toBe(200);
      await bounded.app.ctx.devices.flush();
      const ids = (await bounded.database.db.selectFrom('devices').select('deviceId').execute()).map((r) => r.deviceId);
      expect(ids.sort()).toEqual(['cafe-0', 'cafe-1', 'cafe-2', 'cafe-3', 'cafe-4', 'flood-2', 'veteran']);
    } finally {
      await bounded.close();
    }
  });

  it('starts a new bound each hour', async () => {
    const bounded = await buildTestApp({ DEVICES_PER_IP_HOUR: '3' });
    try {
      const devices = bounded.app.ctx.devices;
      const hour = new Date('2026-11-23T10:00:00Z');
      const later = new Date('2026-11-23T11:00:00Z');
      const beat = (n: number) => ({ deviceId: `hourly-${n}`, ip: '192.0.2.99' });
      for (let n = 0; n < 3; n++) expect(await devices.admits(beat(n), hour)).toBe(true);
      expect(await devices.admits(beat(3), hour)).toBe(false);
      expect(await devices.admits(beat(3), later)).toBe(true);
    } finally {
      await bounded.close();
    }
  });
});

describe('class 8: NUL characters, which PostgreSQL cannot store', () => {
  it('are refused in URLs and in every JSON body with 400 {error}, the same on both engines', async () => {
    const addon = await newAddon();
    const answers = [
      await t.inject('/api/software/check-update?slug=%00'),
      await t.inject('/api/software/changelog?slug=app%00'),
      await t.inject('/api/addons/%00'),
      await admin(t, 'PUT', `/api/addons/${addon.id}`, { name: 'a\u0000b' }),
      await admin(t, 'POST', '/api/articles', { slug: 'nul', title: { nested: ['\u0000'] } }),
      await t.inject({
        method: 'POST',
        url: '/api/launcher/heartbeat',
        payload: { deviceId: 'nul-1', os: 'Win\u0000' },
      }),
      await t.inject({
        method: 'POST',
        url: '/api/launcher/heartbeat',
        headers: { 'content-type': 'text/plain' },
        payload: JSON.stringify({ deviceId: 'nul-2', appVersion: '1\u0000' }),
      }),
    ];
    for (const res of answers) {
      expect(res.statusCode, res.body).toBe(400);
      expect(Object.keys(res.json())).toEqual(['error']);
    }
    // Heartbeats keep flowing: nothing poisoned the batch.
    await t.inject({
      method: 'POST',
      url: '/api/launcher/heartbeat',
      payload: { deviceId: 'after-nul', os: 'Windows' },
    });
    await t.app.ctx.devices.flush();
    const ids = (await t.database.db.selectFrom('devices').select('deviceId').execute()).map((r) => r.deviceId);
    expect(ids).toContain('after-nul');
    expect(ids).not.toContain('nul-1');
  });
});

describe('class 9: JSON nested thousands deep', () => {
  /** `{"<field>": [[…]]}`: `depth` levels of objects and arrays in all. */
  const nestedBody = (depth: number, field = 'extra') =>
    `{"${field}":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;
  const json = { 'content-type': 'application/json' };

  it('is refused with 400 {error} before any route sees it: a Bearer change’s audit record no longer overflows', async () => {
    const token = (await admin(t, 'POST', '/api/admin/tokens', { name: 'deep' })).json<{ token: string }>().token;
    const keys = (await t.inject('/api/signing-keys')).body;
    const res = await t.inject({
      method: 'POST',
      url: '/api/admin/signing-keys/rotate',
      headers: { ...json, authorization: `Bearer ${token}` },
      payload: nestedBody(6000),
    });
    expect(res.statusCode, res.body).toBe(400);
    expect(Object.keys(res.json())).toEqual(['error']);
    expect(res.json<{ error: string }>().error).toContain(`more than ${MAX_JSON_DEPTH} deep`);
    expect((await t.inject('/api/signing-keys')).body).toBe(keys);
  });

  it(`takes ${MAX_JSON_DEPTH} levels and refuses ${MAX_JSON_DEPTH + 1}, on public and administrator routes alike`, async () => {
    expect(MAX_JSON_DEPTH).toBe(64);
    const token = (await admin(t, 'POST', '/api/admin/tokens', { name: 'depth' })).json<{ token: string }>().token;
    const send = (depth: number) => [
      t.inject({
        method: 'POST',
        url: '/api/launcher/heartbeat',
        headers: json,
        payload: nestedBody(depth, 'deviceId":"deep-1","x'),
      }),
      t.inject({
        method: 'POST',
        url: '/api/launcher/heartbeat',
        headers: { 'content-type': 'text/plain' },
        payload: nestedBody(depth, 'deviceId":"deep-2","x'),
      }),
      t.inject({
        method: 'POST',
        url: '/api/admin/tokens',
        headers: { ...json, cookie: t.cookie },
        payload: nestedBody(depth, `name":"deep-${depth}","x`),
      }),
      t.inject({
        method: 'POST',
        url: '/api/admin/signing-keys/rotate',
        headers: { ...json, authorization: `Bearer ${token}` },
        payload: nestedBody(depth),
      }),
    ];
    const taken = await Promise.all(send(MAX_JSON_DEPTH));
    expect(taken.map((res) => res.statusCode)).toEqual([200, 200, 201, 201]);
    for (const res of await Promise.all(send(MAX_JSON_DEPTH + 1))) {
      expect(res.statusCode, res.body).toBe(400);
      expect(Object.keys(res.json())).toEqual(['error']);
    }
  });

  it('leaves other bodies alone: a multipart upload of a deeply nested JSON file is a file like any other', async () => {
    const content = '['.repeat(6000) + ']'.repeat(6000);
    const uploaded = await upload(t, 'deep.json', content);
    expect(uploaded.size).toBe(content.length);
  });
});
