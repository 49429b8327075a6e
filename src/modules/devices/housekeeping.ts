import { randomUUID } from 'node:crypto';
import { setImmediate } from 'node:timers/promises';
import { type RawBuilder, sql } from 'kysely';
import type { DatabaseHandle, Db } from '../../db/index.js';
import { takeLease } from '../../db/jobs.js';
import { now as clockNow } from '../../domain/clock.js';
import { OFFLINE_AFTER_MS } from './service.js';

const DAY_MS = 24 * 3600 * 1000;
/** Online launchers are sampled on this grid (UTC). */
export const SAMPLE_EVERY_MS = 5 * 60 * 1000;
/** A lease outlives a run by far; a crashed holder's lease lapses within it. */
const LEASE_MS = 4 * 60 * 1000;
const JOB = 'device-housekeeping';
/** Rows a retention pass finds at a time (a read off the event loop, see `DatabaseHandle.reads`). */
const FIND_ROWS = 2500;
/** The most rows one retention write changes, and how many the first write of a kind does. */
export const RETENTION_STEP_ROWS = 1000;
const FIRST_STEP_ROWS = 100;
/**
 * What a retention write should take: on SQLite it holds the event loop for as long (the service's
 * connection answers synchronously), and how long depends on the disk and on the machine's load.
 */
const STEP_AIM_MS = 5;

/**
 * Retention in small steps: `find` answers up to FIND_ROWS keys of rows due (off the event loop),
 * `change` writes them a step at a time, one statement per turn of the event loop, rechecking the
 * condition (a device may have beaten since). Until `find` comes back short. Each step is sized by
 * how long the last one took: scaled towards STEP_AIM_MS (at most doubled at once), between 1 and
 * RETENTION_STEP_ROWS rows, so a write that the disk or a busy machine slowed down makes the next
 * ones smaller at once.
 */
async function inSteps<K>(find: () => Promise<K[]>, change: (keys: K[]) => Promise<unknown>): Promise<void> {
  let rows = FIRST_STEP_ROWS;
  for (;;) {
    const keys = await find();
    for (let i = 0; i < keys.length;) {
      const step = keys.slice(i, i + rows);
      const started = performance.now();
      await change(step);
      const ms = performance.now() - started;
      rows = Math.min(
        RETENTION_STEP_ROWS,
        Math.max(1, Math.round(rows * Math.min(2, STEP_AIM_MS / Math.max(ms, 0.1)))),
      );
      i += step.length;
      await setImmediate();
    }
    if (keys.length < FIND_ROWS) return;
  }
}

export interface Retention {
  /** Devices not seen for this long are deleted, with their samples and version history. */
  deviceDays: number;
  /** Stored client addresses of devices not seen for this long are blanked. */
  ipDays: number;
}

/**
 * Launcher data kept no longer than needed, and the online history the dashboard charts: on one
 * instance at a time (a lease in the shared database), every run samples online launchers by app
 * version into the current 5-minute slot and applies the retention periods. Time is an input.
 */
export class DeviceHousekeeping {
  private readonly holder = randomUUID();
  private timer: NodeJS.Timeout | null = null;
  /** Whether a run started by `runAlone` is going. */
  private running = false;
  private readonly db: Db;
  private readonly reads: Db;
  /**
   * Where a row of `devices` is stored: SQLite's rowid (the table is kept in its order), else the key.
   */
  private readonly position: RawBuilder<number | string>;
  /** Every device last seen before this had its address blanked by this instance already. */
  private ipsBlankedBefore: string | null = null;

  constructor(
    database: Pick<DatabaseHandle, 'db' | 'reads' | 'engine'>,
    private readonly retention: Retention,
  ) {
    this.db = database.db;
    this.reads = database.reads;
    this.position = database.engine === 'sqlite' ? sql`rowid` : sql`device_id`;
  }

  /** Runs every minute from now on (each instance tries; the lease lets one through). */
  start(onError: (err: unknown) => void): void {
    this.timer = setInterval(() => void this.runAlone().catch(onError), 60_000);
    this.timer.unref();
    void this.runAlone().catch(onError);
  }

