import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_PASSWORD, launchBrowser, login, type Service, startService } from './browser.js';

/**
 * The console resumes a resumable (tus) upload after its tab was closed (issue 27): Chromium
 * reaches the real service through a proxy that records the upload requests and can hold a
 * PATCH's body after some bytes, so that the tab closes while the service holds part of the file.
 */

/** An upload request as the proxy saw it. */
interface Seen {
  method: string;
  /** The request's `Upload-Offset` (PATCH). */
  offset: number | null;
  /** Body bytes forwarded to the service (PATCH). */
  bytes: number;
  /** The answer's `Upload-Offset` (HEAD, PATCH) and `Location` (POST). */
  answeredOffset: number | null;
  location: string | null;
  /** The browser went away before the answer, and the request to the service was cut. */
  cut: boolean;
}

let service: Service;
let browser: Browser;
let context: BrowserContext | null = null;
let proxy: http.Server;
let base = '';
let dir = '';
const seen: Seen[] = [];
/** PATCH bodies are forwarded up to this many bytes, the rest held (null: all). */
let holdAfter: number | null = null;

const headerNumber = (value: string | string[] | undefined) => (typeof value === 'string' ? Number(value) : null);

function startProxy(target: URL): Promise<string> {
  proxy = http.createServer((req, res) => {
    const entry: Seen = {
      method: req.method ?? '',
      offset: headerNumber(req.headers['upload-offset']),
      bytes: 0,
      answeredOffset: null,
      location: null,
      cut: false,
    };
    if ((req.url ?? '').startsWith('/api/admin/uploads')) seen.push(entry);
    const upstream = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        entry.answeredOffset = headerNumber(answer.headers['upload-offset']);
        entry.location = answer.headers.location ?? null;
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    // The browser went away (a closed tab): so does the request to the service.
    res.on('close', () => {
      if (res.writableFinished) return;
      upstream.destroy();
      entry.cut = true;
    });
    const limit = req.method === 'PATCH' ? holdAfter : null;
    req.on('data', (chunk: Buffer) => {
      // Bytes past the limit are read and dropped (not left unread: the browser's connection is
      // watched for its close only while it is read), so the service waits for them.
      const part = limit === null ? chunk : chunk.subarray(0, Math.max(0, limit - entry.bytes));
      entry.bytes += part.length;
      if (part.length > 0) upstream.write(part);
    });
    req.on('end', () => upstream.end());
  });
  return new Promise((resolve) =>
    proxy.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`)),
  );
}

beforeAll(async () => {
  [service, browser] = await Promise.all([startService(), launchBrowser()]);
  base = await startProxy(new URL(service.server.url));
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-resume-'));
});
afterAll(async () => {
  await context?.close();
  await browser?.close();
  await new Promise((resolve) => proxy?.close(resolve));
  await service?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The administrator's session cookie, for what the test checks through the API. */
async function apiCookie(): Promise<string> {
  const res = await fetch(`${service.server.url}/api/admin/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password: ADMIN_PASSWORD }),
  });
  return (res.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
}

/** Opens the new-version dialog of package `slug`, fills it in and chooses `file`. */
async function chooseBuild(page: Page, slug: string, file: string): Promise<void> {
  await page.getByTestId('nav-software').click();
  await page.getByTestId(`package-${slug}`).getByTestId('new-version').click();
  const dialog = page.getByRole('dialog');
  await dialog.getByTestId('ver-version').fill('2.0.0');
  await dialog.getByTestId('ver-code').fill('200');
  await dialog.getByTestId('file-input').setInputFiles(file);
}

