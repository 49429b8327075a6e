import { DeleteQueryNode, type KyselyPlugin, type QueryId, sql, TableNode, UpdateQueryNode } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../src/app.js';
import type { Db } from '../src/db/index.js';
import { setClock } from '../src/domain/clock.js';
import { DeviceHousekeeping, RETENTION_STEP_ROWS } from '../src/modules/devices/housekeeping.js';
import { admin, buildSecondApp, buildTestApp, type TestApp } from './helpers/app.js';
import { ENGINE } from './helpers/db.js';

/*
 * Device figures at a large fleet (issue 29): the scans behind them run off the service's connection
 * (on SQLite a read-only connection on a worker thread), and retention works in small steps. The
 * counting and online rules stay as they were: online = a beat within 3 minutes, on any instance;
 * the stats agree with the device list. Time is the controlled clock, never a sleep.
 */

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
// Sessions age on the system clock: the controlled one starts at the real time.
const T = Date.now();

interface Stats {
  online: number;
  total: number;
  onlineByAppVersion: Array<{ appVersion: string; count: number }>;
  onlineByOs: Array<{ os: string; count: number }>;
}
interface Device {
  deviceId: string;
  appVersion: string | null;
  os: string | null;
  ip: string | null;
  online: boolean;
}

let t: TestApp;
let second: App;
let clock = T;
beforeAll(async () => {
  setClock(() => clock);
  t = await buildTestApp({ DEVICE_RETENTION_DAYS: '90', IP_RETENTION_DAYS: '30' });
  second = await buildSecondApp(t);
});
afterAll(async () => {
  setClock(null);
  await second.close();
  await t.close();
});
afterEach(async () => {
  await t.database.db.deleteFrom('deviceVersions').execute();
  await t.database.db.deleteFrom('devices').execute();
  await t.database.db.deleteFrom('deviceSamples').execute();
});

/** A heartbeat at `at` through `app`'s buffer, written by its flush. */
async function beat(app: App, deviceId: string, at: number, appVersion = '1.0', os = 'Windows') {
  app.ctx.devices.record({ deviceId, appVersion, os, ip: '198.51.100.7' }, new Date(at));
  await app.ctx.devices.flush();
}

async function stats(): Promise<Stats> {
  const res = await admin(t, 'GET', '/api/admin/devices/stats');
  expect(res.statusCode).toBe(200);
  return res.json<Stats>();
}

async function list(query = ''): Promise<Device[]> {
  const res = await admin(t, 'GET', `/api/admin/devices?limit=10000${query}`);
  expect(res.statusCode).toBe(200);
  return res.json<Device[]>();
}

