import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceHousekeeping } from '../src/modules/devices/housekeeping.js';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';

/*
 * Privacy and retention of launcher data, and the online history (issue 12), on controlled clocks:
 * heartbeats are recorded at chosen times and housekeeping runs at chosen times.
 */

const DAY = 24 * 3600 * 1000;
const T = Date.parse('2026-06-15T12:02:00.000Z');

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp({ DEVICE_RETENTION_DAYS: '90', IP_RETENTION_DAYS: '30' });
});
afterAll(() => t.close());

async function beat(deviceId: string, at: number, appVersion = '1.0') {
  t.app.ctx.devices.record({ deviceId, appVersion, os: 'Windows', ip: '198.51.100.4' }, new Date(at));
  await t.app.ctx.devices.flush();
}

const device = (deviceId: string) =>
  t.database.db.selectFrom('devices').select(['deviceId', 'ip']).where('deviceId', '=', deviceId).executeTakeFirst();

describe('device housekeeping', () => {
  it('deletes devices unseen for DEVICE_RETENTION_DAYS and blanks IPs older than IP_RETENTION_DAYS', async () => {
    await beat('gone', T - 91 * DAY);
    await beat('quiet', T - 31 * DAY);
    await beat('recent', T - 1 * DAY);
    expect(await t.app.ctx.housekeeping.run(T)).toBe(true);
    expect(await device('gone')).toBeUndefined();
    expect(await device('quiet')).toEqual({ deviceId: 'quiet', ip: null });
    expect(await device('recent')).toEqual({ deviceId: 'recent', ip: '198.51.100.4' });
    const history = await t.database.db
      .selectFrom('deviceVersions')
      .select('deviceId')
      .where('deviceId', '=', 'gone')
      .execute();
    expect(history).toEqual([]);
  });

  it('samples online launchers by version every 5 minutes into the history, with peak and average', async () => {
    const at = T + 10 * DAY;
    for (const id of ['a', 'b', 'c']) await beat(`online-${id}`, at - 60_000, '2.0');
    await beat('online-d', at - 30_000, '2.1');
    await beat('offline', at - 10 * 60_000, '2.0');
    await t.app.ctx.housekeeping.run(at);
    // The same slot is sampled once; by the next slot only the launcher that beat again is online.
    await t.app.ctx.housekeeping.run(at + 60_000);
    await beat('online-a', at + 5 * 60_000, '2.0');
    await t.app.ctx.housekeeping.run(at + 5 * 60_000 + 1000);
    const history = await t.app.ctx.housekeeping.history(1, at + 6 * 60_000);
    expect(history.points).toEqual([
      { at: '2026-06-25T12:00:00.000Z', online: 4, byAppVersion: { '2.0': 3, '2.1': 1 } },
      { at: '2026-06-25T12:05:00.000Z', online: 1, byAppVersion: { '2.0': 1 } },
    ]);
    expect(history.peak).toBe(4);
    expect(history.average).toBe(2.5);
  });

  it('runs on one instance at a time: a second holder waits for the lease to lapse', async () => {
    const other = new DeviceHousekeeping(t.database, { deviceDays: 90, ipDays: 30 });
    const at = T + 20 * DAY;
    expect(await t.app.ctx.housekeeping.run(at)).toBe(true);
    expect(await other.run(at + 1000)).toBe(false);
    expect(await t.app.ctx.housekeeping.run(at + 60_000)).toBe(true);
    expect(await other.run(at + 60_000 + 4 * 60_000 + 1)).toBe(true);
  });

  it('never runs twice at once on one instance: a pass that outlasts the minute makes the next one skip', async () => {
    const at = T + 40 * DAY;
    const housekeeping = t.app.ctx.housekeeping;
    const first = housekeeping.runAlone(at);
    // The lease is this instance's own: only the guard keeps the second run out.
    expect(await housekeeping.runAlone(at + 60_000)).toBe(false);
    expect(await first).toBe(true);
    expect(await housekeeping.runAlone(at + 120_000)).toBe(true);
  });

  it('answers the online history to administrators, validating hours', async () => {
    const res = await admin(t, 'GET', '/api/admin/devices/online-history?hours=48');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ points: expect.any(Array), peak: expect.any(Number) });
    for (const hours of ['0', 'x', '100000']) {
      const bad = await admin(t, 'GET', `/api/admin/devices/online-history?hours=${hours}`);
      expect(bad.statusCode).toBe(400);
      expect(bad.json().error).toMatch(/hours/);
    }
    expect((await t.inject('/api/admin/devices/online-history')).statusCode).toBe(401);
  });
});
