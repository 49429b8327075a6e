import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';

let t: TestApp;
let file: { filePath: string; sha256: string; size: number };

beforeAll(async () => {
  t = await buildTestApp();
  file = await upload(t, 'launcher.exe', 'x'.repeat(1000));
});
afterAll(() => t.close());

async function freshPackage(slug: string, extra: Record<string, unknown> = {}) {
  return createPackage(t, { slug, name: `包 ${slug}`, nameEn: `Package ${slug}`, ...extra });
}

describe('GET /api/software/check-update', () => {
  it('answers the latest version, forced when the latest is forced and newer, with an absolute launcher URL', async () => {
    const pkg = await freshPackage('cu-basic');
    await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath });
    const v2 = await createVersion(t, pkg.id, {
      version: '1.1.0',
      versionCode: 110,
      filePath: file.filePath,
      forceUpdate: true,
      changelog: '修复',
      changelogEn: 'Fixes',
      minVersion: '1.0.0',
    });
    const res = await t.inject({
      url: '/api/software/check-update?slug=cu-basic&versionCode=100',
      headers: { host: 'dl.example.test' },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      hasUpdate: true,
      forceUpdate: true,
      lang: 'zh',
      wowVersion: '1.18',
      latest: {
        version: '1.1.0',
        versionCode: 110,
        changelog: '修复',
        changelogZh: '修复',
        changelogEn: 'Fixes',
        downloadUrl: `http://dl.example.test/api/software/download/${v2.id}?source=launcher`,
        fileSize: 1000,
        minVersion: '1.0.0',
        wowVersion: '1.18',
        createdAt: expect.any(String),
        sha256: file.sha256,
        fileName: 'launcher.exe',
        forceUpdate: true,
      },
      downgrade: false,
      signedAt: expect.any(String),
    });
  });

  it('has no update (and so is not forced) when the client is on the latest code or newer', async () => {
    const pkg = await freshPackage('cu-same');
    await createVersion(t, pkg.id, { version: '2.0', versionCode: 200, forceUpdate: true, filePath: file.filePath });
    for (const code of [200, 250]) {
      const body = (await t.inject(`/api/software/check-update?slug=cu-same&versionCode=${code}`)).json();
      expect(body).toMatchObject({ hasUpdate: false, forceUpdate: false });
    }
  });

  it('is optional when the latest is not forced, and versionCode defaults to 0', async () => {
    const pkg = await freshPackage('cu-optional');
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: file.filePath, forceUpdate: true });
    await createVersion(t, pkg.id, { version: '2', versionCode: 2, filePath: file.filePath });
    const body = (await t.inject('/api/software/check-update?slug=cu-optional')).json();
    expect(body).toMatchObject({ hasUpdate: true, forceUpdate: false, latest: { versionCode: 2 } });
  });

  it('uses PUBLIC_BASE_URL for the download URL when configured', async () => {
    const other = await buildTestApp({ PUBLIC_BASE_URL: 'https://cdn.example.test/base/' });
    try {
      const pkg = (await admin(other, 'POST', '/api/software', { slug: 'p', name: 'P' })).json();
      const v = (
        await admin(other, 'POST', `/api/software/${pkg.id}/versions`, {
          version: '1',
          versionCode: 1,
          downloadType: 'url',
          externalUrl: 'https://files.example.test/p.exe',
        })
      ).json();
      const body = (await other.inject('/api/software/check-update?slug=p')).json();
      expect(body.latest.downloadUrl).toBe(
        `https://cdn.example.test/base/api/software/download/${v.id}?source=launcher`,
      );
    } finally {
      await other.close();
    }
  });

  it('trusts X-Forwarded-Proto/Host only with TRUST_PROXY', async () => {
    const pkg = await freshPackage('cu-proxy');
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: file.filePath });
    const headers = { host: 'internal:3000', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'public.example.test' };
    const untrusted = (await t.inject({ url: '/api/software/check-update?slug=cu-proxy', headers })).json();
    expect(untrusted.latest.downloadUrl.startsWith('http://internal:3000/')).toBe(true);
    const proxied = await buildTestApp({ TRUST_PROXY: 'true' });
    try {
      const p = (await admin(proxied, 'POST', '/api/software', { slug: 'p', name: 'P' })).json();
      await admin(proxied, 'POST', `/api/software/${p.id}/versions`, {
        version: '1',
        versionCode: 1,
        downloadType: 'url',
        externalUrl: 'https://x.test/a',
      });
      const trusted = (await proxied.inject({ url: '/api/software/check-update?slug=p', headers })).json();
      expect(trusted.latest.downloadUrl.startsWith('https://public.example.test/')).toBe(true);
    } finally {
      await proxied.close();
    }
  });

  it('localises the changelog by lang, locale and Accept-Language, falling back to Chinese', async () => {
    const pkg = await freshPackage('cu-lang');
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, changelog: '中文', changelogEn: 'English' });
    const get = async (query: string, headers: Record<string, string> = {}) =>
      (await t.inject({ url: `/api/software/check-update?slug=cu-lang${query}`, headers })).json();
    expect(await get('&lang=en')).toMatchObject({ lang: 'en', latest: { changelog: 'English' } });
    expect(await get('&locale=EN-us')).toMatchObject({ lang: 'en', latest: { changelog: 'English' } });
    expect(await get('', { 'accept-language': 'fr;q=1, en-US;q=0.8, zh;q=0.5' })).toMatchObject({ lang: 'en' });
    expect(await get('&lang=fr', { 'accept-language': 'en' })).toMatchObject({ lang: 'en' });
    expect(await get('&lang=zh', { 'accept-language': 'en' })).toMatchObject({
      lang: 'zh',
      latest: { changelog: '中文' },
    });
    expect(await get('')).toMatchObject({ lang: 'zh', latest: { changelog: '中文', changelogEn: 'English' } });
    const noEn = await freshPackage('cu-lang-fallback');
    await createVersion(t, noEn.id, { version: '1', versionCode: 1, changelog: '只有中文' });
    expect((await t.inject('/api/software/check-update?slug=cu-lang-fallback&lang=en')).json()).toMatchObject({
      lang: 'en',
      latest: { changelog: '只有中文', changelogZh: '只有中文', changelogEn: '' },
    });
  });

  it('answers channel 1.18 whatever wow / wowVersion says', async () => {
    const pkg = await freshPackage('cu-wow');
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, wowVersion: '1.12' });
    for (const q of ['', '&wow=1.12', '&wow=all', '&wowVersion=3.3.5']) {
      const res = await t.inject({
        url: `/api/software/check-update?slug=cu-wow${q}`,
        headers: { cookie: 'wow=1.12' },
      });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ wowVersion: '1.18', latest: { wowVersion: '1.18' } });
    }
  });

  it('rejects a missing slug (400), an unknown package or one without versions (404), a malformed versionCode (400)', async () => {
    await freshPackage('cu-empty');
    const cases: Array<[string, number, RegExp]> = [
      ['/api/software/check-update', 400, /slug/],
      ['/api/software/check-update?slug=', 400, /slug/],
      ['/api/software/check-update?slug=nope', 404, /not found/],
      ['/api/software/check-update?slug=cu-empty', 404, /no version/],
      ['/api/software/check-update?slug=cu-basic&versionCode=abc', 400, /versionCode/],
      ['/api/software/check-update?slug=cu-basic&versionCode=1.5', 400, /versionCode/],
    ];
    for (const [url, status, message] of cases) {
      const res = await t.inject(url);
      expect(res.statusCode, url).toBe(status);
      expect(res.json().error, url).toMatch(message);
    }
  });

  it('answers a newly published version at once (the cached answer is invalidated on publish)', async () => {
    const pkg = await freshPackage('cu-cache');
    await createVersion(t, pkg.id, { version: '1', versionCode: 1 });
    expect((await t.inject('/api/software/check-update?slug=cu-cache')).json().latest.versionCode).toBe(1);
    await createVersion(t, pkg.id, { version: '2', versionCode: 2 });
    expect((await t.inject('/api/software/check-update?slug=cu-cache')).json().latest.versionCode).toBe(2);
    const forced = await admin(
      t,
      'PUT',
      `/api/software/versions/${(await createVersion(t, pkg.id, { version: '3', versionCode: 3 })).id}`,
      {
        forceUpdate: true,
      },
    );
    expect(forced.statusCode).toBe(200);
    expect((await t.inject('/api/software/check-update?slug=cu-cache&versionCode=2')).json().forceUpdate).toBe(true);
  });

  it('supports the launcher flow: full package first, then the patch package with the same versionCode', async () => {
    const full = await freshPackage('app-launcher', { name: '启动器' });
    const patch = await freshPackage('app-launcher-patch', { name: '热更新' });
    const patchFile = await upload(t, 'patch.zip', 'patch-bytes');
    await createVersion(t, full.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath });
    await createVersion(t, patch.id, { version: '1.0.1', versionCode: 101, filePath: patchFile.filePath });
    const fullAnswer = (await t.inject('/api/software/check-update?slug=app-launcher&versionCode=100')).json();
    expect(fullAnswer).toMatchObject({ hasUpdate: false, forceUpdate: false });
    const patchAnswer = (await t.inject('/api/software/check-update?slug=app-launcher-patch&versionCode=100')).json();
    expect(patchAnswer.hasUpdate).toBe(true);
    const url = new URL(patchAnswer.latest.downloadUrl);
    expect(url.searchParams.get('source')).toBe('launcher');
    const download = await t.inject(url.pathname + url.search);
    expect(download.statusCode).toBe(200);
    expect(download.body).toBe('patch-bytes');
    const detail = (await t.inject('/api/software/app-launcher-patch')).json();
    expect(detail.versions[0]).toMatchObject({ downloadCount: 1, launcherDownloadCount: 1 });
  });
});