/** The stats as the device list derives them: what the two must agree on. */
function statsOfList(devices: Device[]): Stats {
  const online = devices.filter((d) => d.online);
  const tally = (key: (d: Device) => string) => {
    const counts = new Map<string, number>();
    for (const d of online) counts.set(key(d), (counts.get(key(d)) ?? 0) + 1);
    return [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  };
  return {
    online: online.length,
    total: devices.length,
    onlineByAppVersion: tally((d) => d.appVersion ?? '').map(([appVersion, count]) => ({ appVersion, count })),
    onlineByOs: tally((d) => d.os ?? '').map(([os, count]) => ({ os, count })),
  };
}

async function expectAgreement(expected: { online: number; total: number }) {
  const [s, devices] = [await stats(), await list()];
  expect({ online: s.online, total: s.total }).toEqual(expected);
  // Equal counts may come in either order (engines sort a missing version differently).
  const unordered = (x: Stats) => ({
    ...x,
    onlineByAppVersion: [...x.onlineByAppVersion].sort((a, b) => (a.appVersion < b.appVersion ? -1 : 1)),
    onlineByOs: [...x.onlineByOs].sort((a, b) => (a.os < b.os ? -1 : 1)),
  });
  expect(unordered(s)).toEqual(unordered(statsOfList(devices)));
  expect((await list('&online=1')).map((d) => d.deviceId).sort()).toEqual(
    devices
      .filter((d) => d.online)
      .map((d) => d.deviceId)
      .sort(),
  );
  return s;
}

describe('device stats against the device list and the online rule', () => {
  it('counts a device online for 3 minutes after its last beat on either instance, then offline as time passes', async () => {
    await beat(t.app, 'a', T - 2 * MINUTE, '1.0');
    await beat(second, 'b', T - 1 * MINUTE, '1.1', 'Linux');
    await beat(second, 'c', T - 10 * MINUTE, '1.0');
    clock = T;
    expect(await expectAgreement({ online: 2, total: 3 })).toMatchObject({
      onlineByAppVersion: [
        { appVersion: '1.0', count: 1 },
        { appVersion: '1.1', count: 1 },
      ],
      onlineByOs: [
        { os: 'Linux', count: 1 },
        { os: 'Windows', count: 1 },
      ],
    });
    // 'a' beat exactly 3 minutes before: still online; a millisecond later it is not.
    clock = T + MINUTE;
    await expectAgreement({ online: 2, total: 3 });
    clock = T + MINUTE + 1;
    await expectAgreement({ online: 1, total: 3 });
    clock = T + 2 * MINUTE + 1;
    await expectAgreement({ online: 0, total: 3 });
    // The second instance answers the same figures.
    const other = await second.server.inject({ url: '/api/admin/devices/stats', headers: { cookie: t.cookie } });
    expect(other.json<Stats>()).toEqual(await stats());
  });

  it('moves a device to its new app version when it reports one, on whichever instance', async () => {
    clock = T;
    await beat(t.app, 'a', T - MINUTE, '1.0');
    await beat(t.app, 'b', T - MINUTE, '1.0');
    expect((await expectAgreement({ online: 2, total: 2 })).onlineByAppVersion).toEqual([
      { appVersion: '1.0', count: 2 },
    ]);
    await beat(second, 'b', T - 30_000, '2.0');
    expect((await expectAgreement({ online: 2, total: 2 })).onlineByAppVersion).toEqual([
      { appVersion: '1.0', count: 1 },
      { appVersion: '2.0', count: 1 },
    ]);
  });

  it('drops devices deleted by retention from the total, and blanks addresses of devices that went quiet since the last run', async () => {
    clock = T;
    // More devices than one retention step changes, so that the sweep takes several.
    const old = Array.from({ length: 250 }, (_, i) => ({
      deviceId: `old-${i}`,
      firstSeenAt: new Date(T - 100 * DAY).toISOString(),
      lastSeenAt: new Date(T - 91 * DAY + i).toISOString(),
      ip: '198.51.100.9',
      heartbeatCount: 1,
    }));
    await t.database.db.insertInto('devices').values(old).execute();
    await beat(t.app, 'quiet', T - 29 * DAY);
    await beat(t.app, 'online', T - MINUTE);
    await expectAgreement({ online: 1, total: 252 });
    expect(await t.app.ctx.housekeeping.run(T)).toBe(true);
    await expectAgreement({ online: 1, total: 2 });
    const ipOf = async (deviceId: string) => (await list()).find((d) => d.deviceId === deviceId)?.ip;
    expect(await ipOf('quiet')).toBe('198.51.100.7');
    // Two days on, 'quiet' is past the address retention: a later run blanks it, and again after it
    // beat once more and went quiet again.
    clock = T + 2 * DAY;
    expect(await t.app.ctx.housekeeping.run(clock)).toBe(true);
    expect(await ipOf('quiet')).toBeNull();
    await beat(t.app, 'quiet', clock);
    expect(await ipOf('quiet')).toBe('198.51.100.7');
    clock += 31 * DAY;
    expect(await t.app.ctx.housekeeping.run(clock)).toBe(true);
    expect(await ipOf('quiet')).toBeNull();
    await expectAgreement({ online: 0, total: 2 });
  });
});

describe('device figures off the service connection', () => {
  it('answers the stats, the list and the online count from committed data while a write transaction is open', async () => {
    clock = T;
    await beat(t.app, 'committed', T - MINUTE);
    // On SQLite the service has one connection: a read on it would wait for this transaction to
    // end, which waits for the read. The figures come from another connection, and see only what
    // was committed.
    await t.database.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('devices')
        .values({
          deviceId: 'uncommitted',
          firstSeenAt: new Date(T).toISOString(),
          lastSeenAt: new Date(T).toISOString(),
          heartbeatCount: 1,
        })
        .execute();
      const figures = await t.app.ctx.devices.stats();
      expect({ online: figures.online, total: figures.total }).toEqual({ online: 1, total: 1 });
      expect(await t.app.ctx.devices.countOnline()).toBe(1);
      const listed = JSON.parse(await t.app.ctx.devices.listJson({ onlineOnly: false, limit: 100 })) as Device[];
      expect(listed.map((d) => d.deviceId)).toEqual(['committed']);
    });
    await expectAgreement({ online: 2, total: 2 });
  });

  it.runIf(ENGINE === 'sqlite')(
    'reads through a read-only connection (a worker thread), never the service one',
    async () => {
      expect(t.database.reads).not.toBe(t.database.db);
      await expect(sql`delete from devices`.execute(t.database.reads)).rejects.toThrow(/readonly/);
    },
  );

  it.runIf(ENGINE === 'sqlite')(
    'groups online devices from the covering index of last_seen_at, not from the table',
    async () => {
      const since = new Date(T).toISOString();
      for (const column of ['app_version', 'os']) {
        const plan = await sql<{
          detail: string;
        }>`explain query plan select ${sql.ref(column)}, count(*) from devices where last_seen_at >= ${since} group by ${sql.ref(column)}`.execute(
          t.database.db,
        );
        expect(plan.rows.map((r) => r.detail).join('\n')).toMatch(/USING COVERING INDEX devices_seen_version_os_idx/);
      }
    },
  );

  it('lists more devices than one page holds in order, each once', async () => {
    clock = T;
    const many = Array.from({ length: 2345 }, (_, i) => ({
      deviceId: `d-${String(i).padStart(5, '0')}`,
      firstSeenAt: new Date(T - DAY).toISOString(),
      // Pairs of devices share a time: the order goes on by deviceId across page boundaries.
      lastSeenAt: new Date(T - Math.floor(i / 2) * 1000).toISOString(),
      heartbeatCount: 1,
    }));
    await t.database.db.insertInto('devices').values(many.slice(0, 1000)).execute();
    await t.database.db.insertInto('devices').values(many.slice(1000, 2000)).execute();
    await t.database.db.insertInto('devices').values(many.slice(2000)).execute();
    const listed = await list();
    expect(listed.map((d) => d.deviceId)).toEqual(many.map((d) => d.deviceId));
    const some = await admin(t, 'GET', '/api/admin/devices?limit=1500');
    expect(some.json<Device[]>().map((d) => d.deviceId)).toEqual(many.slice(0, 1500).map((d) => d.deviceId));
    await expectAgreement({ online: 362, total: 2345 });
  });
});

