import type { Insertable } from 'kysely';
import type { Db } from '../src/db/index.js';
import type { DevicesTable, DeviceVersionsTable } from '../src/db/schema.js';

const MINUTE_MS = 60_000;
const DAY_MS = 24 * 60 * MINUTE_MS;

/** A small deterministic generator (mulberry32): the same fleet every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Versions 1.0.120 down to 1.0.101: each older one on about two thirds of the devices of the next. */
export const SEED_VERSIONS = Array.from({ length: 20 }, (_, i) => `1.0.${120 - i}`);

/** The device id of seeded device `n`: what the heartbeat load beats for. */
export const seededDeviceId = (n: number) => `bench-device-${n}`;

/**
 * `count` devices written straight into the database (not through heartbeats), as a fleet of that
 * size looks: app versions spread over 20 releases (a few devices report none), mostly Windows,
 * `onlineShare` of them seen within the last 2 minutes and the rest over the last `maxAgeDays` days
 * (past 90, a retention sweep finds work), each with its version history row.
 */
export async function seedDevices(
  db: Db,
  count: number,
  at: number,
  { onlineShare = 0.35, maxAgeDays = 95 }: { onlineShare?: number; maxAgeDays?: number } = {},
): Promise<void> {
  const next = random(count);
  const weights = SEED_VERSIONS.map((_, i) => (2 / 3) ** i);
  const total = weights.reduce((a, b) => a + b, 0);
  const pickVersion = () => {
    let r = next() * total;
    for (let i = 0; i < weights.length; i += 1) {
      r -= weights[i] ?? 0;
      if (r <= 0) return SEED_VERSIONS[i] ?? null;
    }
    return SEED_VERSIONS[0] ?? null;
  };
  // Large transactions: on SQLite each one rewrites the index pages it touches into the log.
  const BATCH = 50_000;
  for (let start = 0; start < count; start += BATCH) {
    const devices: Array<Insertable<DevicesTable>> = [];
    const versions: Array<Insertable<DeviceVersionsTable>> = [];
    for (let n = start; n < Math.min(count, start + BATCH); n += 1) {
      const online = next() < onlineShare;
      const lastMs = Math.round(
        online ? at - next() * 2 * MINUTE_MS : at - 3 * MINUTE_MS - next() * maxAgeDays * DAY_MS,
      );
      const firstMs = Math.round(lastMs - next() * 200 * DAY_MS);
      const appVersion = next() < 0.01 ? null : pickVersion();
      const r = next();
      const os = r < 0.95 ? 'Windows' : r < 0.98 ? 'Linux' : 'macOS';
      devices.push({
        deviceId: seededDeviceId(n),
        os,
        osVersion: os === 'Windows' ? (next() < 0.6 ? '10.0.19045' : '10.0.22631') : '6.1',
        appVersion,
        ip: `10.${n >> 16}.${(n >> 8) & 255}.${n & 255}`,
        firstSeenAt: new Date(firstMs).toISOString(),
        lastSeenAt: new Date(lastMs).toISOString(),
        heartbeatCount: 1 + Math.floor(next() * 5000),
      });
      if (appVersion !== null) {
        versions.push({ deviceId: seededDeviceId(n), appVersion, firstSeenMs: firstMs, lastSeenMs: lastMs });
      }
    }
    // 250 rows a statement (under SQLite's bound-parameter limit), one transaction a batch.
    await db.transaction().execute(async (trx) => {
      for (let i = 0; i < devices.length; i += 250) {
        await trx
          .insertInto('devices')
          .values(devices.slice(i, i + 250))
          .execute();
      }
      for (let i = 0; i < versions.length; i += 250) {
        await trx
          .insertInto('deviceVersions')
          .values(versions.slice(i, i + 250))
          .execute();
      }
    });
  }
}