describe('GET /api/software/latest and /download/launcher', () => {
  it('answer {available:false} with info=1 and 404 for the file while the launcher has no version', async () => {
    const fresh = await buildTestApp();
    try {
      expect((await fresh.inject('/api/software/latest?info=1')).json()).toEqual({ available: false });
      await admin(fresh, 'POST', '/api/software', { slug: 'app-launcher', name: '启动器' });
      expect((await fresh.inject('/api/software/latest?info=1')).json()).toEqual({ available: false });
      for (const url of ['/api/software/latest', '/download/launcher']) {
        const res = await fresh.inject(url);
        expect(res.statusCode).toBe(404);
        expect(res.json().error).toEqual(expect.any(String));
      }
    } finally {
      await fresh.close();
    }
  });

  it('targets <APP_NAME>-launcher, gives metadata with info=1, counts only with track=1', async () => {
    const other = await buildTestApp({ APP_NAME: 'azeroth' });
    try {
      const f = await upload(other, 'AzerothSetup.exe', 'installer');
      const decoy = (await admin(other, 'POST', '/api/software', { slug: 'app-launcher', name: 'x' })).json();
      await admin(other, 'POST', `/api/software/${decoy.id}/versions`, { version: '9', versionCode: 9 });
      const pkg = (await admin(other, 'POST', '/api/software', { slug: 'azeroth-launcher', name: '启动器' })).json();
      const v = (
        await admin(other, 'POST', `/api/software/${pkg.id}/versions`, {
          version: '1.2.3',
          versionCode: 123,
          filePath: f.filePath,
          changelog: '新',
          changelogEn: 'New',
        })
      ).json();
      const info = (await other.inject('/api/software/latest?info=1&lang=en')).json();
      expect(info).toEqual({
        available: true,
        version: '1.2.3',
        versionCode: 123,
        changelog: 'New',
        changelogZh: '新',
        changelogEn: 'New',
        fileSize: 9,
        sha256: f.sha256,
        createdAt: v.createdAt,
        downloadUrl: `/api/software/download/${v.id}`,
        downloadType: 'local',
        lang: 'en',
      });
      const count = async () => (await other.inject('/api/software/azeroth-launcher')).json().versions[0].downloadCount;
      expect(await count()).toBe(0);
      await other.inject('/api/software/latest?info=1&track=1');
      expect(await count()).toBe(1);
      const file1 = await other.inject('/api/software/latest');
      expect(file1.body).toBe('installer');
      expect(file1.headers['content-disposition']).toContain('AzerothSetup.exe');
      const file2 = await other.inject('/download/launcher?wow=1.12');
      expect(file2.body).toBe('installer');
      expect(await count()).toBe(3);
      const launcherCount = (await other.inject('/api/software/azeroth-launcher')).json().versions[0]
        .launcherDownloadCount;
      expect(launcherCount).toBe(0);
    } finally {
      await other.close();
    }
  });

  it('redirects to the external link of a url-type latest version, and counts it', async () => {
    const other = await buildTestApp();
    try {
      const pkg = (await admin(other, 'POST', '/api/software', { slug: 'app-launcher', name: '启动器' })).json();
      await admin(other, 'POST', `/api/software/${pkg.id}/versions`, {
        version: '1',
        versionCode: 1,
        downloadType: 'url',
        externalUrl: 'https://mirror.example.test/setup.exe',
      });
      const info = (await other.inject('/api/software/latest?info=1')).json();
      expect(info).toMatchObject({ downloadType: 'url', downloadUrl: 'https://mirror.example.test/setup.exe' });
      for (const url of ['/api/software/latest', '/download/launcher']) {
        const res = await other.inject(url);
        expect(res.statusCode).toBe(302);
        expect(res.headers.location).toBe('https://mirror.example.test/setup.exe');
      }
      expect((await other.inject('/api/software/app-launcher')).json().versions[0].downloadCount).toBe(2);
    } finally {
      await other.close();
    }
  });
});

