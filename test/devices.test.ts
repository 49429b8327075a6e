import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';
import { ENGINE } from './helpers/db.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

const beat = (payload: unknown, headers: Record<string, string> = {}) =>
  t.inject({
    method: 'POST',
    url: '/api/launcher/heartbeat',
    headers: { 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });

async function until<T>(read: () => Promise<T>, ok: (value: T) => boolean, ms = 2000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (ok(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('POST /api/launcher/heartbeat', () => {
  it('answers {ok:true} with no-store, needs no authentication, and shows in the device list within 2 s', async () => {
    const started = Date.now();
    const res = await beat({ deviceId: 'dev-a', os: 'Windows', osVersion: '10.0.19045', appVersion: '1.2.0' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ok: true });
    expect(res.headers['cache-control']).toBe('no-store');
    const devices = await until(
      async () => (await admin(t, 'GET', '/api/admin/devices')).json(),
      (list: Array<{ deviceId: string }>) => list.some((d) => d.deviceId === 'dev-a'),
    );
    expect(Date.now() - started).toBeLessThan(2000);
    expect(devices.find((d: { deviceId: string }) => d.deviceId === 'dev-a')).toEqual({
      deviceId: 'dev-a',
      os: 'Windows',
      osVersion: '10.0.19045',
      appVersion: '1.2.0',
      ip: '127.0.0.1',
      firstSeenAt: expect.any(String),
      lastSeenAt: expect.any(String),
      heartbeatCount: 1,
      online: true,
    });
  });

  it('counts every heartbeat of a device, keeps firstSeenAt and takes the newest fields', async () => {
    await beat({ deviceId: 'dev-b', appVersion: '1.0.0', os: 'Windows' });
    await t.app.ctx.devices.flush();
    const first = (await admin(t, 'GET', '/api/admin/devices'))
      .json()
      .find((d: { deviceId: string }) => d.deviceId === 'dev-b');
    await beat({ deviceId: 'dev-b', appVersion: '1.1.0' });
    await beat({ deviceId: 'dev-b', appVersion: '1.2.0' });
    await t.app.ctx.devices.flush();
    const after = (await admin(t, 'GET', '/api/admin/devices'))
      .json()
      .find((d: { deviceId: string }) => d.deviceId === 'dev-b');
    expect(after).toMatchObject({
      heartbeatCount: 3,
      appVersion: '1.2.0',
      os: 'Windows',
      firstSeenAt: first.firstSeenAt,
    });
    expect(after.lastSeenAt >= first.lastSeenAt).toBe(true);
  });

  it('takes the client IP from the connection, and from X-Forwarded-For only with TRUST_PROXY', async () => {
    await beat({ deviceId: 'dev-ip' }, { 'x-forwarded-for': '203.0.113.9' });
    await t.app.ctx.devices.flush();
    const list = (await admin(t, 'GET', '/api/admin/devices')).json();
    expect(list.find((d: { deviceId: string }) => d.deviceId === 'dev-ip').ip).toBe('127.0.0.1');
    const proxied = await buildTestApp({ TRUST_PROXY: 'true' });
    try {
      await proxied.inject({
        method: 'POST',
        url: '/api/launcher/heartbeat',
        headers: { 'x-forwarded-for': '203.0.113.9' },
        payload: { deviceId: 'dev-ip' },
      });
      await proxied.app.ctx.devices.flush();
      const devices = (await admin(proxied, 'GET', '/api/admin/devices')).json();
      expect(devices[0].ip).toBe('203.0.113.9');
    } finally {
      await proxied.close();
    }
  });

  it('accepts JSON sent as text/plain (sendBeacon)', async () => {
    const res = await beat(JSON.stringify({ deviceId: 'beacon' }), { 'content-type': 'text/plain;charset=UTF-8' });
    expect(res.statusCode).toBe(200);
  });

  it('refuses a missing or invalid deviceId, wrong types, over-long fields and non-JSON bodies with 400', async () => {
    const bad: unknown[] = [
      {},
      { deviceId: '' },
      { deviceId: 42 },
      { deviceId: null },
      { deviceId: 'x'.repeat(129) },
      { deviceId: 'tab\there' },
      { deviceId: '   ' },
      { deviceId: 'ok', os: 7 },
      { deviceId: 'ok', appVersion: 'v'.repeat(129) },
      { deviceId: 'ok', osVersion: null },
      'not json',
      '[1,2]',
    ];
    for (const payload of bad) {
      const res = await beat(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json(), JSON.stringify(payload)).toEqual({ error: expect.any(String) });
    }
    expect((await beat('not json', { 'content-type': 'text/plain' })).statusCode).toBe(400);
    const noBody = await t.inject({ method: 'POST', url: '/api/launcher/heartbeat' });
    expect(noBody.statusCode).toBe(400);
    expect((await beat({ deviceId: 'x'.repeat(128) })).statusCode).toBe(200);
    expect((await beat({ deviceId: '设备-中文-id' })).statusCode).toBe(200);
  });
});

describe('device administration', () => {
  it('derives online from lastSeenAt within 3 minutes, and breaks online devices down by version and OS', async () => {
    const other = await buildTestApp();
    try {
      const send = (payload: object) =>
        other.inject({ method: 'POST', url: '/api/launcher/heartbeat', payload: { ...payload } });
      await send({ deviceId: 'w1', os: 'Windows', appVersion: '2.0' });
      await send({ deviceId: 'w2', os: 'Windows', appVersion: '2.0' });
      await send({ deviceId: 'm1', os: 'macOS', appVersion: '1.9' });
      await send({ deviceId: 'old', os: 'Linux', appVersion: '1.0' });
      await other.app.ctx.devices.flush();
      const ago = (ms: number) => new Date(Date.now() - ms).toISOString();
      await other.database.db
        .updateTable('devices')
        .set({ lastSeenAt: ago(3 * 60_000 + 1000) })
        .where('deviceId', '=', 'old')
        .execute();
      await other.database.db
        .updateTable('devices')
        .set({ lastSeenAt: ago(2 * 60_000 + 50_000) })
        .where('deviceId', '=', 'm1')
        .execute();
      const stats = await admin(other, 'GET', '/api/admin/devices/stats');
      expect(stats.json()).toEqual({
        online: 3,
        total: 4,
        onlineByAppVersion: [
          { appVersion: '2.0', count: 2 },
          { appVersion: '1.9', count: 1 },
        ],
        onlineByOs: [
          { os: 'Windows', count: 2 },
          { os: 'macOS', count: 1 },
        ],
      });
      const list = (await admin(other, 'GET', '/api/admin/devices')).json();
      expect(list.map((d: { deviceId: string }) => d.deviceId).at(-1)).toBe('old');
      expect(list.find((d: { deviceId: string }) => d.deviceId === 'old').online).toBe(false);
      expect(list.find((d: { deviceId: string }) => d.deviceId === 'm1').online).toBe(true);
      const seen = list.map((d: { lastSeenAt: string }) => d.lastSeenAt);
      expect(seen).toEqual([...seen].sort().reverse());
      const online = (await admin(other, 'GET', '/api/admin/devices?online=1')).json();
      expect(online.map((d: { deviceId: string }) => d.deviceId).sort()).toEqual(['m1', 'w1', 'w2']);
      expect((await admin(other, 'GET', '/api/admin/devices?limit=2')).json()).toHaveLength(2);
      expect((await admin(other, 'GET', '/api/admin/devices?limit=0')).statusCode).toBe(400);
      expect((await admin(other, 'GET', '/api/admin/devices?limit=x')).statusCode).toBe(400);
      expect((await other.inject('/api/admin/devices')).statusCode).toBe(401);
      expect((await other.inject('/api/admin/devices/stats')).statusCode).toBe(401);
    } finally {
      await other.close();
    }
  });

  it('writes a burst of heartbeats from many devices as batches, counting each one', async () => {
    const other = await buildTestApp();
    try {
      const sends = Array.from({ length: 1500 }, (_, i) =>
        other.inject({ method: 'POST', url: '/api/launcher/heartbeat', payload: { deviceId: `burst-${i % 1200}` } }),
      );
      await Promise.all(sends);
      await other.app.ctx.devices.flush();
      const rows = await other.database.db
        .selectFrom('devices')
        .select((eb) => [eb.fn.countAll<number>().as('devices'), eb.fn.sum<number>('heartbeatCount').as('beats')])
        .executeTakeFirstOrThrow();
      expect(Number(rows.devices)).toBe(1200);
      expect(Number(rows.beats)).toBe(1500);
    } finally {
      await other.close();
    }
  });
});

describe('heartbeat flushes and the event loop', () => {
  // SQLite writes in the service's thread: a flush of many devices must not hold the event loop
  // for all of its statements at once (PostgreSQL's statements wait for the network anyway).
  it.skipIf(ENGINE === 'postgres')('lets other work run between the statements of a large flush', async () => {
    const other = await buildTestApp();
    try {
      for (let i = 0; i < 2500; i += 1) {
        other.app.ctx.devices.record({ deviceId: `turns-${i}`, appVersion: '1.0', ip: '127.0.0.1' });
      }
      const order: string[] = [];
      setImmediate(() => order.push('other work'));
      await other.app.ctx.devices.flush();
      order.push('flushed');
      expect(order).toEqual(['other work', 'flushed']);
      const written = await other.database.db
        .selectFrom('devices')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow();
      expect(Number(written.n)).toBe(2500);
    } finally {
      await other.close();
    }
  });
});

describe('heartbeat flush statements', () => {
  // The flush's statements are compiled once and filled in per use (src/db/compile-once.ts), in
  // slices of 1,024 rows and then halving sizes: every device must get its own values, whatever
  // slice it falls in.
  it('writes each device of a large flush with its own values, in every slice', async () => {
    const other = await buildTestApp();
    try {
      const count = 2_345;
      for (let i = 0; i < count; i += 1) {
        other.app.ctx.devices.record({
          deviceId: `own-${i}`,
          os: `os-${i}`,
          osVersion: `${i}.0`,
          appVersion: `1.${i}`,
          ip: `10.0.${i >> 8}.${i & 255}`,
        });
      }
      await other.app.ctx.devices.flush();
      const devices = await other.database.db.selectFrom('devices').selectAll().execute();
      const versions = await other.database.db.selectFrom('deviceVersions').selectAll().execute();
      expect(devices).toHaveLength(count);
      expect(versions).toHaveLength(count);
      for (const row of devices) {
        const i = Number(row.deviceId.slice('own-'.length));
        expect(row).toMatchObject({
          os: `os-${i}`,
          osVersion: `${i}.0`,
          appVersion: `1.${i}`,
          ip: `10.0.${i >> 8}.${i & 255}`,
          heartbeatCount: 1,
        });
      }
      for (const row of versions) expect(row.appVersion).toBe(`1.${row.deviceId.slice('own-'.length)}`);
    } finally {
      await other.close();
    }
  });
});

describe('GET /api/server-time', () => {
  it('answers the server clock as ISO 8601 and epoch milliseconds, not cacheable', async () => {
    const before = Date.now();
    const res = await t.inject('/api/server-time');
    const after = Date.now();
    expect(res.headers['cache-control']).toBe('no-store');
    const body = res.json();
    expect(Number.isInteger(body.epochMs)).toBe(true);
    expect(body.epochMs).toBeGreaterThanOrEqual(before);
    expect(body.epochMs).toBeLessThanOrEqual(after);
    expect(body.serverTime).toBe(new Date(body.epochMs).toISOString());
  });
});
