import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { type ServerProcess, startServer } from './helpers/process.js';

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
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await post(i % 2 === 0 ? a : b, '/api/admin/login', { username: 'admin', password: 'wrong' });
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);
  });

  it('share the bound on new devices per client address; known devices keep beating', async () => {
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