describe('GET /api/software, /api/software/{idOrSlug}, /api/software/changelog', () => {
  it('lists packages in creation order with their latest version, a version count and lang', async () => {
    const other = await buildTestApp();
    try {
      const a = (await admin(other, 'POST', '/api/software', { slug: 'a', name: '甲', nameEn: 'A' })).json();
      const b = (await admin(other, 'POST', '/api/software', { slug: 'b', name: '乙' })).json();
      for (const code of [3, 1, 2]) {
        await admin(other, 'POST', `/api/software/${a.id}/versions`, { version: `v${code}`, versionCode: code });
      }
      const list = (await other.inject('/api/software?lang=en')).json();
      expect(list.map((p: { slug: string }) => p.slug)).toEqual(['a', 'b']);
      expect(list[0]).toMatchObject({ name: 'A', nameZh: '甲', nameEn: 'A', lang: 'en', _count: { versions: 3 } });
      expect(list[0].versions).toHaveLength(1);
      expect(list[0].versions[0]).toMatchObject({ version: 'v2', isLatest: true });
      expect(list[1]).toMatchObject({ id: b.id, name: '乙', versions: [], _count: { versions: 0 } });
    } finally {
      await other.close();
    }
  });

  it('shows one package by id or slug with all versions by versionCode descending; 404 when absent', async () => {
    const pkg = await freshPackage('detail');
    for (const code of [5, 9, 7]) await createVersion(t, pkg.id, { version: `v${code}`, versionCode: code });
    for (const key of [pkg.id, 'detail']) {
      const body = (await t.inject(`/api/software/${key}`)).json();
      expect(body.versions.map((v: { versionCode: number }) => v.versionCode)).toEqual([9, 7, 5]);
      expect(body.versions.filter((v: { isLatest: boolean }) => v.isLatest)).toHaveLength(1);
      expect(body.versions[2].isLatest).toBe(false);
      expect(body.versions[1].isLatest).toBe(true);
      expect(body._count.versions).toBe(3);
      expect(body.lang).toBe('zh');
    }
    const missing = await t.inject('/api/software/nothing-here');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ error: expect.any(String) });
  });

  it('gives the changelog of a package, newest versionCode first, localised', async () => {
    const pkg = await freshPackage('chlog', { nameEn: 'Changelog pkg' });
    await createVersion(t, pkg.id, { version: '1', versionCode: 1, changelog: '一', changelogEn: 'one', fileSize: 10 });
    await createVersion(t, pkg.id, { version: '2', versionCode: 2, changelog: '二', forceUpdate: true });
    const body = (await t.inject('/api/software/changelog?slug=chlog&lang=en&wow=1.12')).json();
    expect(body).toMatchObject({ slug: 'chlog', name: 'Changelog pkg', lang: 'en', wowVersion: '1.18' });
    expect(body.versions).toEqual([
      {
        version: '2',
        versionCode: 2,
        changelog: '二',
        changelogZh: '二',
        changelogEn: '',
        fileSize: 0,
        isLatest: true,
        forceUpdate: true,
        wowVersion: '1.18',
        createdAt: expect.any(String),
        rolloutPercent: 100,
        publishAt: null,
        revokedAt: null,
      },
      {
        version: '1',
        versionCode: 1,
        changelog: 'one',
        changelogZh: '一',
        changelogEn: 'one',
        fileSize: 10,
        isLatest: false,
        forceUpdate: false,
        wowVersion: '1.18',
        createdAt: expect.any(String),
        rolloutPercent: 100,
        publishAt: null,
        revokedAt: null,
      },
    ]);
    expect((await t.inject('/api/software/changelog')).statusCode).toBe(400);
    expect((await t.inject('/api/software/changelog?slug=none')).statusCode).toBe(404);
  });
});