describe('console uploads in Chromium', () => {
  it('resumes an upload after its tab was closed: the new tab sends only the rest, and the file makes a version', async () => {
    const cookie = await apiCookie();
    const created = await fetch(`${service.server.url}/api/software`, {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/json' },
      body: JSON.stringify({ slug: 'resume-app', name: '续传', nameEn: 'Resume app' }),
    });
    expect(created.status).toBe(201);
    const SIZE = 6 * 1024 * 1024;
    const HELD_AFTER = 2 * 1024 * 1024;
    const data = randomBytes(SIZE);
    // A file on disk, chosen twice: the same name, size and modification time (tus-js-client's fingerprint).
    const file = path.join(dir, 'resume-setup.exe');
    fs.writeFileSync(file, data);

    context = await browser.newContext({ locale: 'en-US' });
    const first = await context.newPage();
    await login(first, base);
    holdAfter = HELD_AFTER;
    await chooseBuild(first, 'resume-app', file);
    // The service was sent the first bytes of the PATCH, and waits for the rest. Then the tab closes,
    // and the service's request is cut in the middle of its body.
    const patch = () => seen.find((s) => s.method === 'PATCH');
    await expect.poll(() => patch()?.bytes ?? 0, { timeout: 30_000 }).toBe(HELD_AFTER);
    const location = seen.find((s) => s.method === 'POST')?.location ?? '';
    expect(location).toMatch(/^\/api\/admin\/uploads\/[0-9a-f-]{36}$/);
    await first.close();
    await expect.poll(() => patch()?.cut, { timeout: 30_000 }).toBe(true);
    holdAfter = null;

    // What the service holds once the cut request is over: part of the file.
    const offsetNow = async () => {
      const head = await fetch(`${service.server.url}${location}`, {
        method: 'HEAD',
        headers: { cookie, 'tus-resumable': '1.0.0' },
      });
      return Number(head.headers.get('upload-offset'));
    };
    await expect.poll(offsetNow, { timeout: 30_000 }).toBeGreaterThan(0);
    const held = await offsetNow();
    expect(held).toBeLessThanOrEqual(HELD_AFTER);

    // A new tab of the same browser profile (same localStorage), the same file chosen again.
    const resumedFrom = seen.length;
    const second = await context.newPage();
    await second.goto(`${base}/admin/`);
    await second.getByTestId('nav-dashboard').waitFor();
    await chooseBuild(second, 'resume-app', file);
    const dialog = second.getByRole('dialog');
    await dialog.getByText(/Uploaded: resume-setup\.exe/).waitFor({ timeout: 60_000 });
    expect(
      await dialog.locator('[data-testid="upload-progress"] [role="progressbar"]').getAttribute('aria-valuenow'),
    ).toBe('100');

    const again = seen.slice(resumedFrom);
    // No new upload: the remembered one is asked for its offset, and only the rest is sent.
    expect(again.map((s) => s.method)).toEqual(['HEAD', 'PATCH', 'GET']);
    expect(again[0]?.answeredOffset).toBe(held);
    expect(again[1]).toMatchObject({ offset: held, bytes: SIZE - held, answeredOffset: SIZE });
    console.log(`closed tab: the service held ${held} of ${SIZE} bytes; the new tab sent ${again[1]?.bytes}`);

    await dialog.getByTestId('ver-submit').click();
    await second.getByTestId('package-resume-app').getByTestId('version-2.0.0').waitFor();
    const pkg = (await (
      await fetch(`${service.server.url}/api/admin/software/resume-app`, { headers: { cookie } })
    ).json()) as { versions: { version: string; filePath: string; fileSize: number; sha256: string }[] };
    const version = pkg.versions.find((v) => v.version === '2.0.0');
    const sha256 = createHash('sha256').update(data).digest('hex');
    expect(version).toMatchObject({ fileSize: SIZE, sha256 });
    const served = await fetch(`${service.server.url}${version?.filePath ?? ''}`);
    expect(served.status).toBe(200);
    expect(
      createHash('sha256')
        .update(Buffer.from(await served.arrayBuffer()))
        .digest('hex'),
    ).toBe(sha256);
    // Done: the console forgot the upload.
    expect(await second.evaluate(() => Object.keys(localStorage).filter((key) => key.startsWith('tus::')))).toEqual([]);
  });
});
