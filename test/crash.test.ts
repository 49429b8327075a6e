import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, ENGINE, type TestDatabase } from './helpers/db.js';
import { type ServerProcess, startServer } from './helpers/process.js';

/*
 * kill -9 in the middle of a load of administrator writes, counted downloads and heartbeats, five
 * times (issue 9): every write answered 2xx is there after a restart, every answered download is
 * counted, heartbeats lose at most the flush window, and SQLite's integrity check says ok.
 */

const PASSWORD = 'crash-password-1';
const FLUSH_MS = 200;
const ROUNDS = 5;

let dir = '';
let database: TestDatabase;
let env: Record<string, string> = {};

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-crash-'));
  database = await createTestDatabase(dir);
  env = {
    DATA_DIR: dir,
    ADMIN_PASSWORD: PASSWORD,
    HEARTBEAT_FLUSH_MS: String(FLUSH_MS),
    DEVICES_PER_IP_HOUR: '0',
    LOGIN_RATE_LIMIT: '1000',
    ...(database.config.kind === 'postgres' ? { DATABASE_URL: database.config.url } : {}),
  };
});
afterAll(async () => {
  await database.drop();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function loginCookie(server: ServerProcess): Promise<string> {
  const res = await fetch(`${server.url}/api/admin/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password: PASSWORD }),
  });
  expect(res.status).toBe(200);
  return (res.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
}

async function json<T>(server: ServerProcess, url: string, cookie: string, body?: object): Promise<T> {
  const res = await fetch(`${server.url}${url}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { cookie, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

describe('kill -9 under load', () => {
  it(`keeps every acknowledged write across ${ROUNDS} crashes`, async () => {
    const banners = new Set<string>();
    const beats = new Map<string, number>();
    let downloads = 0;
    let versionId = '';
    const content = Buffer.alloc(64 * 1024, 7);

    for (let round = 0; round <= ROUNDS; round++) {
      const server = await startServer(env);
      const cookie = await loginCookie(server);
      if (round === 0) {
        const form = new FormData();
        form.append('file', new Blob([content]), 'setup.exe');
        const uploaded = await fetch(`${server.url}/api/upload`, { method: 'POST', headers: { cookie }, body: form });
        const { filePath } = (await uploaded.json()) as { filePath: string };
        const pkg = await json<{ id: string }>(server, '/api/software', cookie, { slug: 'crash', name: '崩溃' });
        versionId = (
          await json<{ id: string }>(server, `/api/software/${pkg.id}/versions`, cookie, {
            version: '1',
            versionCode: 1,
            filePath,
          })
        ).id;
      } else {
        // What the previous round acknowledged survived its kill -9.
        const listed = await json<Array<{ id: string }>>(server, '/api/banners', cookie);
        const present = new Set(listed.map((b) => b.id));
        expect([...banners].filter((id) => !present.has(id))).toEqual([]);
        const detail = await json<{ versions: Array<{ id: string; downloadCount: number }> }>(
          server,
          '/api/software/crash',
          cookie,
        );
        expect(detail.versions.find((v) => v.id === versionId)?.downloadCount).toBeGreaterThanOrEqual(downloads);
        const devices = await json<Array<{ deviceId: string }>>(server, '/api/admin/devices?limit=10000', cookie);
        const seen = new Set(devices.map((d) => d.deviceId));
        expect([...beats.keys()].filter((id) => !seen.has(id))).toEqual([]);
        beats.clear();
      }
      if (round === ROUNDS) {
        await server.stop('SIGTERM');
        break;
      }

      let stop = false;
      const acked: Array<{ device: string; at: number }> = [];
      const worker = async (w: number) => {
        for (let n = 0; !stop; n++) {
          try {
            const kind = n % 3;
            if (kind === 0) {
              const res = await fetch(`${server.url}/api/banners`, {
                method: 'POST',
                headers: { cookie, 'content-type': 'application/json' },
                body: JSON.stringify({ imageUrl: `/uploads/r${round}-w${w}-${n}.png`, sortOrder: n }),
              });
              if (res.status === 201) banners.add(((await res.json()) as { id: string }).id);
            } else if (kind === 1) {
              const res = await fetch(`${server.url}/api/software/download/${versionId}`);
              const body = Buffer.from(await res.arrayBuffer());
              if (res.status === 200 && body.length === content.length) downloads += 1;
            } else {
              const device = `r${round}-w${w}-${n}`;
              const res = await fetch(`${server.url}/api/launcher/heartbeat`, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({ deviceId: device, appVersion: '1' }),
              });
              if (res.status === 200) acked.push({ device, at: performance.now() });
            }
          } catch {
            // the process is gone: the write was not acknowledged
          }
        }
      };
      const load = Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
      // Kill at a random moment once the load is well under way (the machine may be slow).
      while (acked.length < 30 || banners.size === 0) await new Promise((r) => setTimeout(r, 50));
      // …and late enough that those first heartbeats are past the flush window.
      await new Promise((r) => setTimeout(r, 3 * FLUSH_MS + 100 + Math.random() * 700));
      const killedAt = performance.now();
      await server.stop('SIGKILL');
      stop = true;
      await load;
      // Heartbeats acknowledged well before the kill were flushed; the last window may be lost.
      for (const { device, at } of acked) if (at < killedAt - 3 * FLUSH_MS) beats.set(device, at);
      expect(beats.size).toBeGreaterThan(0);

      if (ENGINE === 'sqlite') {
        const db = new Database(path.join(dir, 'app.db'));
        try {
          expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
        } finally {
          db.close();
        }
      }
    }
    expect(banners.size).toBeGreaterThan(ROUNDS);
    expect(downloads).toBeGreaterThan(ROUNDS);
  }, 180_000);
});