  /**
   * `run`, unless this instance's previous one is still going (a first pass over a large backlog can
   * outlast the minute): then none, false. The lease keeps other instances out, not this one.
   */
  async runAlone(at = clockNow()): Promise<boolean> {
    if (this.running) return false;
    this.running = true;
    try {
      return await this.run(at);
    } finally {
      this.running = false;
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** One run at `at`; answers false when another instance holds the lease. */
  async run(at = clockNow()): Promise<boolean> {
    if (!(await takeLease(this.db, JOB, this.holder, at, LEASE_MS))) return false;
    await this.sample(at);
    const devicesBeforeMs = at - this.retention.deviceDays * DAY_MS;
    const devicesBefore = new Date(devicesBeforeMs).toISOString();
    const ipsBefore = new Date(at - this.retention.ipDays * DAY_MS).toISOString();
    await inSteps(
      () =>
        this.reads
          .selectFrom('deviceVersions')
          .select(['deviceId', 'appVersion'])
          .where('lastSeenMs', '<', devicesBeforeMs)
          .limit(FIND_ROWS)
          .execute(),
      (keys) =>
        this.db
          .deleteFrom('deviceVersions')
          .where((eb) =>
            eb(
              eb.refTuple('deviceId', 'appVersion'),
              'in',
              keys.map((k) => eb.tuple(k.deviceId, k.appVersion)),
            ),
          )
          .where('lastSeenMs', '<', devicesBeforeMs)
          .execute(),
    );
    await inSteps(
      () =>
        this.reads
          .selectFrom('devices')
          .select('deviceId')
          .where('lastSeenAt', '<', devicesBefore)
          .orderBy('lastSeenAt')
          .limit(FIND_ROWS)
          .execute(),
      (found) =>
        this.db
          .deleteFrom('devices')
          .where(
            'deviceId',
            'in',
            found.map((d) => d.deviceId),
          )
          .where('lastSeenAt', '<', devicesBefore)
          .execute(),
    );
    // Only the devices that went quiet since this instance's last pass still have an address to blank.
    // They are found in the order the table keeps them (each find goes on after the last one), so
    // that a write rewrites few pages of the table: in the order of their age, each address would cost
    // a page of its own (a first pass over a million devices wrote 2 GB of SQLite's log).
    let after: number | string | null = null;
    await inSteps(
      async () => {
        let query = this.reads
          .selectFrom('devices')
          .select(['deviceId', this.position.as('position')])
          .where('lastSeenAt', '<', ipsBefore)
          .where('ip', 'is not', null)
          .orderBy(this.position)
          .limit(FIND_ROWS);
        if (this.ipsBlankedBefore !== null) query = query.where('lastSeenAt', '>=', this.ipsBlankedBefore);
        if (after !== null) query = query.where(this.position, '>', after);
        const found = await query.execute();
        after = found.at(-1)?.position ?? after;
        return found;
      },
      (found) =>
        this.db
          .updateTable('devices')
          .set({ ip: null })
          .where(
            'deviceId',
            'in',
            found.map((d) => d.deviceId),
          )
          .where('lastSeenAt', '<', ipsBefore)
          .execute(),
    );
    this.ipsBlankedBefore = ipsBefore;
    await inSteps(
      () =>
        this.reads
          .selectFrom('deviceSamples')
          .select(['at', 'appVersion'])
          .where('at', '<', devicesBefore)
          .orderBy('at')
          .limit(FIND_ROWS)
          .execute(),
      (keys) =>
        this.db
          .deleteFrom('deviceSamples')
          .where((eb) =>
            eb(
              eb.refTuple('at', 'appVersion'),
              'in',
              keys.map((k) => eb.tuple(k.at, k.appVersion)),
            ),
          )
          .execute(),
    );
    return true;
  }

  /** Online launchers by app version into the 5-minute slot of `at` (once per slot). */
  private async sample(at: number): Promise<void> {
    const slot = new Date(Math.floor(at / SAMPLE_EVERY_MS) * SAMPLE_EVERY_MS).toISOString();
    const since = new Date(at - OFFLINE_AFTER_MS).toISOString();
    const rows = await this.reads
      .selectFrom('devices')
      .select((eb) => [sql<string>`coalesce(app_version, '')`.as('appVersion'), eb.fn.countAll<number>().as('online')])
      .where('lastSeenAt', '>=', since)
      .groupBy('appVersion')
      .execute();
    const values = rows.map((r) => ({ at: slot, appVersion: r.appVersion, online: Number(r.online) }));
    // An empty slot is recorded too: "nobody online" is a point of the chart.
    if (values.length === 0) values.push({ at: slot, appVersion: '', online: 0 });
    await this.db
      .insertInto('deviceSamples')
      .values(values)
      .onConflict((oc) => oc.columns(['at', 'appVersion']).doNothing())
      .execute();
  }

  /**
   * Online launchers over the last `hours`, one point per sample slot (total and by app version),
   * with the peak and the average of the totals.
   */
  async history(hours: number, at = clockNow()) {
    const since = new Date(at - hours * 3600 * 1000).toISOString();
    const rows = await this.db
      .selectFrom('deviceSamples')
      .select(['at', 'appVersion', 'online'])
      .where('at', '>=', since)
      .orderBy('at')
      .orderBy('appVersion')
      .execute();
    const points = new Map<string, { at: string; online: number; byAppVersion: Record<string, number> }>();
    for (const row of rows) {
      const point = points.get(row.at) ?? { at: row.at, online: 0, byAppVersion: {} };
      point.online += row.online;
      if (row.online > 0) point.byAppVersion[row.appVersion] = row.online;
      points.set(row.at, point);
    }
    const series = [...points.values()];
    const totals = series.map((p) => p.online);
    return {
      points: series,
      peak: totals.length === 0 ? 0 : Math.max(...totals),
      average: totals.length === 0 ? 0 : Math.round((totals.reduce((a, b) => a + b, 0) / totals.length) * 10) / 10,
    };
  }
}