/**
 * `db`, recording each delete and update it runs: its table, the rows it changed, and the turn of
 * the event loop it ran in (a count that a repeating `setImmediate` advances until `stop`).
 */
function recordingWrites(db: Db) {
  const writes: Array<{ table: string; rows: number; turn: number }> = [];
  const tables = new Map<QueryId, string>();
  let turn = 0;
  let ticking = true;
  const tick = () => {
    turn += 1;
    if (ticking) setImmediate(tick);
  };
  tick();
  const recorder: KyselyPlugin = {
    transformQuery({ node, queryId }) {
      const target = DeleteQueryNode.is(node) ? node.from.froms[0] : UpdateQueryNode.is(node) ? node.table : undefined;
      if (target !== undefined && TableNode.is(target)) tables.set(queryId, target.table.identifier.name);
      return node;
    },
    transformResult({ queryId, result }) {
      const table = tables.get(queryId);
      tables.delete(queryId);
      if (table !== undefined) writes.push({ table, rows: Number(result.numAffectedRows ?? 0n), turn });
      return Promise.resolve(result);
    },
  };
  return { db: db.withPlugin(recorder), writes, stop: () => (ticking = false) };
}

describe('retention over a large backlog', () => {
  it('deletes and blanks it in writes of a bounded size, each in its own turn of the event loop', async () => {
    clock = T;
    // Each kind of work is 2.5 times as many rows as one write may change at most.
    const n = Math.round(2.5 * RETENTION_STEP_ROWS);
    const at = (ms: number) => new Date(ms).toISOString();
    const rows = (prefix: string, lastSeenMs: (i: number) => number) =>
      Array.from({ length: n }, (_, i) => ({
        deviceId: `${prefix}-${i}`,
        firstSeenAt: at(T - 200 * DAY),
        lastSeenAt: at(lastSeenMs(i)),
        ip: '198.51.100.9',
        heartbeatCount: 1,
      }));
    const gone = rows('gone', (i) => T - 91 * DAY - i * MINUTE);
    const quiet = rows('quiet', (i) => T - 31 * DAY - i * MINUTE);
    const db = t.database.db;
    for (let i = 0; i < n; i += 500) {
      await db
        .insertInto('devices')
        .values([...gone.slice(i, i + 500), ...quiet.slice(i, i + 500)])
        .execute();
      await db
        .insertInto('deviceVersions')
        .values(
          gone.slice(i, i + 500).map((d) => ({
            deviceId: d.deviceId,
            appVersion: '1.0',
            firstSeenMs: T - 200 * DAY,
            lastSeenMs: Date.parse(d.lastSeenAt),
          })),
        )
        .execute();
      await db
        .insertInto('deviceSamples')
        .values(
          gone
            .slice(i, i + 500)
            .map((d, j) => ({ at: at(T - 91 * DAY - (i + j) * 5 * MINUTE), appVersion: '1.0', online: 1 })),
        )
        .execute();
    }
    await beat(t.app, 'recent', T - MINUTE);

    // The app's own housekeeping holds the lease from the runs of the tests before.
    await db.deleteFrom('jobLeases').execute();
    const recording = recordingWrites(db);
    const housekeeping = new DeviceHousekeeping({ ...t.database, db: recording.db }, { deviceDays: 90, ipDays: 30 });
    try {
      expect(await housekeeping.run(T)).toBe(true);
    } finally {
      recording.stop();
    }

    // The rules: old devices gone with their history and samples, quiet ones without an address.
    const left = await db.selectFrom('devices').select(['deviceId', 'ip']).orderBy('deviceId').execute();
    expect(left.length).toBe(n + 1);
    expect(left.filter((d) => d.deviceId.startsWith('quiet-')).every((d) => d.ip === null)).toBe(true);
    expect(left.find((d) => d.deviceId === 'recent')?.ip).toBe('198.51.100.7');
    expect(await db.selectFrom('deviceVersions').select('deviceId').execute()).toEqual([{ deviceId: 'recent' }]);
    const samples = await db
      .selectFrom('deviceSamples')
      .select('at')
      .where('at', '<', at(T - 90 * DAY))
      .execute();
    expect(samples).toEqual([]);

    // The steps: every table's work took several writes, none over the bound, and no two writes
    // ran in the same turn of the event loop (each let the rest of the process run before the next).
    const writes = recording.writes.filter((w) => w.table !== 'job_leases');
    for (const table of ['device_versions', 'devices', 'device_samples']) {
      const mine = writes.filter((w) => w.table === table);
      expect(mine.reduce((sum, w) => sum + w.rows, 0)).toBe(table === 'devices' ? 2 * n : n);
      expect(mine.length).toBeGreaterThanOrEqual(3);
    }
    expect(Math.max(...writes.map((w) => w.rows))).toBeLessThanOrEqual(RETENTION_STEP_ROWS);
    for (let i = 1; i < writes.length; i += 1) expect(writes[i]?.turn).toBeGreaterThan(writes[i - 1]?.turn ?? 0);
  });
});
