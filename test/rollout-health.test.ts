import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type App, buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { setClock } from '../src/domain/clock.js';
import { RolloutService } from '../src/modules/software/rollout.js';
import { LocalStorage } from '../src/storage/local.js';
import { ADMIN, admin, buildTestApp, createPackage, createVersion, login, type TestApp } from './helpers/app.js';
import { bucketOf } from './helpers/bucket.js';

/*
 * Simulated fleets of launchers: heartbeats and check-updates through the public API, on a controlled
 * clock that advances a minute per round (nothing sleeps).
 */

const MINUTE = 60_000;
let t: TestApp;
let clock = Date.now();

beforeAll(async () => {
  setClock(() => clock);
  t = await buildTestApp();
});
afterAll(async () => {
  setClock(null);
  await t.close();
});

interface Launcher {
  deviceId: string;
  appVersion: string;
  versionCode: number;
  /** Simulated minutes after its update during which it sends nothing (a crash and a restart later). */
  silentMinutes?: [number, number];
  updatedAt?: number;
}

async function beat(launcher: Launcher) {
  const res = await t.inject({
    method: 'POST',
    url: '/api/launcher/heartbeat',
    payload: { deviceId: launcher.deviceId, os: 'Windows', appVersion: launcher.appVersion },
  });
  expect(res.statusCode).toBe(200);
}

/** One minute of the fleet: each launcher checks for an update (installing it), then beats unless silent. */
async function minute(fleet: Launcher[], slug: string, versions: Map<number, string>) {
  for (const launcher of fleet) {
    const res = await t.inject(
      `/api/software/check-update?slug=${slug}&versionCode=${launcher.versionCode}&deviceId=${launcher.deviceId}`,
    );
    const answer = res.json<{ hasUpdate: boolean; latest: { versionCode: number } }>();
    if (answer.hasUpdate) {
      launcher.versionCode = answer.latest.versionCode;
      launcher.appVersion = versions.get(answer.latest.versionCode) ?? '';
      launcher.updatedAt = clock;
    }
    const sinceUpdate = launcher.updatedAt === undefined ? -1 : Math.round((clock - launcher.updatedAt) / MINUTE);
    const [from, to] = launcher.silentMinutes ?? [Infinity, Infinity];
    if (!(sinceUpdate >= from && sinceUpdate < to)) await beat(launcher);
  }
  await t.app.ctx.devices.flush();
  clock += MINUTE;
}

function health(versionId: string) {
  return admin(t, 'GET', `/api/admin/software/versions/${versionId}/rollout`);
}

