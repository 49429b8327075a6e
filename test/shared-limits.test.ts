import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createTestDatabase, ENGINE, type TestDatabase } from './helpers/db.js';
import { type ServerProcess, startServer } from './helpers/process.js';
import { REDIS_URL, redisNamespace, redisWanted } from './helpers/redis.js';
import { HOUR_MS, inOneWindow, MINUTE_MS } from './helpers/windows.js';

/*
 * Per-client bounds hold across instances (issue 12): two service processes on one database share
 * the login throttle and the bound on new devices per client address, instead of doubling them.
 */

let dir = '';
let database: TestDatabase;
let a: ServerProcess;
let b: ServerProcess;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-limits-'));
  database = await createTestDatabase(dir);
  const env = {
    DATA_DIR: dir,
    ADMIN_PASSWORD: 'limits-password-1',
    LOGIN_RATE_LIMIT: '4',
    DEVICES_PER_IP_HOUR: '3',
    ...(database.config.kind === 'postgres' ? { DATABASE_URL: database.config.url } : {}),
  };
  // The second instance starts once the first has migrated the shared database.
  a = await startServer(env);
  b = await startServer(env);
}, 60_000);
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await database.drop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const post = (server: ServerProcess, url: string, body: object) =>
  fetch(`${server.url}${url}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('two instances, one database', () => {
  it('share the login throttle', async () => {
    await inOneWindow(MINUTE_MS);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await post(i % 2 === 0 ? a : b, '/api/admin/login', { username: 'admin', password: 'wrong' });
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);
  });

  it('share the bound on new devices per client address; known devices keep beating', async () => {
    await inOneWindow(HOUR_MS);
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await post(i % 2 === 0 ? a : b, '/api/launcher/heartbeat', { deviceId: `shared-${i}` });
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    // A device admitted through A keeps beating through B.
    expect((await post(b, '/api/launcher/heartbeat', { deviceId: 'shared-0' })).status).toBe(200);
  });
});

describe.runIf(ENGINE === 'sqlite' && (await redisWanted()))(
  'two instances with databases of their own, one Redis (REDIS_URL)',
  () => {
    const namespace = redisNamespace();
    const dirs: string[] = [];
    let c: ServerProcess;
    let d: ServerProcess;

    beforeAll(async () => {
      const env = (name: string) => {
        const folder = fs.mkdtempSync(path.join(os.tmpdir(), `lds-redis-${name}-`));
        dirs.push(folder);
        return {
          DATA_DIR: folder,
          ADMIN_PASSWORD: 'limits-password-1',
          LOGIN_RATE_LIMIT: '4',
          DEVICES_PER_IP_HOUR: '3',
          REDIS_URL,
          REDIS_PREFIX: namespace.prefix,
        };
      };
      // Nothing is shared but Redis: the bounds can only hold across the two through it.
      c = await startServer(env('c'));
      d = await startServer(env('d'));
    }, 60_000);
    afterAll(async () => {
      await Promise.all([c?.stop(), d?.stop()]);
      await namespace.drop();
      for (const folder of dirs) fs.rmSync(folder, { recursive: true, force: true });
    });

    it('share the login throttle and the bound on new devices', async () => {
      await inOneWindow(MINUTE_MS);
      await inOneWindow(HOUR_MS);
      const logins: number[] = [];
      for (let i = 0; i < 6; i++) {
        const res = await post(i % 2 === 0 ? c : d, '/api/admin/login', { username: 'admin', password: 'wrong' });
        logins.push(res.status);
        await res.text();
      }
      expect(logins).toEqual([401, 401, 401, 401, 429, 429]);
      const beats: number[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await post(i % 2 === 0 ? c : d, '/api/launcher/heartbeat', { deviceId: `redis-${i}` });
        beats.push(res.status);
        await res.text();
      }
      expect(beats).toEqual([200, 200, 200, 429, 429]);
      expect((await post(d, '/api/launcher/heartbeat', { deviceId: 'redis-0' })).status).toBe(200);
      // The counts are in Redis, under the prefix, and expire with their windows.
      const redis = new Redis(REDIS_URL, { keyPrefix: namespace.prefix });
      try {
        const keys = await redis.keys(`${namespace.prefix}*`);
        expect(keys.some((k) => k.startsWith(`${namespace.prefix}rate:login:`))).toBe(true);
        expect(keys.some((k) => k.startsWith(`${namespace.prefix}hour:devices:`))).toBe(true);
        for (const key of keys) expect(await redis.pttl(key.slice(namespace.prefix.length))).toBeGreaterThan(0);
      } finally {
        redis.disconnect();
      }
    });

    it('is not ready while Redis does not answer, and says so', async () => {
      const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-redis-away-'));
      dirs.push(folder);
      // A port nothing listens on.
      const away = await startServer({
        DATA_DIR: folder,
        ADMIN_PASSWORD: 'limits-password-1',
        REDIS_URL: 'redis://127.0.0.1:1',
      });
      try {
        const ready = await fetch(`${away.url}/readyz`);
        expect(ready.status).toBe(503);
        expect(await ready.json()).toEqual({ error: 'Redis does not answer' });
        expect((await fetch(`${away.url}/healthz`)).status).toBe(200);
      } finally {
        await away.stop();
      }
    });
  },
);
