import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { type Browser, chromium, type Page } from 'playwright-core';
import { type ServerProcess, startServer } from '../helpers/process.js';

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const SHOTS = path.join(ROOT, 'test-results');
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const ADMIN_USER = 'admin';
export const ADMIN_PASSWORD = 'console-pass-1';

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
  });
}

export interface Service {
  server: ServerProcess;
  dir: string;
  stop(): Promise<void>;
}

/** The real service on loopback with a fresh data folder (SQLite + local files). */
export async function startService(): Promise<Service> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-console-'));
  const server = await startServer({
    DATA_DIR: dir,
    ADMIN_USERNAME: ADMIN_USER,
    ADMIN_PASSWORD,
    DATABASE_URL: '',
    STORAGE: '',
    HEARTBEAT_FLUSH_MS: '50',
    CACHE_CHECK_MS: '50',
    LOGIN_RATE_LIMIT: '1000',
  });
  return {
    server,
    dir,
    async stop() {
      await server.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Saves a full-page screenshot; unless `dialog`, first waits until no dialog is open (or closing). */
export async function screenshot(page: Page, name: string, options: { dialog?: boolean } = {}): Promise<string> {
  if (!options.dialog) await page.getByRole('dialog').waitFor({ state: 'detached' });
  fs.mkdirSync(SHOTS, { recursive: true });
  const file = path.join(SHOTS, `console-${name}.png`);
  // Transitions (a dialog fading in, a progress bar filling) are finished first: the picture shows the settled page.
  await page.screenshot({ path: file, fullPage: true, animations: 'disabled' });
  return file;
}

/** Logs in through the login form and waits for the console's navigation. */
export async function login(
  page: Page,
  baseUrl: string,
  password = ADMIN_PASSWORD,
  username = ADMIN_USER,
): Promise<void> {
  await page.goto(`${baseUrl}/admin/`);
  await page.locator('input[name="username"]').fill(username);
  await page.locator('input[name="password"]').fill(password);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('nav-dashboard').waitFor();
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(buf: Buffer): number {
  let c = 0xffffffff;
  for (const byte of buf) c = CRC_TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}

/** A real PNG (diagonal gradient in `rgb`'s hue) so that previews show something. */
export function png(width: number, height: number, rgb: [number, number, number]): Buffer {
  const rows: Buffer[] = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3);
    for (let x = 0; x < width; x++) {
      const shade = 0.4 + 0.6 * ((x + y) / (width + height));
      row[1 + x * 3] = Math.round(rgb[0] * shade);
      row[2 + x * 3] = Math.round(rgb[1] * shade);
      row[3 + x * 3] = Math.round(rgb[2] * shade);
    }
    rows.push(row);
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // truecolour
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

export async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url} → ${res.status}: ${await res.text()}`);
  return (await res.json()) as T;
}