describe('rollout health and the automatic halt', () => {
  it('measures a crashing release against the previous one and halts it once the condition holds', async () => {
    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器' });
    const external = { downloadType: 'url', externalUrl: 'https://cdn.example.test/x.exe' };
    const v1 = await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, ...external });
    const versions = new Map([
      [100, '1.0.0'],
      [110, '1.1.0'],
    ]);
    const fleet: Launcher[] = Array.from({ length: 40 }, (_, i) => ({
      deviceId: `fleet-${i}`,
      appVersion: '1.0.0',
      versionCode: 100,
    }));
    for (let m = 0; m < 12; m++) await minute(fleet, 'app-launcher', versions);

    const created = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
      version: '1.1.0',
      versionCode: 110,
      ...external,
      rolloutPercent: 50,
      autoHalt: { maxQuietRate: 0.2, minDevices: 5 },
    });
    expect(created.json()).toMatchObject({ autoHalt: { maxQuietRate: 0.2, minDevices: 5 }, haltedAt: null });
    const v2 = created.json<{ id: string; createdAt: string }>();
    const inRollout = fleet.filter((l) => bucketOf(v2.id, l.deviceId) < 50);
    // Every other device of the rollout crashes on the new version a minute after updating, for 5
    // minutes: chosen once the rollout's devices are known (they follow the version's random id), so
    // that the share is over the limit whatever the draw (every other device of the fleet once gave 3 of 15).
    for (const [i, launcher] of inRollout.entries()) if (i % 2 === 0) launcher.silentMinutes = [2, 7];
    const crashed = inRollout.filter((l) => l.silentMinutes !== undefined);
    expect(inRollout.length).toBeGreaterThan(5);

    // Before ten minutes have passed no device qualifies.
    await minute(fleet, 'app-launcher', versions);
    const early = (await health(v2.id)).json();
    expect(early).toMatchObject({ rolloutPercent: 50, quietAfterUpdate: null, devicesOnVersion: inRollout.length });

    for (let m = 1; m < 12; m++) await minute(fleet, 'app-launcher', versions);
    const res = await health(v2.id);
    expect(res.statusCode).toBe(200);
    const figures = res.json<Record<string, unknown> & { timeline: Record<string, unknown>[] }>();
    expect(figures).toMatchObject({
      publishedAt: v2.createdAt,
      devicesOnVersion: inRollout.length,
      onlineOnVersion: inRollout.length,
      quietAfterUpdate: crashed.length / inRollout.length,
      previous: { version: '1.0.0', devicesOnVersion: 40 - inRollout.length, quietAfterUpdate: 0 },
      // Halted by this read: the share is over 0.2 with at least 5 devices counted.
      rolloutPercent: 0,
      haltedAt: expect.any(String),
      haltReason: expect.stringContaining('quietAfterUpdate'),
    });
    expect(figures.timeline).toHaveLength(48);
    const last = figures.timeline[47]!;
    expect(last).toEqual({
      at: expect.any(String),
      devicesOnVersion: inRollout.length,
      devicesOnPrevious: 40 - inRollout.length,
    });
    // At the publication the first updaters count on both (their last heartbeat on 1.0.0 was a minute before).
    expect(figures.timeline[0]).toMatchObject({ devicesOnVersion: inRollout.length, devicesOnPrevious: 40 });
    // Every point as the definition counts it from the stored history: first heartbeat on the version at
    // or before, last one at most 3 minutes before (the crashed devices drop out and come back).
    const history = await t.app.ctx.db.selectFrom('deviceVersions').selectAll().execute();
    const activeOn = (appVersion: string, at: number) =>
      history.filter(
        (h) => h.appVersion === appVersion && Number(h.firstSeenMs) <= at && Number(h.lastSeenMs) >= at - 3 * MINUTE,
      ).length;
    const expected = figures.timeline.map((point) => {
      const at = Date.parse(point.at as string);
      return { at: point.at, devicesOnVersion: activeOn('1.1.0', at), devicesOnPrevious: activeOn('1.0.0', at) };
    });
    expect(figures.timeline).toEqual(expected);
    expect(new Set(expected.map((p) => p.devicesOnPrevious)).size).toBe(2);

    const version = (await admin(t, 'GET', '/api/admin/software/app-launcher')).json<{
      versions: Record<string, unknown>[];
    }>();
    expect(version.versions[0]).toMatchObject({ id: v2.id, rolloutPercent: 0, haltedAt: figures.haltedAt });
    // No new device is offered the halted version; devices on it keep it.
    const newcomer = Array.from({ length: 100 }, (_, i) => `new-${i}`).find((d) => bucketOf(v2.id, d) < 50)!;
    const offered = await t.inject(`/api/software/check-update?slug=app-launcher&versionCode=100&deviceId=${newcomer}`);
    expect(offered.json()).toMatchObject({ hasUpdate: false, latest: { versionCode: 100 } });
    const kept = await t.inject(
      `/api/software/check-update?slug=app-launcher&versionCode=110&deviceId=${inRollout[0]!.deviceId}`,
    );
    expect(kept.json()).toMatchObject({ hasUpdate: false, downgrade: false });
    expect((await health(v1.id)).json()).toMatchObject({ previous: null, quietAfterUpdate: 0 });
  });

  it('does not halt a healthy release, and the periodic sweep halts a sick one without a health read', async () => {
    const pkg = await createPackage(t, { slug: 'app-launcher-patch', name: '补丁' });
    const external = { downloadType: 'url', externalUrl: 'https://cdn.example.test/p.zip' };
    await createVersion(t, pkg.id, { version: '2.0.0', versionCode: 200, ...external });
    const healthy = await createVersion(t, pkg.id, {
      version: '2.1.0',
      versionCode: 210,
      ...external,
      autoHalt: { maxQuietRate: 0.1, minDevices: 3 },
    });
    const versions = new Map([
      [200, '2.0.0'],
      [210, '2.1.0'],
      [220, '2.2.0'],
    ]);
    const fleet: Launcher[] = Array.from({ length: 6 }, (_, i) => ({
      deviceId: `patch-${i}`,
      appVersion: '2.0.0',
      versionCode: 200,
    }));
    for (let m = 0; m < 12; m++) await minute(fleet, 'app-launcher-patch', versions);
    expect((await health(healthy.id)).json()).toMatchObject({
      rolloutPercent: 100,
      quietAfterUpdate: 0,
      haltedAt: null,
    });

    const sick = await createVersion(t, pkg.id, {
      version: '2.2.0',
      versionCode: 220,
      ...external,
      autoHalt: { maxQuietRate: 0.5, minDevices: 3 },
    });
    for (const launcher of fleet) launcher.silentMinutes = [1, 30];
    for (let m = 0; m < 12; m++) await minute(fleet, 'app-launcher-patch', versions);
    await new RolloutService(t.app.ctx).sweep();
    const rows = (await admin(t, 'GET', '/api/admin/software/app-launcher-patch')).json<{
      versions: { id: string; rolloutPercent: number; haltedAt: string | null }[];
    }>();
    expect(rows.versions.find((v) => v.id === sick.id)).toMatchObject({
      rolloutPercent: 0,
      haltedAt: expect.any(String),
    });
    expect(rows.versions.find((v) => v.id === healthy.id)).toMatchObject({ rolloutPercent: 100, haltedAt: null });
  });

  it('counts every timeline point exactly, for histories a millisecond either side of the points', async () => {
    const pkg = await createPackage(t, { slug: 'timeline-edges', name: '边界' });
    const external = { downloadType: 'url', externalUrl: 'https://cdn.example.test/x.exe' };
    const version = (
      await admin(t, 'POST', `/api/software/${pkg.id}/versions`, { version: '7.0.0', versionCode: 700, ...external })
    ).json<{ id: string; createdAt: string }>();
    const from = Date.parse(version.createdAt);
    clock = from + 47 * 61_003 + 5; // a span the 47 intervals do not divide
    const point = (i: number) => from + Math.floor((i * (clock - from)) / 47);
    const history = Array.from({ length: 480 }, (_, k) => {
      const firstSeenMs = point(k % 48) + ((k % 3) - 1);
      const lastSeenMs = Math.max(firstSeenMs, point((k * 7) % 48) - 3 * MINUTE + ((Math.floor(k / 3) % 3) - 1));
      return { deviceId: `edge-${k}`, appVersion: '7.0.0', firstSeenMs, lastSeenMs, quietFromMs: null };
    });
    await t.app.ctx.db.insertInto('deviceVersions').values(history).execute();
    const { timeline } = (await health(version.id)).json<{
      timeline: { at: string; devicesOnVersion: number; devicesOnPrevious: number }[];
    }>();
    expect(timeline.map((p) => Date.parse(p.at))).toEqual(Array.from({ length: 48 }, (_, i) => point(i)));
    expect(timeline.map((p) => p.devicesOnVersion)).toEqual(
      timeline.map(
        (p) =>
          history.filter((h) => h.firstSeenMs <= Date.parse(p.at) && h.lastSeenMs >= Date.parse(p.at) - 3 * MINUTE)
            .length,
      ),
    );
    expect(new Set(timeline.map((p) => p.devicesOnVersion)).size).toBeGreaterThan(10);
  });

  it('check-update answers are re-signed before they are an hour old', async () => {
    const first = (await t.inject('/api/software/check-update?slug=app-launcher')).json<{ signedAt: string }>();
    clock += 31 * MINUTE;
    const later = (await t.inject('/api/software/check-update?slug=app-launcher')).json<{ signedAt: string }>();
    expect(Date.parse(later.signedAt)).toBeGreaterThan(Date.parse(first.signedAt));
    expect(clock - Date.parse(later.signedAt)).toBeLessThan(60 * 60 * 1000);
  });

  it('keeps rollout state across a restart', async () => {
    const before = (await admin(t, 'GET', '/api/admin/software/app-launcher')).json<{ versions: { id: string }[] }>();
    const id = before.versions[0]!.id;
    const figures = (await health(id)).json();
    await t.app.close();
    const config = loadConfig({ DATA_DIR: t.dir, ADMIN_USERNAME: ADMIN.username, ADMIN_PASSWORD: ADMIN.password });
    const restarted: App = await buildApp({
      config: { ...config, database: t.testDb.config },
      database: t.database,
      storage: new LocalStorage(path.join(t.dir, 'uploads')),
      logger: false,
    });
    try {
      const cookie = await login(restarted, ADMIN.username, ADMIN.password);
      const get = (url: string) => restarted.server.inject({ url, headers: { cookie } });
      expect((await get('/api/admin/software/app-launcher')).json()).toEqual(before);
      expect((await get(`/api/admin/software/versions/${id}/rollout`)).json()).toEqual(figures);
    } finally {
      t.app = restarted;
    }
  });
});