describe('software administration', () => {
  it('requires a session or token for every write (401 before validation)', async () => {
    const routes: Array<[string, string]> = [
      ['POST', '/api/software'],
      ['PUT', '/api/software/x'],
      ['DELETE', '/api/software/x'],
      ['POST', '/api/software/x/versions'],
      ['PUT', '/api/software/versions/x'],
      ['DELETE', '/api/software/versions/x'],
      ['POST', '/api/upload'],
      ['POST', '/api/admin/change-password'],
    ];
    for (const [method, url] of routes) {
      const res = await t.inject({ method: method as 'POST', url, payload: { bad: true } });
      expect(res.statusCode, `${method} ${url}`).toBe(401);
      expect(res.json()).toEqual({ error: expect.any(String) });
      const forged = await t.inject({ method: method as 'POST', url, headers: { cookie: 'sid=forged' }, payload: {} });
      expect(forged.statusCode).toBe(401);
    }
  });

  it('creates a package (201, localised shape) and refuses a duplicate slug (409)', async () => {
    const res = await admin(t, 'POST', '/api/software', {
      slug: 'created',
      name: '名字',
      nameEn: 'Name',
      description: '描述',
    });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({
      slug: 'created',
      name: '名字',
      nameZh: '名字',
      nameEn: 'Name',
      description: '描述',
      descriptionZh: '描述',
      descriptionEn: '',
      versions: [],
      _count: { versions: 0 },
      lang: 'zh',
    });
    const dup = await admin(t, 'POST', '/api/software', { slug: 'created', name: 'again' });
    expect(dup.statusCode).toBe(409);
    expect(dup.json().error).toMatch(/slug/);
  });

  it('takes nameZh over the plain alias name', async () => {
    const res = await admin(t, 'POST', '/api/software', { slug: 'alias', name: 'plain', nameZh: '中文' });
    expect(res.json()).toMatchObject({ name: '中文', nameZh: '中文' });
  });

  it('validates bodies: required fields, types (no coercion), slug shape and reserved slugs', async () => {
    const cases: Array<[object, RegExp]> = [
      [{ name: 'x' }, /slug/],
      [{ slug: 'no-name' }, /name/],
      [{ slug: 'typed', name: 123 }, /name/],
      [{ slug: 'Upper', name: 'x' }, /slug/],
      [{ slug: '-dash', name: 'x' }, /slug/],
      [{ slug: 'a'.repeat(65), name: 'x' }, /slug/],
      [{ slug: 'check-update', name: 'x' }, /reserved/],
      [{ slug: 'versions', name: 'x' }, /reserved/],
    ];
    for (const [body, message] of cases) {
      const res = await admin(t, 'POST', '/api/software', body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().error, JSON.stringify(body)).toMatch(message);
    }
    const pkg = await freshPackage('v-validate');
    const versionCases: Array<[object, RegExp]> = [
      [{ versionCode: 1 }, /version/],
      [{ version: '1' }, /versionCode/],
      [{ version: '1', versionCode: '1' }, /versionCode/],
      [{ version: '1', versionCode: 1.5 }, /versionCode/],
      [{ version: '1', versionCode: 1, forceUpdate: 'yes' }, /forceUpdate/],
      [{ version: '1', versionCode: 1, downloadType: 'ftp' }, /downloadType/],
      [{ version: '1', versionCode: 1, downloadType: 'url' }, /externalUrl/],
      [{ version: '1', versionCode: 1, downloadType: 'url', externalUrl: 'javascript:alert(1)' }, /externalUrl/],
      [{ version: '1', versionCode: 1, filePath: '/etc/passwd' }, /filePath/],
      [{ version: '1', versionCode: 1, filePath: '/uploads/../app.db' }, /filePath/],
      [{ version: '1', versionCode: 1, filePath: '/uploads/2026-01/missing.exe' }, /filePath/],
    ];
    for (const [body, message] of versionCases) {
      const res = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().error, JSON.stringify(body)).toMatch(message);
    }
    expect(
      (await admin(t, 'POST', '/api/software/unknown/versions', { version: '1', versionCode: 1 })).statusCode,
    ).toBe(404);
  });

  it('fills fileSize and sha256 from the stored file unless sent', async () => {
    const pkg = await freshPackage('v-fill');
    const filled = await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: file.filePath });
    expect(filled).toMatchObject({ fileSize: 1000, sha256: file.sha256, downloadType: 'local', externalUrl: null });
    const sent = await createVersion(t, pkg.id, { version: '2', versionCode: 2, filePath: file.filePath, fileSize: 5 });
    expect(sent).toMatchObject({ fileSize: 5, sha256: file.sha256 });
  });

  it('moves isLatest: a new version takes it; isLatest:true moves it; deleting the latest gives it to the highest code', async () => {
    const pkg = await freshPackage('flags');
    const v1 = await createVersion(t, pkg.id, { version: '1', versionCode: 10 });
    const v3 = await createVersion(t, pkg.id, { version: '3', versionCode: 30 });
    const v2 = await createVersion(t, pkg.id, { version: '2', versionCode: 20 });
    const latestId = async () =>
      (await t.inject('/api/software/flags'))
        .json()
        .versions.filter((v: { isLatest: boolean }) => v.isLatest)
        .map((v: { id: string }) => v.id);
    expect(await latestId()).toEqual([v2.id]);
    const moved = await admin(t, 'PUT', `/api/software/versions/${v1.id}`, { isLatest: true });
    expect(moved.statusCode).toBe(200);
    expect(moved.json()).toMatchObject({ id: v1.id, isLatest: true, lang: 'zh' });
    expect(await latestId()).toEqual([v1.id]);
    expect((await t.inject('/api/software/check-update?slug=flags')).json().latest.versionCode).toBe(10);
    expect((await admin(t, 'DELETE', `/api/software/versions/${v1.id}`)).json()).toEqual({ ok: true });
    expect(await latestId()).toEqual([v3.id]);
    expect((await admin(t, 'DELETE', `/api/software/versions/${v1.id}`)).statusCode).toBe(404);
  });

  it('changes only the fields sent on a version update', async () => {
    const pkg = await freshPackage('partial');
    const v = await createVersion(t, pkg.id, {
      version: '1.0',
      versionCode: 1,
      changelog: '旧',
      changelogEn: 'old',
      forceUpdate: true,
      minVersion: '0.9',
      filePath: file.filePath,
    });
    const res = await admin(t, 'PUT', `/api/software/versions/${v.id}`, { changelogEn: 'new' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      version: '1.0',
      versionCode: 1,
      changelogZh: '旧',
      changelogEn: 'new',
      forceUpdate: true,
      minVersion: '0.9',
      filePath: file.filePath,
      fileSize: 1000,
      isLatest: true,
    });
    const cleared = await admin(t, 'PUT', `/api/software/versions/${v.id}`, { minVersion: null, forceUpdate: false });
    expect(cleared.json()).toMatchObject({ minVersion: null, forceUpdate: false, changelogEn: 'new' });
    expect((await admin(t, 'PUT', '/api/software/versions/nope', { version: '2' })).statusCode).toBe(404);
    expect((await admin(t, 'PUT', `/api/software/versions/${v.id}`, { versionCode: 'x' })).statusCode).toBe(400);
  });

  it('renames a package, refuses a taken slug, and deletes a package with its versions', async () => {
    const a = await freshPackage('rename-a');
    await freshPackage('rename-b');
    const v = await createVersion(t, a.id, { version: '1', versionCode: 1 });
    const renamed = await admin(t, 'PUT', `/api/software/${a.id}`, { nameEn: 'Renamed', slug: 'rename-c' });
    expect(renamed.statusCode).toBe(200);
    expect(renamed.json()).toMatchObject({
      slug: 'rename-c',
      nameEn: 'Renamed',
      nameZh: '包 rename-a',
      _count: { versions: 1 },
    });
    expect((await admin(t, 'PUT', `/api/software/${a.id}`, { slug: 'rename-b' })).statusCode).toBe(409);
    expect((await admin(t, 'PUT', '/api/software/unknown', { nameEn: 'x' })).statusCode).toBe(404);
    expect((await admin(t, 'DELETE', `/api/software/${a.id}`)).json()).toEqual({ ok: true });
    expect((await t.inject('/api/software/rename-c')).statusCode).toBe(404);
    expect((await t.inject(`/api/software/download/${v.id}`)).statusCode).toBe(404);
    expect((await admin(t, 'DELETE', `/api/software/${a.id}`)).statusCode).toBe(404);
  });

  it('stores wowVersion 1.18 whatever the body says', async () => {
    const pkg = await freshPackage('wow-store');
    const v = await createVersion(t, pkg.id, { version: '1', versionCode: 1, wowVersion: '1.12' });
    const rows = await t.database.db
      .selectFrom('softwareVersions')
      .select('wowVersion')
      .where('id', '=', v.id)
      .execute();
    expect(rows).toEqual([{ wowVersion: '1.18' }]);
  });
});
