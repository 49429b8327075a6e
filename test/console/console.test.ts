import { createHash } from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Secret, TOTP } from 'otpauth';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { prehash, versionTrustedComment } from 'patchwell-client/minisign';
import { generateKeyPair, parseSecretKey, signPrehash } from 'patchwell-publish/minisign';
import {
  ADMIN_PASSWORD,
  getJson,
  launchBrowser,
  login,
  png,
  screenshot,
  type Service,
  startService,
} from './browser.js';
import { checkManifest } from '../../src/domain/game-manifest.js';
import { manifestOf } from '../helpers/game.js';

let service: Service;
let browser: Browser;
let context: BrowserContext | null = null;
let base = '';
/** The administrator's password once the password test changed it (the tests after it use it). */
const ADMIN_NEW_PASSWORD = 'a-new-secret-2';

beforeAll(async () => {
  [service, browser] = await Promise.all([startService(), launchBrowser()]);
  base = service.server.url;
});
afterEach(async () => {
  await context?.close();
  context = null;
});
afterAll(async () => {
  await browser?.close();
  await service?.stop();
});

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** The administrator's session cookie, for setting up through the API what a test does not click. */
async function apiLogin(): Promise<string> {
  const res = await fetch(`${base}/api/admin/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password: ADMIN_PASSWORD }),
  });
  return (res.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
}

/** A fresh browser profile (no cookies) whose preferred language is `locale`. */
async function newPage(locale = 'en-US', timezoneId?: string): Promise<Page> {
  context = await browser.newContext({ locale, timezoneId, viewport: { width: 1366, height: 900 } });
  const page = await context.newPage();
  page.on('pageerror', (error) => console.error('page error:', error.message));
  return page;
}

/** A logged-in page (browser language `locale`) on the software page with the rollout panel of `version` open. */
async function openRollout(version: string, locale?: string) {
  const page = await newPage(locale);
  await login(page, base);
  await page.getByTestId('nav-software').click();
  const row = page.getByTestId(`version-${version}`);
  await row.getByTestId('open-rollout').click();
  return { page, row, panel: page.getByTestId('rollout-panel') };
}

describe('admin console in Chromium against the real service', () => {
  it('is served at /admin with the SPA fallback, caching headers and a CSP', async () => {
    const index = await fetch(`${base}/admin/software`);
    expect(index.status).toBe(200);
    expect(index.headers.get('content-type')).toContain('text/html');
    expect(index.headers.get('cache-control')).toBe('no-cache');
    expect(index.headers.get('content-security-policy')).toContain("script-src 'self'");
    const html = await index.text();
    const asset = /src="(\/admin\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    expect(asset).toBeDefined();
    const js = await fetch(`${base}${asset}`);
    expect(js.status).toBe(200);
    expect(js.headers.get('cache-control')).toContain('immutable');
    expect((await fetch(`${base}/admin/assets/missing-123.js`)).status).toBe(404);
  });

  it('logs in: the language follows the browser and can be switched; the dashboard shows devices', async () => {
    const beat = await fetch(`${base}/api/launcher/heartbeat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ deviceId: 'console-test-pc', os: 'Windows', osVersion: '11', appVersion: '2.0.0' }),
    });
    expect(beat.status).toBe(200);

    const page = await newPage('zh-CN');
    await page.goto(`${base}/admin/`);
    await page.getByText('管理员登录').waitFor();
    // A wrong password is told in words.
    await page.locator('input[name="password"]').fill('wrong-password');
    await page.getByTestId('login-submit').click();
    await expect.poll(() => page.getByTestId('login-error').textContent()).toContain('用户名或密码错误');
    await screenshot(page, '00-login-zh');
    await page.getByText('English').click();
    await page.getByText('Administrator login').waitFor();
    await page.locator('input[name="password"]').fill(ADMIN_PASSWORD);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('nav-dashboard').waitFor();
    await expect.poll(() => page.getByTestId('stat-online').textContent(), { timeout: 10_000 }).toBe('1');
    expect(await page.getByTestId('stat-total').textContent()).toBe('1');
    await page.getByText('Windows').first().waitFor();
    await page.locator('.recharts-surface').first().waitFor();
    await screenshot(page, '01-dashboard');

    // Switched to Chinese: the devices page lists the launcher, online first.
    await page.getByTestId('lang-switch').getByText('中文').click();
    await page.getByTestId('nav-devices').click();
    await page.getByRole('heading', { name: '设备' }).waitFor();
    await page.getByText('console-test-pc').waitFor();
    await page.getByText('在线', { exact: true }).first().waitFor();
    await screenshot(page, '01-devices-zh');
  });

  it('creates a package, uploads a version with progress, and check-update answers it', async () => {
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-software').click();
    await page.getByTestId('new-package').click();
    await page.getByTestId('pkg-slug').fill('app-launcher');
    await page.getByTestId('pkg-name-zh').fill('游戏启动器');
    await page.getByTestId('pkg-name-en').fill('Game Launcher');
    await page.getByTestId('pkg-submit').click();
    const card = page.getByTestId('package-app-launcher');
    await card.waitFor();

    // The API's {error} reaches the operator in words: a duplicate slug is a 409.
    await page.getByTestId('new-package').click();
    await page.getByTestId('pkg-slug').fill('app-launcher');
    await page.getByTestId('pkg-name-zh').fill('重复');
    await page.getByTestId('pkg-submit').click();
    await page.getByText(/^Already exists: .*slug/).waitFor();
    await page.keyboard.press('Escape');
    await page.getByRole('dialog').waitFor({ state: 'detached' });

    await card.getByTestId('new-version').click();
    await page.getByTestId('ver-version').fill('1.2.0');
    await page.getByTestId('ver-code').fill('120');
    // The upload is resumable (tus): its first chunk's connection drops, and it goes on from there.
    const chunks: string[] = [];
    await page.route('**/api/admin/uploads/*', async (route) => {
      const method = route.request().method();
      chunks.push(method);
      if (method === 'PATCH' && chunks.filter((m) => m === 'PATCH').length === 1) await route.abort('connectionreset');
      else await route.continue();
    });
    await page.getByTestId('file-input').setInputFiles({
      name: 'launcher-setup.exe',
      mimeType: 'application/octet-stream',
      buffer: Buffer.alloc(3 * 1024 * 1024, 7),
    });
    await page.getByText(/Uploaded: launcher-setup\.exe/).waitFor();
    expect(chunks).toEqual(['PATCH', 'HEAD', 'PATCH', 'GET']);
    await page.unroute('**/api/admin/uploads/*');
    expect(
      await page.locator('[data-testid="upload-progress"] [role="progressbar"]').getAttribute('aria-valuenow'),
    ).toBe('100');
    await page.getByTestId('ver-changelog-zh').fill('修复了若干问题');
    await page.getByTestId('ver-changelog-en').fill('Fixed several bugs');
    await screenshot(page, '02-version-upload', { dialog: true });
    await page.getByTestId('ver-submit').click();
    await card.getByText('1.2.0').waitFor();
    await card.getByText('Latest').waitFor();
    await screenshot(page, '03-software');

    const update = await getJson<{
      hasUpdate: boolean;
      latest: { version: string; versionCode: number; changelogEn: string; fileSize: number };
    }>(`${base}/api/software/check-update?slug=app-launcher&versionCode=100&lang=en`);
    expect(update.hasUpdate).toBe(true);
    expect(update.latest).toMatchObject({
      version: '1.2.0',
      versionCode: 120,
      changelogEn: 'Fixed several bugs',
      fileSize: 3 * 1024 * 1024,
    });
  });

  it('creates an addon with a release and a screenshot, and /api/addons lists it', async () => {
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-addons').click();
    await page.getByTestId('new-addon').click();
    await page.getByTestId('addon-slug').fill('better-bags');
    await page.getByTestId('addon-name-zh').fill('背包整理');
    await page.getByTestId('addon-name-en').fill('Better Bags');
    await page.getByTestId('addon-summary-zh').fill('一键整理背包');
    await page.getByTestId('addon-summary-en').fill('Sort your bags in one click');
    await page.getByTestId('addon-desc-en').fill('## Features\n\n- **Sort** bags\n- Search items');
    await page.getByTestId('addon-desc-en-preview').locator('h2', { hasText: 'Features' }).waitFor();
    await page
      .getByTestId('addon-icon-input')
      .setInputFiles({ name: 'icon.png', mimeType: 'image/png', buffer: png(64, 64, [255, 170, 40]) });
    await page.getByText(/Uploaded: icon\.png/).waitFor();
    await page.getByTestId('addon-submit').click();

    await page.getByTestId('new-release').click();
    await page.getByTestId('rel-version').fill('1.0.0');
    await page
      .getByTestId('file-input')
      .setInputFiles({ name: 'better-bags-1.0.0.zip', mimeType: 'application/zip', buffer: Buffer.alloc(200_000, 1) });
    await page.getByText(/Uploaded: better-bags-1\.0\.0\.zip/).waitFor();
    await page.getByTestId('rel-changelog-en').fill('First release');
    await page.getByTestId('rel-submit').click();
    await page.getByTestId('releases').getByText('1.0.0').waitFor();

    await page
      .getByTestId('screenshot-input')
      .setInputFiles({ name: 'shot.png', mimeType: 'image/png', buffer: png(320, 180, [60, 140, 255]) });
    await page.getByTestId('screenshots').locator('img').first().waitFor();
    await screenshot(page, '04-addon');

    type Listed = {
      slug: string;
      name: string;
      published: boolean;
      releases: { version: string }[];
      screenshots: { imageUrl: string }[];
      iconUrl: string | null;
    };
    const addons = await getJson<Listed[]>(`${base}/api/addons?lang=en`);
    const addon = addons.find((a) => a.slug === 'better-bags');
    expect(addon).toBeDefined();
    expect(addon).toMatchObject({ name: 'Better Bags', published: true });
    expect(addon!.releases.map((r) => r.version)).toEqual(['1.0.0']);
    expect(addon!.screenshots).toHaveLength(1);
    expect(addon!.iconUrl).toMatch(/^\/uploads\//);
  });

  it("shows each addon's status badge whole, beside a long name in a narrow window", async () => {
    const cookie = await apiLogin();
    const created = await fetch(`${base}/api/addons`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/json' },
      body: JSON.stringify({
        slug: 'raid-frames-with-a-long-name',
        name: '团队框架',
        nameEn: 'Raid Frames With A Rather Long Name For The Catalogue Column',
        summary: '团队',
      }),
    });
    expect(created.status).toBe(201);
    const page = await newPage();
    await page.setViewportSize({ width: 1024, height: 900 });
    await login(page, base);
    await page.getByTestId('nav-addons').click();
    const table = page.getByTestId('addons');
    await table.getByText('Raid Frames With A Rather Long Name').waitFor();
    // Each label holds its whole word: nothing overflows it (an ellipsis would cut "PUBLISHED" to "PUBLIS…").
    const labels = await table
      .locator('.mantine-Badge-label')
      .evaluateAll((found) =>
        found.map((e) => ({ text: e.textContent, scroll: e.scrollWidth, client: e.clientWidth })),
      );
    expect(labels.map((l) => l.text)).toEqual(expect.arrayContaining(['Published']));
    for (const label of labels) expect(label.scroll, label.text ?? '').toBeLessThanOrEqual(label.client);
    await screenshot(page, '04-addons-narrow');
  });

  it('corrects every field of a published version and release, keeping their counters, with sha256 shown', async () => {
    type Version = {
      id: string;
      version: string;
      versionCode: number;
      changelogEn: string;
      minVersion: string | null;
      forceUpdate: boolean;
      sha256: string | null;
      downloadCount: number;
      launcherDownloadCount: number;
    };
    const versionOf = async () =>
      (await getJson<{ versions: Version[] }>(`${base}/api/software/app-launcher`)).versions.find(
        (v) => v.versionCode === 120,
      );
    const before = (await versionOf())!;
    expect(before.sha256).toBe(sha256(Buffer.alloc(3 * 1024 * 1024, 7)));
    expect((await fetch(`${base}/api/software/download/${before.id}`)).status).toBe(200);
    expect((await fetch(`${base}/api/software/download/${before.id}?source=launcher`)).status).toBe(200);
    await expect.poll(async () => (await versionOf())?.downloadCount, { timeout: 10_000 }).toBe(2);

    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-software').click();
    const row = page.getByTestId('version-1.2.0');
    await row.getByTestId('sha256').getByText(before.sha256!.slice(0, 12)).waitFor();
    await row.getByTestId('edit-version').click();
    const dialog = page.getByRole('dialog');
    await dialog.getByTestId('current-file').getByText(before.sha256!).waitFor();
    await dialog.getByTestId('ver-changelog-en').fill('Fixed several bugs and a crash on start');
    await dialog.getByTestId('ver-min-version').fill('1.0.0');
    await dialog.getByTestId('ver-force').click({ force: true });
    const fixed = Buffer.alloc(2 * 1024 * 1024, 9);
    await dialog
      .getByTestId('file-input')
      .setInputFiles({ name: 'launcher-setup-fixed.exe', mimeType: 'application/octet-stream', buffer: fixed });
    await dialog.getByText(`SHA-256 ${sha256(fixed)}`).waitFor();
    expect(await dialog.getByTestId('current-file').count()).toBe(0);
    await screenshot(page, '04a-version-edit', { dialog: true });
    await dialog.getByTestId('ver-submit').click();
    await row.getByTestId('sha256').getByText(sha256(fixed).slice(0, 12)).waitFor();
    expect(await row.getByTestId('downloads').textContent()).toBe('2');
    expect(await row.getByTestId('launcher-downloads').textContent()).toBe('1');
    await screenshot(page, '04b-version-edited');

    expect(await versionOf()).toMatchObject({
      id: before.id,
      changelogEn: 'Fixed several bugs and a crash on start',
      minVersion: '1.0.0',
      forceUpdate: true,
      sha256: sha256(fixed),
      downloadCount: 2,
      launcherDownloadCount: 1,
    });
    const update = await getJson<{ forceUpdate: boolean; latest: { sha256: string; fileSize: number } }>(
      `${base}/api/software/check-update?slug=app-launcher&versionCode=100`,
    );
    expect(update).toMatchObject({ forceUpdate: true, latest: { sha256: sha256(fixed), fileSize: fixed.length } });

    // A release: its changelog and its source (file → external link) change; its downloads stay.
    type Release = {
      id: string;
      version: string;
      changelogEn: string;
      downloadType: string;
      externalUrl: string | null;
      sha256: string | null;
      downloadCount: number;
    };
    const releaseOf = async () =>
      (await getJson<Release[]>(`${base}/api/releases`)).find((r) => r.version === '1.0.0')!;
    expect((await fetch(`${base}/api/download/${(await releaseOf()).id}`)).status).toBe(200);
    await expect.poll(async () => (await releaseOf()).downloadCount, { timeout: 10_000 }).toBe(1);
    await page.getByTestId('nav-addons').click();
    await page.getByText('Better Bags').click();
    const release = page.getByTestId('release-1.0.0');
    await release
      .getByTestId('sha256')
      .getByText(sha256(Buffer.alloc(200_000, 1)).slice(0, 12))
      .waitFor();
    await release.getByTestId('edit-release').click();
    await dialog.getByTestId('rel-version').fill('1.0.1');
    await dialog.getByTestId('rel-changelog-en').fill('First release, mirrored');
    await dialog.getByTestId('source-type').getByText('External URL').click();
    await dialog.getByTestId('external-url').fill('https://mirror.example.com/better-bags-1.0.1.zip');
    await dialog.getByTestId('rel-submit').click();
    await page.getByTestId('release-1.0.1').getByText('URL', { exact: true }).waitFor();
    expect(await page.getByTestId('release-1.0.1').getByTestId('downloads').textContent()).toBe('1');
    expect(await getJson<Release[]>(`${base}/api/releases`)).toContainEqual(
      // The link names no stored file: the old file's hash is not kept.
      expect.objectContaining({
        version: '1.0.1',
        changelogEn: 'First release, mirrored',
        downloadType: 'url',
        externalUrl: 'https://mirror.example.com/better-bags-1.0.1.zip',
        sha256: null,
        downloadCount: 1,
      }),
    );
  });

  it('schedules a version, a release and an article: marked as scheduled, hidden from the public until published', async () => {
    // The browser is in Shanghai (UTC+8): the operator types local times, the API gets UTC.
    const page = await newPage('en-US', 'Asia/Shanghai');
    await login(page, base);
    await page.getByTestId('nav-software').click();
    const card = page.getByTestId('package-app-launcher');
    await card.getByTestId('new-version').click();
    const dialog = page.getByRole('dialog');
    await dialog.getByTestId('ver-version').fill('1.3.0');
    await dialog.getByTestId('ver-code').fill('130');
    await dialog.getByTestId('file-input').setInputFiles({
      name: 'launcher-1.3.0.exe',
      mimeType: 'application/octet-stream',
      buffer: Buffer.alloc(100_000, 3),
    });
    await dialog.getByText(/Uploaded: launcher-1\.3\.0\.exe/).waitFor();
    await dialog.getByTestId('ver-changelog-en').fill('Season two');
    await dialog.getByTestId('publish-at').fill('2099-01-02T20:30');
    await screenshot(page, '04c-version-schedule', { dialog: true });
    await dialog.getByTestId('ver-submit').click();
    const row = page.getByTestId('version-1.3.0');
    await row.getByTestId('scheduled').getByText('Scheduled for').waitFor();
    await card.getByText('Versions: 2').waitFor();
    await screenshot(page, '04d-version-scheduled');

    type Listed = { version: string; publishAt: string | null };
    // The administrator's read (with the page's session cookie) lists scheduled rows.
    const versions = (await (await page.request.get(`${base}/api/admin/software/app-launcher`)).json()) as {
      versions: Listed[];
    };
    expect(versions.versions.find((v) => v.version === '1.3.0')?.publishAt).toBe('2099-01-02T12:30:00.000Z');
    expect(
      (await getJson<{ versions: Listed[] }>(`${base}/api/software/app-launcher`)).versions.map((v) => v.version),
    ).toEqual(['1.2.0']);
    const hidden = await getJson<{ hasUpdate: boolean; latest: { version: string } }>(
      `${base}/api/software/check-update?slug=app-launcher&versionCode=120`,
    );
    expect(hidden).toMatchObject({ hasUpdate: false, latest: { version: '1.2.0' } });

    // Publishing now: the date is cleared, the badge goes, launchers are offered it.
    await row.getByTestId('edit-version').click();
    expect(await dialog.getByTestId('publish-at').inputValue()).toBe('2099-01-02T20:30');
    await dialog.getByTestId('publish-at').fill('');
    await dialog.getByTestId('ver-submit').click();
    await row.getByTestId('scheduled').waitFor({ state: 'detached' });
    const offered = await getJson<{ hasUpdate: boolean; latest: { version: string } }>(
      `${base}/api/software/check-update?slug=app-launcher&versionCode=120`,
    );
    expect(offered).toMatchObject({ hasUpdate: true, latest: { version: '1.3.0' } });

    // A release scheduled on the addon page.
    await page.getByTestId('nav-addons').click();
    await page.getByText('Better Bags').click();
    await page.getByTestId('new-release').click();
    await dialog.getByTestId('rel-version').fill('2.0.0');
    await dialog
      .getByTestId('file-input')
      .setInputFiles({ name: 'better-bags-2.0.0.zip', mimeType: 'application/zip', buffer: Buffer.alloc(1000, 2) });
    await dialog.getByText(/Uploaded: better-bags-2\.0\.0\.zip/).waitFor();
    await dialog.getByTestId('publish-at').fill('2099-03-04T08:00');
    await dialog.getByTestId('rel-submit').click();
    await page.getByTestId('release-2.0.0').getByTestId('scheduled').waitFor();
    await screenshot(page, '04e-release-scheduled');
    expect((await getJson<{ version: string }[]>(`${base}/api/releases`)).map((r) => r.version)).not.toContain('2.0.0');

    // An article scheduled from its editor.
    await page.getByTestId('nav-articles').click();
    await page.getByTestId('new-article').click();
    await dialog.getByTestId('article-slug').fill('season-three');
    await dialog.getByTestId('article-title-zh').fill('第三赛季');
    await dialog.getByTestId('publish-at').fill('2099-05-06T10:00');
    await dialog.getByTestId('article-submit').click();
    await page.getByTestId('articles').getByText('第三赛季').waitFor();
    await page.getByTestId('articles').getByTestId('scheduled').waitFor();
    await screenshot(page, '04f-article-scheduled');
    expect((await getJson<{ slug: string }[]>(`${base}/api/articles`)).map((a) => a.slug)).not.toContain(
      'season-three',
    );
  });

  it('ramps a version with the slider, halts it, revokes it with a confirmation: check-update follows each step', async () => {
    const pkg = await getJson<{ versions: { id: string; version: string }[] }>(`${base}/api/software/app-launcher`);
    const v130 = pkg.versions.find((v) => v.version === '1.3.0')!;
    // The bucket rule of the specification, computed here independently of the service.
    const bucket = (deviceId: string) =>
      createHash('sha256').update(`${v130.id}:${deviceId}`).digest().readUInt32BE(0) % 100;
    const devices = Array.from({ length: 200 }, (_, i) => `fleet-${i}`);
    const offered = async (versionCode: number, deviceId: string) =>
      getJson<{ hasUpdate: boolean; forceUpdate: boolean; downgrade: boolean; latest: { version: string } }>(
        `${base}/api/software/check-update?slug=app-launcher&versionCode=${versionCode}&deviceId=${deviceId}`,
      );
    const offeredTo = async () => {
      const answers = await Promise.all(devices.map((d) => offered(120, d)));
      return devices.filter((_, i) => answers[i]!.latest.version === '1.3.0');
    };
    // A fleet: six launchers already on 1.3.0, four still on 1.2.0.
    for (const [i, appVersion] of [
      '1.3.0',
      '1.3.0',
      '1.3.0',
      '1.3.0',
      '1.3.0',
      '1.3.0',
      '1.2.0',
      '1.2.0',
      '1.2.0',
      '1.2.0',
    ].entries()) {
      const beat = await fetch(`${base}/api/launcher/heartbeat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ deviceId: `pc-${i}`, os: 'Windows', osVersion: '11', appVersion }),
      });
      expect(beat.status).toBe(200);
    }

    const { page, row, panel } = await openRollout('1.3.0');
    await expect.poll(() => panel.getByTestId('health-devices').textContent(), { timeout: 10_000 }).toBe('6');
    expect(await panel.getByTestId('health-online').textContent()).toBe('6');
    await panel.getByText('Devices on the previous version (1.2.0)').waitFor();
    expect(await panel.getByTestId('health-previous-devices').textContent()).toBe('4');
    await panel.locator('.recharts-line').first().waitFor();
    await screenshot(page, '04g-rollout-health', { dialog: true });

    const slider = panel.getByRole('slider');
    const ramp = async (presses: string[], percent: number) => {
      await slider.focus();
      for (const key of presses) await slider.press(key);
      await panel.getByTestId('rollout-apply').getByText(`${percent}%`).waitFor();
      await panel.getByTestId('rollout-apply').click();
      await panel
        .getByTestId('rollout-current')
        .filter({ hasText: new RegExp(`^${percent}%$`) })
        .waitFor();
    };
    await ramp(['Home', ...Array<string>(10).fill('ArrowRight')], 10);
    const at10 = await offeredTo();
    expect(at10).toEqual(devices.filter((d) => bucket(d) < 10));
    expect(at10.length).toBeGreaterThan(5);
    await row.getByText('10%').waitFor();

    await ramp(Array<string>(40).fill('ArrowRight'), 50);
    const at50 = await offeredTo();
    expect(at50).toEqual(devices.filter((d) => bucket(d) < 50));
    expect(at50).toEqual(expect.arrayContaining(at10));
    await screenshot(page, '04h-rollout-50', { dialog: true });

    // The automatic halt's thresholds are saved on the version.
    await panel.getByTestId('auto-halt').click({ force: true });
    await panel.getByLabel('Quiet after update above').fill('30');
    await panel.getByLabel('Devices counted at least').fill('5');
    await panel.getByTestId('auto-halt-save').click();
    await expect
      .poll(
        async () =>
          (
            await getJson<{ versions: { version: string; autoHalt: unknown }[] }>(`${base}/api/software/app-launcher`)
          ).versions.find((v) => v.version === '1.3.0')?.autoHalt,
        { timeout: 10_000 },
      )
      .toEqual({ maxQuietRate: 0.3, minDevices: 5 });

    // Halt: nobody new is offered 1.3.0; a launcher already on it is not sent back.
    await panel.getByTestId('rollout-halt').click();
    await panel.getByTestId('rollout-current').filter({ hasText: /^0%$/ }).waitFor();
    expect(await offeredTo()).toEqual([]);
    expect(await offered(130, at10[0]!)).toMatchObject({ hasUpdate: false, downgrade: false });
    await row.getByText('Halted').waitFor();

    // Revoke (after a confirmation): a launcher on 1.3.0 is told to go back to 1.2.0.
    await panel.getByTestId('revoke-version').click();
    await page.getByText(/Revoke 1\.3\.0\? Until it is unrevoked, it is not offered/).waitFor();
    await screenshot(page, '04i-revoke-confirm', { dialog: true });
    await page.getByTestId('confirm-yes').click();
    await panel.getByTestId('revoked-alert').scrollIntoViewIfNeeded();
    expect(await panel.getByTestId('revoked-alert').textContent()).toContain('not offered until unrevoked');
    expect(await offered(130, 'pc-0')).toMatchObject({
      hasUpdate: true,
      forceUpdate: true,
      downgrade: true,
      latest: { version: '1.2.0' },
    });
    expect((await fetch(`${base}/api/software/download/${v130.id}`)).status).toBe(410);
    await screenshot(page, '04j-revoked', { dialog: true });

    // Unrevoke and ramp to everyone: every launcher is offered 1.3.0 again.
    await panel.getByTestId('unrevoke-version').click();
    await page.getByTestId('confirm-yes').click();
    await panel.getByTestId('revoked-alert').waitFor({ state: 'detached' });
    await ramp(['End'], 100);
    expect(await offeredTo()).toEqual(devices);
    expect(await offered(130, 'pc-0')).toMatchObject({ hasUpdate: false, downgrade: false });
  });

  it('shows an automatic halt, with its reason and time, as soon as the service applies it', async () => {
    // In Chinese: the operator's language around the service's (English) halt reason.
    const { page, row, panel } = await openRollout('1.3.0', 'zh-CN');
    await panel
      .getByTestId('rollout-current')
      .filter({ hasText: /^100%$/ })
      .waitFor();
    expect(await panel.getByTestId('health-quiet').textContent()).toBe('–');

    // The heartbeat history of a bad build, where the service keeps it: six launchers took 1.3.0
    // twenty minutes ago and fell silent a minute later (the auto-halt rule saved above: > 30 % over ≥ 5 devices).
    const db = new Database(path.join(service.dir, 'app.db'));
    const since = Date.now() - 20 * 60_000;
    const insert = db.prepare(
      'INSERT INTO device_versions (device_id, app_version, first_seen_ms, last_seen_ms, quiet_from_ms) VALUES (?, ?, ?, ?, NULL)',
    );
    for (let i = 0; i < 6; i++) insert.run(`crashed-${i}`, '1.3.0', since, since + 60_000);
    db.close();

    // The panel's next health read (every 15 s) applies the halt; the panel and the row follow without a reload.
    await panel
      .getByTestId('halted-alert')
      .getByText('quietAfterUpdate 1.000 > maxQuietRate 0.3 over 6 devices')
      .waitFor({ timeout: 30_000 });
    expect(await panel.getByTestId('rollout-current').textContent()).toBe('0%');
    expect(await panel.getByTestId('health-quiet').textContent()).toBe('100%');
    await panel.getByText('已于').waitFor();
    await row.getByText('已暂停').waitFor();
    await panel.getByTestId('halted-alert').scrollIntoViewIfNeeded();
    await screenshot(page, '04k-auto-halted-zh', { dialog: true });
    expect(
      await getJson<{ latest: { version: string } }>(
        `${base}/api/software/check-update?slug=app-launcher&versionCode=120&deviceId=fleet-0`,
      ),
    ).toMatchObject({
      latest: { version: '1.2.0' },
    });
  });

  it('lists the signing keys with their fingerprints and rotates after a confirmation', async () => {
    type Key = {
      keyId: string;
      publicKey: string;
      status: string;
      endorsement: { keyId: string; signature: string } | null;
    };
    const fingerprint = (key: Key) => sha256(Buffer.from(key.publicKey, 'base64')).match(/.{4}/g)!.join(' ');
    const [first] = await getJson<Key[]>(`${base}/api/signing-keys`);
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-signing-keys').click();
    const firstRow = page.getByTestId(`key-${first!.keyId}`);
    await firstRow.getByTestId('fingerprint').getByText(fingerprint(first!)).waitFor();
    await firstRow.getByText('Active').waitFor();

    await page.getByTestId('rotate-key').click();
    await page.getByText(/Create a new signing key\?/).waitFor();
    await screenshot(page, '11-rotate-confirm', { dialog: true });
    await page.getByTestId('confirm-yes').click();
    await firstRow.getByText('Retired').waitFor();
    const keys = await getJson<Key[]>(`${base}/api/signing-keys`);
    expect(keys).toHaveLength(2);
    const next = keys.find((k) => k.keyId !== first!.keyId)!;
    expect(next).toMatchObject({ status: 'active', endorsement: { keyId: first!.keyId } });
    const nextRow = page.getByTestId(`key-${next.keyId}`);
    await nextRow.getByTestId('fingerprint').getByText(fingerprint(next)).waitFor();
    await nextRow.getByText(`signed by ${first!.keyId}`).waitFor();
    await screenshot(page, '12-signing-keys');
    await page.getByTestId('lang-switch').getByText('中文').click();
    await nextRow.getByText(`由 ${first!.keyId} 签名`).waitFor();
    await firstRow.getByText('已退役').waitFor();
    await screenshot(page, '12-signing-keys-zh');
  });

  it('writes and publishes an article with a safe live preview, and /api/articles?lang=en lists it', async () => {
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-articles').click();
    await page.getByTestId('new-article').click();
    await page.getByTestId('article-slug').fill('season-two');
    await page.getByTestId('article-title-zh').fill('第二赛季开启');
    await page.getByTestId('article-content-zh').fill('# 第二赛季\n\n欢迎回来！');
    await page.getByTestId('article-tab-en').click();
    await page.getByTestId('article-title-en').fill('Season two begins');
    await page.getByTestId('article-summary-en').fill('Everything new this season');
    await page
      .getByTestId('article-content-en')
      .fill(
        '# Season two\n\nWelcome back!\n\n<script>window.__injected = 1</script><img src=x onerror="window.__injected = 2">\n\n[click](javascript:window.__injected=3)',
      );
    const preview = page.getByTestId('article-content-en-preview');
    await preview.locator('h1', { hasText: 'Season two' }).waitFor();
    expect(await preview.locator('script, img').count()).toBe(0);
    await preview.getByText('click').click();
    expect(await page.evaluate(() => (window as unknown as { __injected?: number }).__injected)).toBeUndefined();
    await page
      .getByTestId('article-cover-input')
      .setInputFiles({ name: 'cover.png', mimeType: 'image/png', buffer: png(480, 240, [40, 200, 120]) });
    await page.getByText(/Uploaded: cover\.png/).waitFor();
    await screenshot(page, '05-article-editor', { dialog: true });
    await page.getByTestId('article-submit').click();
    await page.getByTestId('articles').getByText('Season two begins').waitFor();
    await screenshot(page, '06-articles');

    const articles = await getJson<{ slug: string; title: string; published: boolean; coverImage: string }[]>(
      `${base}/api/articles?lang=en`,
    );
    const article = articles.find((a) => a.slug === 'season-two');
    expect(article).toMatchObject({ title: 'Season two begins', published: true });
    expect(article!.coverImage).toMatch(/^\/uploads\//);
  });

  it('adds a banner and toggles it off', async () => {
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-banners').click();
    await page
      .getByTestId('banner-input')
      .setInputFiles({ name: 'banner.png', mimeType: 'image/png', buffer: png(600, 200, [200, 80, 200]) });
    const card = page.getByTestId('banner-card');
    await card.waitFor();
    await card.getByText('Enabled', { exact: true }).first().waitFor();
    const [banner] = await getJson<{ id: string; enabled: boolean }[]>(`${base}/api/banners`);
    expect(banner?.enabled).toBe(true);

    await card.getByTestId('banner-enabled').click({ force: true });
    await card.getByText('Disabled', { exact: true }).waitFor();
    await screenshot(page, '07-banners');
    await expect
      .poll(async () => (await getJson<{ id: string; enabled: boolean }[]>(`${base}/api/banners`))[0]?.enabled)
      .toBe(false);
    const enabledOnly = await getJson<{ id: string }[]>(`${base}/api/banners?enabled=1`);
    expect(enabledOnly.map((b) => b.id)).not.toContain(banner!.id);
  });

  it('adds a gallery image with bilingual titles', async () => {
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-gallery').click();
    await page
      .getByTestId('gallery-input')
      .setInputFiles({ name: 'raid.png', mimeType: 'image/png', buffer: png(400, 240, [230, 120, 60]) });
    const card = page.getByTestId('gallery-card');
    await card.waitFor();
    await card.getByTestId('gallery-title-zh').fill('团队副本');
    await card.getByTestId('gallery-title-en').fill('Raid night');
    await card.getByTestId('gallery-save').click();
    await expect
      .poll(async () => (await getJson<{ title: string }[]>(`${base}/api/gallery?lang=en`)).map((g) => g.title))
      .toEqual(['Raid night']);
    await screenshot(page, '08-gallery');
  });

  it("edits a release's dependencies, completing addon slugs from the catalogue", async () => {
    const cookie = await apiLogin();
    const write = async <T>(url: string, body: object) => {
      const res = await fetch(`${base}${url}`, {
        method: 'POST',
        headers: { cookie, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status, await res.clone().text()).toBe(201);
      return (await res.json()) as T;
    };
    await write('/api/addons', { slug: 'bag-library', name: '背包库', nameEn: 'Bag Library', summary: '库' });
    const addon = await write<{ id: string }>('/api/addons', {
      slug: 'bag-sorter',
      name: '背包整理器',
      nameEn: 'Bag Sorter',
      summary: '整理',
    });
    await write('/api/releases', {
      addonId: addon.id,
      version: '2.0.0',
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/s.zip',
    });
    const page = await newPage();
    await login(page, base);
    await page.goto(`${base}/admin/addons/${addon.id}`);
    const row = page.getByTestId('release-2.0.0');
    await row.getByTestId('edit-release').click();
    await page.getByTestId('add-dependency').click();
    // The catalogue is searched by name; the options are slugs.
    await page.getByTestId('dep-slug').fill('Library');
    await page.getByRole('option', { name: 'bag-library' }).click();
    await page.getByTestId('dep-min-version').fill('2.0');
    await page.getByTestId('dep-optional').check();
    await page.getByTestId('rel-submit').click();
    await row.getByTestId('release-dependencies').getByText('Needs bag-library ≥ 2.0 (optional)').waitFor();
    const detail = await getJson<{ releases: { version: string; dependencies: unknown }[] }>(
      `${base}/api/addons/bag-sorter`,
    );
    expect(detail.releases.find((r) => r.version === '2.0.0')?.dependencies).toEqual([
      { slug: 'bag-library', minVersion: '2.0', optional: true },
    ]);
  });

  it('registers a webhook, shows its secret once, sends a test and lists the delivery', async () => {
    const received: { event: string | undefined; signature: string | undefined }[] = [];
    const receiver = http.createServer((req, res) => {
      received.push({
        event: req.headers['x-webhook-event'] as string | undefined,
        signature: req.headers['x-webhook-signature'] as string | undefined,
      });
      req.resume();
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const address = receiver.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/hook`;
    try {
      const page = await newPage();
      await login(page, base);
      await page.getByTestId('nav-webhooks').click();
      await page.getByTestId('webhook-url').fill(url);
      await page.getByTestId('webhook-create').click();
      const secret = page.getByTestId('webhook-secret');
      await secret.getByText(/^whsec_/).waitFor();
      const row = page.getByTestId('webhook');
      await row.getByText(url).waitFor();
      await row.getByTestId('webhook-test').click();
      await row.getByTestId('webhook-test-result').getByText('Test delivered (HTTP 204)').waitFor();
      expect(received).toEqual([{ event: 'webhook.test', signature: expect.stringMatching(/^sha256=[0-9a-f]{64}$/) }]);
      await row.getByTestId('webhook-deliveries').click();
      await page.getByTestId('delivery').getByTestId('delivery-status').getByText('Delivered').waitFor();
      await screenshot(page, '16-webhooks', { dialog: true });
    } finally {
      await new Promise((resolve) => receiver.close(resolve));
    }
  });

  it('shows the delta updates the service made beside each version, with the bytes they save', async () => {
    const cookie = await apiLogin();
    const post = async <T>(url: string, body: object | FormData): Promise<T> => {
      const res = await fetch(`${base}${url}`, {
        method: 'POST',
        headers: body instanceof FormData ? { cookie } : { cookie, 'content-type': 'application/json' },
        body: body instanceof FormData ? body : JSON.stringify(body),
      });
      expect(res.ok).toBe(true);
      return (await res.json()) as T;
    };
    const upload = async (name: string, bytes: Buffer) => {
      const form = new FormData();
      form.append('file', new Blob([new Uint8Array(bytes)]), name);
      return (await post<{ filePath: string }>('/api/upload', form)).filePath;
    };
    const old = Buffer.from(Array.from({ length: 4 * 1024 * 1024 }, (_, i) => (i * 7919) % 251));
    const next = Buffer.concat([old.subarray(0, 1_000_000), Buffer.alloc(5000, 3), old.subarray(1_000_000)]);
    const pkg = await post<{ id: string }>('/api/software', { slug: 'delta-app', name: '增量', nameEn: 'Delta app' });
    await post(`/api/software/${pkg.id}/versions`, {
      version: '3.0.0',
      versionCode: 300,
      filePath: await upload('delta-app-3.0.0.exe', old),
    });
    await post(`/api/software/${pkg.id}/versions`, {
      version: '3.1.0',
      versionCode: 310,
      filePath: await upload('delta-app-3.1.0.exe', next),
    });

    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-software').click();
    const row = page.getByTestId('package-delta-app').getByTestId('version-3.1.0');
    // Made in the background within seconds; the page shows it once reloaded.
    await expect
      .poll(
        async () => {
          await page.reload();
          // count() does not wait: the version's row must be rendered before its deltas are counted.
          await row.waitFor();
          return row.getByTestId('delta-300').getByTestId('delta-saves').count();
        },
        // Generous: zstd runs at nice 19, and the suite keeps both cores busy around it.
        { timeout: 60_000, interval: 1000 },
      )
      .toBe(1);
    expect(await row.getByTestId('delta-saves').textContent()).toMatch(/^saves [\d.]+ MiB \((99|100) %\)$/);
    await screenshot(page, '16a-deltas');
  });

  it("shows whether the publisher signed a version's file, and with which key", async () => {
    const cookie = await apiLogin();
    const post = async <T>(url: string, body: object | FormData) => {
      const json = !(body instanceof FormData);
      const res = await fetch(`${base}${url}`, {
        method: 'POST',
        headers: { cookie, ...(json ? { 'content-type': 'application/json' } : {}) },
        body: json ? JSON.stringify(body) : body,
      });
      expect(res.status, await res.clone().text()).toBe(201);
      return (await res.json()) as T;
    };
    const bytes = Buffer.from('signed launcher build');
    const form = new FormData();
    form.append('file', new Blob([bytes]), 'signed-launcher.zip');
    const file = await post<{ filePath: string; sha256: string }>('/api/upload', form);
    const pkg = await post<{ id: string; slug: string }>('/api/software', { slug: 'signed-tool', name: '签名工具' });
    const key = await parseSecretKey((await generateKeyPair('')).secretKeyFile, '');
    const fileSignature = signPrehash(
      key,
      await prehash([bytes]),
      versionTrustedComment({ slug: pkg.slug, versionCode: 2, sha256: file.sha256 }),
    );
    await post(`/api/software/${pkg.id}/versions`, { version: '0.1.0', versionCode: 1, filePath: file.filePath });
    await post(`/api/software/${pkg.id}/versions`, {
      version: '0.2.0',
      versionCode: 2,
      filePath: file.filePath,
      fileSignature,
    });

    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-software').click();
    const versions = page.getByTestId(`versions-${pkg.id}`);
    await versions.getByTestId('version-0.2.0').getByTestId('file-signature-key').getByText(key.keyId).waitFor();
    await versions.getByTestId('version-0.1.0').getByTestId('file-signature').getByText('unsigned').waitFor();
    await screenshot(page, '09a-version-signatures');
  });

  it('lists the game client builds with their sizes and new bytes; revokes, unrevokes and edits the changelog', async () => {
    const cookie = await apiLogin();
    const admin = (url: string, method: string, body?: Buffer | object) =>
      fetch(`${base}${url}`, {
        method,
        headers: {
          cookie,
          'content-type': Buffer.isBuffer(body) ? 'application/octet-stream' : 'application/json',
        },
        body: body === undefined ? undefined : Buffer.isBuffer(body) ? new Uint8Array(body) : JSON.stringify(body),
      });
    const kib = (n: number, fill: number) => Buffer.alloc(n * 1024, fill);
    // Build 2 keeps Data/a.mpq, rewrites b.txt and adds c.dll: 48 of its 112 KiB are new to the store.
    const builds = [
      {
        version: '1.0.0',
        buildCode: 1,
        files: [
          ['Data/a.mpq', kib(64, 1)],
          ['b.txt', kib(32, 2)],
        ],
      },
      {
        version: '1.1.0',
        buildCode: 2,
        files: [
          ['Data/a.mpq', kib(64, 1)],
          ['b.txt', kib(32, 3)],
          ['c.dll', kib(16, 4)],
        ],
      },
    ] as const;
    for (const { version, buildCode, files } of builds) {
      const manifest = manifestOf(
        { version, buildCode },
        files.map(([path, content]) => ({ path, content })),
      );
      for (const [name, bytes] of manifest.chunks) {
        expect((await admin(`/api/admin/game/chunks/${name}`, 'PUT', bytes)).ok).toBe(true);
      }
      const created = await admin('/api/admin/game/builds', 'POST', { version, buildCode, manifest: manifest.text });
      expect(created.status, await created.clone().text()).toBe(201);
    }

    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-game').click();
    const row = page.getByTestId('build-2');
    await row.waitFor();
    expect(await row.getByTestId('build-files').textContent()).toBe('3');
    expect(await row.getByTestId('build-size').textContent()).toBe('112.0 KiB');
    expect(await row.getByTestId('build-new-bytes').textContent()).toBe('48.0 KiB');
    expect(await page.getByTestId('build-1').getByTestId('build-new-bytes').textContent()).toBe('96.0 KiB');
    // The store's total: the four distinct chunks of both builds (a.mpq's stored once), 144 KiB, as the API answers.
    await page.getByTestId('game-store').waitFor();
    expect(await page.getByTestId('game-store').textContent()).toBe(
      "The store holds 4 chunks, 144.0 KiB: every build's files, each chunk stored once.",
    );
    expect(await (await admin('/api/admin/game/store', 'GET')).json()).toEqual({ chunks: 4, bytes: 144 * 1024 });
    // The command for the next build, on this service.
    const command = await page.getByTestId('publish-command').textContent();
    expect(command).toContain(`launcher-publish game`);
    expect(command).toContain(`--server ${base}`);
    expect(command).toContain('--build-code 3');
    // The manifest's app is the service's APP_NAME, which the command asks the service for.
    expect(command).not.toContain('--app');

    // Revoked after a confirmation: marked, and its manifest is gone for launchers (410). The dialog
    // says what the Unrevoke button then undoes: not offered until unrevoked.
    await row.getByTestId('revoke-build').click();
    expect(await page.getByRole('dialog').textContent()).toContain(
      'Revoke 1.1.0? Until it is unrevoked, it is not offered, its manifest answers 410',
    );
    await page.getByTestId('confirm-yes').click();
    await row.getByTestId('build-revoked').waitFor();
    expect((await fetch(`${base}/api/game/builds/2/manifest`)).status).toBe(410);
    await screenshot(page, '19-game-revoked');
    await row.getByTestId('unrevoke-build').click();
    await page.getByTestId('confirm-yes').click();
    await row.getByTestId('build-revoked').waitFor({ state: 'detached' });
    expect((await fetch(`${base}/api/game/builds/2/manifest`)).status).toBe(200);

    await row.getByTestId('edit-build').click();
    await page.getByTestId('build-changelog-zh').fill('新副本');
    await page.getByTestId('build-changelog-en').fill('New dungeon');
    await page.getByTestId('build-submit').click();
    await row.getByTestId('build-changelog').getByText('New dungeon').waitFor();
    const check = await getJson<{ latest: { changelogZh: string; changelogEn: string } }>(
      `${base}/api/game/check-update?buildCode=1`,
    );
    expect(check.latest).toMatchObject({ changelogZh: '新副本', changelogEn: 'New dungeon' });
    await page.mouse.move(0, 0); // no SHA-256 tooltip over the rows
    await screenshot(page, '19-game');
    await page.getByTestId('lang-switch').getByText('中文').click();
    await row.getByTestId('build-changelog').getByText('新副本').waitFor();
    expect(await page.getByTestId('game-store').textContent()).toBe(
      '存储中共有 4 个分块，144.0 KiB：所有构建的文件，每个分块只存一份。',
    );
    await screenshot(page, '19-game-zh');
    await row.getByTestId('revoke-build').click();
    expect(await page.getByRole('dialog').textContent()).toContain('在取消撤回之前，它不会被推送');
    await page.getByRole('dialog').getByRole('button', { name: '取消', exact: true }).click();
  });

  it('marks a build stored before the manifest rules: a badge, the rule it breaks, in both languages; never offered', async () => {
    // An older service accepted a build of no file (issue 51): the upgrade's migration marked it, as here.
    const { text } = manifestOf({ version: '1.2.0', buildCode: 3 }, []);
    const checked = checkManifest(text, { accepted: true });
    const broken = checked.ok ? checked.broken : null;
    expect(broken).toBe('files: a build lists at least one file');
    const db = new Database(path.join(service.dir, 'app.db'));
    const at = new Date().toISOString();
    db.prepare(
      `INSERT INTO game_builds (build_code, version, manifest, manifest_sha256, manifest_size, total_size, file_count,
         chunk_count, new_bytes, created_at, updated_at, broken) VALUES (3, '1.2.0', ?, ?, ?, 0, 0, 0, 0, ?, ?, ?)`,
    ).run(text, sha256(Buffer.from(text)), Buffer.byteLength(text), at, at, broken);
    db.close();

    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-game').click();
    const row = page.getByTestId('build-3');
    await row.getByTestId('build-broken').getByText('Broken: not offered').waitFor();
    expect(await row.getByTestId('build-broken-rule').textContent()).toBe('files: a build lists at least one file');
    await row.getByTestId('build-broken').hover();
    await page
      .getByRole('tooltip')
      .getByText(/never offered it/)
      .waitFor();
    // The valid builds carry no mark.
    expect(await page.getByTestId('build-2').getByTestId('build-broken').count()).toBe(0);
    const check = await getJson<{ latest: { buildCode: number } }>(`${base}/api/game/check-update?buildCode=0`);
    expect(check.latest.buildCode).toBe(2);
    await screenshot(page, '19-game-broken');
    await page.mouse.move(0, 0);
    await page.getByTestId('lang-switch').getByText('中文').click();
    await row.getByTestId('build-broken').getByText('违规：不推送').waitFor();
    await row.getByTestId('build-broken').hover();
    await page
      .getByRole('tooltip')
      .getByText(/永远不会推送给启动器/)
      .waitFor();
  });

  it('changes the password and logs in again with it', async () => {
    const page = await newPage();
    await login(page, base);
    await page.getByTestId('nav-account').click();
    await page.getByTestId('current-password').fill(ADMIN_PASSWORD);
    await page.getByTestId('new-password').fill(ADMIN_NEW_PASSWORD);
    await page.getByTestId('change-password-submit').click();
    await page.getByTestId('password-changed').waitFor();

    // An API token is shown once, listed without its secret, and revoked after a confirmation.
    await page.getByTestId('token-name').fill('ci-publish');
    await page.getByTestId('create-token').click();
    const token = (await page.getByTestId('new-token').textContent()) ?? '';
    expect(token.length).toBeGreaterThan(20);
    const me = await fetch(`${base}/api/admin/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(me.status).toBe(200);
    await page.getByTestId('tokens').getByText('ci-publish').waitFor();
    await screenshot(page, '09-account');
    await page.getByTestId('tokens').getByRole('button', { name: 'Revoke' }).click();
    await page.getByTestId('confirm-yes').click();
    await page.getByText('No API tokens.').waitFor();
    expect((await fetch(`${base}/api/admin/tokens`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(
      401,
    );
    await page.getByTestId('logout').click();
    await page.getByTestId('login-submit').waitFor();

    await page.locator('input[name="password"]').fill(ADMIN_PASSWORD);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('login-error').waitFor();
    await page.locator('input[name="password"]').fill(ADMIN_NEW_PASSWORD);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('nav-dashboard').waitFor();
    await page.getByTestId('signed-in-as').waitFor();
    await screenshot(page, '10-logged-in-again');
  });
});

describe('team accounts, roles and two-factor in the console', () => {
  const code = (secret: string, timestamp = Date.now()) =>
    new TOTP({ secret: Secret.fromBase32(secret) }).generate({ timestamp });

  it('an owner creates an editor, who reads software without changing it and has no Team page; disable, enable, reset password', async () => {
    const page = await newPage();
    await login(page, base, ADMIN_NEW_PASSWORD);
    await page.getByTestId('nav-team').click();
    await page.getByTestId('accounts').getByText('admin').waitFor();
    await page.getByTestId('account-username').fill('erin');
    await page.getByTestId('account-password').fill('editor-pass-1');
    await page.getByTestId('account-role').click();
    await page.getByRole('option', { name: 'Editor' }).click();
    await page.getByTestId('account-create').click();
    const erin = page.getByTestId('account-erin');
    await erin.waitFor();
    expect(await erin.getByTestId('account-role-select').inputValue()).toBe('Editor');
    await erin.getByText('Off').waitFor();

    // The service's 409s reach the owner in words: a taken username, the last enabled owner.
    await page.getByTestId('account-username').fill('erin');
    await page.getByTestId('account-password').fill('editor-pass-2');
    await page.getByTestId('account-create').click();
    await page.getByText('This username is already taken: choose another.').waitFor();
    const admin = page.getByTestId('account-admin');
    await admin.getByTestId('account-role-select').click();
    await page.getByRole('option', { name: 'Publisher' }).click();
    await page.getByText('At least one enabled owner must remain: this change would leave none.').waitFor();
    expect(await admin.getByTestId('account-role-select').inputValue()).toBe('Owner');
    await screenshot(page, '11-team');

    // The editor: software is readable, every control of it disabled; articles are theirs; no Team page.
    const editor = await browser.newContext({ locale: 'en-US', viewport: { width: 1366, height: 900 } });
    const editorPage = await editor.newPage();
    await login(editorPage, base, 'editor-pass-1', 'erin');
    expect(await editorPage.getByTestId('my-role').textContent()).toBe('Editor');
    expect(await editorPage.getByTestId('nav-team').count()).toBe(0);
    await editorPage.getByTestId('nav-software').click();
    await editorPage.getByTestId('package-app-launcher').getByText('1.2.0').waitFor();
    await editorPage.getByTestId('read-only').waitFor();
    expect(await editorPage.getByTestId('new-package').isDisabled()).toBe(true);
    expect(await editorPage.locator('main').locator('button:enabled, input:enabled').count()).toBe(0);
    await screenshot(editorPage, '12-editor-software');
    await editorPage.getByTestId('nav-articles').click();
    expect(await editorPage.getByTestId('new-article').isEnabled()).toBe(true);
    expect(await editorPage.getByTestId('read-only').count()).toBe(0);
    await editorPage.goto(`${base}/admin/team`);
    await editorPage.getByTestId('owners-only').waitFor();

    // Disabled after a confirmation: the editor's session ends and the login is refused.
    await erin.getByTestId('account-disable').click();
    await page.getByTestId('confirm-yes').click();
    await expect.poll(() => erin.getByTestId('account-status').textContent()).toBe('Disabled');
    await editorPage.reload();
    await editorPage.getByTestId('login-submit').waitFor();

    // Enabled again (after a confirmation) with a new password, which the editor then logs in with.
    await erin.getByTestId('account-enable').click();
    await page.getByTestId('confirm-yes').click();
    await expect.poll(() => erin.getByTestId('account-status').textContent()).toBe('Enabled');
    await erin.getByTestId('reset-password').click();
    await page.getByTestId('reset-password-input').fill('editor-pass-2');
    await page.getByTestId('reset-password-submit').click();
    await page.getByRole('dialog').waitFor({ state: 'detached' });
    await login(editorPage, base, 'editor-pass-2', 'erin');
    await editor.close();
  });

  it('an owner reads the audit log, newest first, filtered by account and target, page after page; an editor may not', async () => {
    const page = await newPage();
    await login(page, base, ADMIN_NEW_PASSWORD);
    await page.getByTestId('nav-audit').click();
    const rows = page.getByTestId('audit-row');
    // Newest first: the login just made.
    await expect.poll(() => rows.first().locator('td').nth(3).textContent()).toBe('login');
    expect(await rows.first().locator('td').nth(1).textContent()).toBe('admin');

    // By account: only erin's records (her logins in the test above).
    await page.getByTestId('audit-actor').fill('erin');
    await expect
      .poll(async () => [...new Set(await rows.locator('td:nth-child(2)').allTextContents())])
      .toEqual(['erin']);
    // By target type, with the fields sent and the password never shown.
    await page.getByTestId('audit-actor').fill('');
    await page.getByTestId('audit-target').fill('users');
    const created = rows.filter({ hasText: 'POST /api/admin/users' }).first();
    await created.getByTestId('audit-changes').click();
    const changes = JSON.parse((await page.getByTestId('audit-changes-json').textContent()) ?? '{}') as unknown;
    expect(changes).toEqual({ username: 'erin', password: '(secret)', role: 'editor' });
    await screenshot(page, '18-audit');

    // Fifty at a time: the next page holds the records after them (the earlier tests left more than fifty).
    await page.getByTestId('audit-target').fill('');
    await expect.poll(() => rows.count()).toBe(50);
    const all = (await (await page.request.get(`${base}/api/admin/audit?limit=500`)).json()) as { action: string }[];
    expect(all.length).toBeGreaterThan(50);
    await page.getByTestId('audit-older').click();
    await expect.poll(() => rows.count()).toBe(Math.min(all.length, 100));
    expect(await rows.locator('td:nth-child(4)').allTextContents()).toEqual(all.slice(0, 100).map((r) => r.action));

    // Not for editors: no menu entry, and the page says so.
    const editor = await browser.newContext({ locale: 'en-US', viewport: { width: 1366, height: 900 } });
    const editorPage = await editor.newPage();
    await login(editorPage, base, 'editor-pass-2', 'erin');
    expect(await editorPage.getByTestId('nav-audit').count()).toBe(0);
    await editorPage.goto(`${base}/admin/audit`);
    await editorPage.getByTestId('owners-only').waitFor();
    await editor.close();
  });

  it('a publisher enrols in two-factor with the QR code; login then asks for the code', async () => {
    const page = await newPage();
    await login(page, base, ADMIN_NEW_PASSWORD);
    // Owners may give a token any role; the least (Editor) is preselected.
    await page.getByTestId('nav-account').click();
    expect(await page.getByTestId('token-role').inputValue()).toBe('Editor');
    await page.getByTestId('token-role').click();
    expect(await page.getByRole('option').allTextContents()).toEqual(['Owner', 'Publisher', 'Editor']);
    await page.keyboard.press('Escape');
    const created = await page.evaluate(async () => {
      const res = await fetch('/api/admin/users', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ username: 'pat', password: 'publisher-pass-1', role: 'publisher' }),
      });
      return res.status;
    });
    expect(created).toBe(201);
    await context!.close();

    const publisher = await newPage();
    const submitPassword = async () => {
      await publisher.locator('input[name="username"]').fill('pat');
      await publisher.locator('input[name="password"]').fill('publisher-pass-1');
      await publisher.getByTestId('login-submit').click();
    };
    await login(publisher, base, 'publisher-pass-1', 'pat');
    await publisher.getByTestId('nav-account').click();
    // A publisher's token can only be a publisher's.
    await publisher.getByTestId('token-role').click();
    expect(await publisher.getByRole('option').allTextContents()).toEqual(['Publisher']);
    await publisher.keyboard.press('Escape');

    await publisher.getByTestId('totp-enroll').click();
    await publisher.getByTestId('totp-qr').waitFor();
    const secret = (await publisher.getByTestId('totp-secret').textContent()) ?? '';
    expect(secret).toMatch(/^[A-Z2-7]{16,}$/);
    await screenshot(publisher, '13-totp-enrol');
    await publisher.getByTestId('totp-code').fill(code(secret));
    await publisher.getByTestId('totp-confirm').click();
    const recovery = publisher.getByTestId('recovery-codes');
    await recovery.waitFor();
    const codes = await recovery.locator('code').allTextContents();
    expect(codes).toHaveLength(10);
    await publisher.getByText('Recovery codes: shown only once').waitFor();
    await screenshot(publisher, '14-recovery-codes');
    await publisher.getByTestId('recovery-saved').click();
    await publisher.getByTestId('header-logout').click();

    // The password alone is not enough: the code field appears; a wrong code is told; the next code logs in.
    await submitPassword();
    await publisher.getByTestId('login-totp').waitFor();
    expect(await publisher.getByTestId('login-error').count()).toBe(0);
    await screenshot(publisher, '15-login-code');
    await publisher.getByTestId('login-totp').fill('000000');
    await publisher.getByTestId('login-submit').click();
    await expect.poll(() => publisher.getByTestId('login-error').textContent()).toContain('Wrong code');
    await publisher.getByTestId('login-totp').fill(code(secret, Date.now() + 30_000));
    await publisher.getByTestId('login-submit').click();
    await publisher.getByTestId('nav-dashboard').waitFor();
    expect(await publisher.getByTestId('my-role').textContent()).toBe('Publisher');

    // A recovery code logs in once; turning two-factor off needs the password, and then the password is enough.
    await publisher.getByTestId('header-logout').click();
    await submitPassword();
    await publisher.getByTestId('login-totp').fill(codes[0]!);
    await publisher.getByTestId('login-submit').click();
    await publisher.getByTestId('nav-account').click();
    // A new session knows the account's state from /api/admin/me, whatever the role.
    await expect.poll(() => publisher.getByTestId('totp-status').textContent()).toBe('On');
    await publisher.getByTestId('totp-disable-password').fill('publisher-pass-1');
    await publisher.getByTestId('totp-disable').click();
    await publisher.getByText('Two-factor authentication is off.').waitFor();
    await expect.poll(() => publisher.getByTestId('totp-status').textContent()).toBe('Off');
    await publisher.getByTestId('header-logout').click();
    await submitPassword();
    await publisher.getByTestId('nav-dashboard').waitFor();
  });

  it('the dashboard charts launchers online over 24 hours and 30 days, by version', async () => {
    // A month of 5-minute samples as the service's sampler records them: 42 at most today, 57 ten days ago.
    const db = new Database(path.join(service.dir, 'app.db'));
    const slot = 5 * 60 * 1000;
    const now = Math.floor(Date.now() / slot) * slot - slot;
    const sample = db.prepare('INSERT OR REPLACE INTO device_samples (at, app_version, online) VALUES (?, ?, ?)');
    const record = (at: number, byVersion: Record<string, number>) => {
      for (const [version, online] of Object.entries(byVersion))
        sample.run(new Date(at).toISOString(), version, online);
    };
    db.transaction(() => {
      // At most 21 + 11 = 32 a slot, …
      for (let at = now - 30 * 24 * 3600_000 + slot; at <= now; at += slot) {
        const online = 10 + (new Date(at).getUTCHours() % 12);
        record(at, { '2.0.0': online, '2.1.0': Math.round(online / 2) });
      }
      // … but 42 an hour ago and 57 ten days ago.
      record(now - 3600_000, { '2.0.0': 30, '2.1.0': 12 });
      record(now - 10 * 24 * 3600_000, { '2.0.0': 40, '2.1.0': 10, '2.2.0': 7 });
    })();
    db.close();

    // One area per version online in the period: the two recorded here, and whatever the service's
    // own sampler records from the launchers of earlier tests (it may add a sample while the page
    // loads: the count is bounded by what was recorded before the page asked and after it drew).
    const versionsOnline = (days: number) => {
      const read = new Database(path.join(service.dir, 'app.db'), { readonly: true });
      try {
        const row = read
          .prepare('SELECT count(DISTINCT app_version) AS n FROM device_samples WHERE at >= ? AND online > 0')
          .get(new Date(Date.now() - days * 24 * 3600_000).toISOString()) as { n: number };
        return row.n;
      } finally {
        read.close();
      }
    };
    const areas = async (days: number, before: number) => {
      const count = await history.locator('.recharts-area').count();
      expect(count).toBeGreaterThanOrEqual(before);
      expect(count).toBeLessThanOrEqual(versionsOnline(days));
    };
    const page = await newPage();
    const history = page.getByTestId('online-history');
    const dayBefore = versionsOnline(1);
    await login(page, base, ADMIN_NEW_PASSWORD);
    await expect.poll(() => history.getByTestId('history-peak').textContent()).toBe('42');
    await history.locator('.recharts-area').first().waitFor();
    await areas(1, dayBefore);
    await history.getByText('2.1.0').first().waitFor();
    await screenshot(page, '16-dashboard-history');
    const monthBefore = versionsOnline(30);
    await history.getByTestId('history-range').getByText('30 days').click();
    await expect.poll(() => history.getByTestId('history-peak').textContent()).toBe('57');
    await history.getByText('2.2.0').first().waitFor();
    await areas(30, monthBefore);
    await screenshot(page, '17-dashboard-history-30d');
  });
});
