import { setImmediate } from 'node:timers/promises';
import { type Insertable, sql } from 'kysely';
import type { DatabaseHandle, Db, Engine } from '../../db/index.js';
import { type CompiledOnce, compileOnce, slot } from '../../db/compile-once.js';
import type { DeviceRow, DevicesTable, DeviceVersionsTable } from '../../db/schema.js';
import type { SharedLimits } from '../../http/shared-limits.js';
import { now as clockNow } from '../../domain/clock.js';

export const OFFLINE_AFTER_MS = 3 * 60 * 1000;

export interface Heartbeat {
  deviceId: string;
  os?: string | undefined;
  osVersion?: string | undefined;
  appVersion?: string | undefined;
  ip: string;
}

interface Pending {
  deviceId: string;
  os: string | null;
  osVersion: string | null;
  appVersion: string | null;
  ip: string;
  firstSeenAt: string;
  lastSeenAt: string;
  heartbeatCount: number;
}

/** What a flush records of a device's current app version (rollout health); times in epoch ms. */
interface PendingVersion {
  /** First heartbeat on this version since the last flush. */
  sinceMs: number;
  lastMs: number;
  /** Start of the first silence over `OFFLINE_AFTER_MS` between two of those heartbeats. */
  quietFromMs: number | null;
}

/** A row of `device_versions` as a flush writes it. */
interface VersionRow {
  deviceId: string;
  appVersion: string;
  firstSeenMs: number;
  lastSeenMs: number;
  quietFromMs: number | null;
}

/** Columns of a row type with their PostgreSQL types, for `unnest`. */
type Columns<R> = ReadonlyArray<readonly [keyof R & string, 'text' | 'integer' | 'bigint']>;

const DEVICE_COLUMNS = [
  ['deviceId', 'text'],
  ['os', 'text'],
  ['osVersion', 'text'],
  ['appVersion', 'text'],
  ['ip', 'text'],
  ['firstSeenAt', 'text'],
  ['lastSeenAt', 'text'],
  ['heartbeatCount', 'integer'],
] as const satisfies Columns<Pending>;

const VERSION_COLUMNS = [
  ['deviceId', 'text'],
  ['appVersion', 'text'],
  ['firstSeenMs', 'bigint'],
  ['lastSeenMs', 'bigint'],
  ['quietFromMs', 'bigint'],
] as const satisfies Columns<VersionRow>;

/** `select * from unnest(…)` of one typed array parameter per column (`arrays`: the values or their slots). */
function unnest<R>(arrays: Record<string, unknown>, columns: Columns<R>) {
  return sql`select * from unnest(${sql.join(columns.map(([key, type]) => sql`${arrays[key]}::${sql.raw(type)}[]`))})`;
}

/** What the service reports as it works (metrics). */
export interface HeartbeatObserver {
  accepted(): void;
  flushed(rows: number, seconds: number): void;
}

/**
 * Rows per statement: stays under SQLite's 32,766 bound parameters (8 columns a row). SQLite writes
 * on the event loop: a flush lets other requests in between its statements (`inTurns`), so that a
 * flush of 20,000 devices holds the loop for one statement at a time, not for 100 ms. What is left
 * under BATCH_ROWS goes in statements of halving sizes (a power of two each): the statements of
 * every flush are a dozen, each compiled once (see `DeviceService.upsert`).
 */
const BATCH_ROWS = 1024;

/** Runs `write` on consecutive slices of `rows` (BATCH_ROWS, then powers of two), one turn of the event loop each. */
async function inTurns<T>(rows: readonly T[], write: (slice: T[]) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < rows.length;) {
    if (i > 0) await setImmediate();
    let size = BATCH_ROWS;
    while (size > rows.length - i) size /= 2;
    await write(rows.slice(i, i + size));
    i += size;
  }
}

const HOUR_MS = 3600_000;

/**
 * The devices this instance admitted per client address in the current clock hour: a cache of the
 * shared sets (src/http/shared-limits.ts), so a device costs a database round trip once an hour.
 */
class AdmittedThisHour {
  private hour = -1;
  private readonly byAddress = new Map<string, Set<string>>();

  private current(at: Date): Map<string, Set<string>> {
    const hour = Math.floor(at.getTime() / HOUR_MS);
    if (hour !== this.hour) {
      this.byAddress.clear();
      this.hour = hour;
    }
    return this.byAddress;
  }

  has(ip: string, deviceId: string, at: Date): boolean {
    return this.current(at).get(ip)?.has(deviceId) ?? false;
  }

  add(ip: string, deviceId: string, at: Date): void {
    const byAddress = this.current(at);
    const seen = byAddress.get(ip);
    if (seen === undefined) byAddress.set(ip, new Set([deviceId]));
    else seen.add(deviceId);
  }
}

/**
 * Heartbeats are acknowledged at once and written in batches: one multi-row upsert per flush,
 * adding counts, so several instances writing at once stay exact. `close()` writes what is left.
 */
export class DeviceService {
  private pending = new Map<string, Pending>();
  private pendingVersions = new Map<string, PendingVersion>();
  private flushing: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | null = null;
  private readonly admitted = new AdmittedThisHour();
  /** The flush's upserts, compiled once by table and rows per statement (`upsert`). */
  private readonly statements = new Map<string, CompiledOnce>();
  private readonly devicesPerAddressHour: number;
  private readonly engine: Engine;
  private readonly db: Db;
  /** Where the scans of the device figures run (off the event loop: see `DatabaseHandle.reads`). */
  private readonly reads: Db;

  constructor(
    database: Pick<DatabaseHandle, 'db' | 'reads'>,
    private readonly limits: SharedLimits,
    options: { flushMs: number; devicesPerAddressHour: number; engine: Engine },
    private readonly onError: (err: unknown) => void,
    private readonly observer?: HeartbeatObserver,
  ) {
    this.db = database.db;
    this.reads = database.reads;
    this.devicesPerAddressHour = options.devicesPerAddressHour;
    this.engine = options.engine;
    this.timer = setInterval(() => void this.flush().catch(this.onError), options.flushMs);
    this.timer.unref();
  }

  /**
   * Whether a heartbeat may be recorded: its device is among the first `devicesPerAddressHour`
   * devices of its client address this clock hour, counted across instances, or is already known (a
   * device that beat before keeps beating whatever the bound). Synchronous once a device was
   * admitted this hour; its first beat of the hour costs a round trip to the shared set.
   */
  admits(beat: Heartbeat, at = new Date()): boolean | Promise<boolean> {
    const bound = this.devicesPerAddressHour;
    if (bound === 0 || this.admitted.has(beat.ip, beat.deviceId, at) || this.pending.has(beat.deviceId)) return true;
    return this.limits.admitToHourlySet(`devices:${beat.ip}`, beat.deviceId, bound, at.getTime()).then(async (ok) => {
      if (ok) {
        this.admitted.add(beat.ip, beat.deviceId, at);
        return true;
      }
      const known = await this.db
        .selectFrom('devices')
        .select('deviceId')
        .where('deviceId', '=', beat.deviceId)
        .executeTakeFirst();
      return known !== undefined;
    });
  }

  record(beat: Heartbeat, at = new Date(clockNow())): void {
    const now = at.toISOString();
    const previous = this.pending.get(beat.deviceId);
    this.recordVersion(beat.deviceId, beat.appVersion ?? previous?.appVersion ?? null, previous, at.getTime());
    // A field the launcher left out keeps what the device reported before.
    this.pending.set(beat.deviceId, {
      deviceId: beat.deviceId,
      os: beat.os ?? previous?.os ?? null,
      osVersion: beat.osVersion ?? previous?.osVersion ?? null,
      appVersion: beat.appVersion ?? previous?.appVersion ?? null,
      ip: beat.ip,
      firstSeenAt: previous?.firstSeenAt ?? now,
      lastSeenAt: now,
      heartbeatCount: (previous?.heartbeatCount ?? 0) + 1,
    });
    this.observer?.accepted();
  }

  private recordVersion(deviceId: string, appVersion: string | null, previous: Pending | undefined, atMs: number) {
    if (appVersion === null) return;
    const known = previous?.appVersion === appVersion ? this.pendingVersions.get(deviceId) : undefined;
    this.pendingVersions.set(deviceId, {
      sinceMs: known?.sinceMs ?? atMs,
      lastMs: atMs,
      quietFromMs: known?.quietFromMs ?? (known && atMs - known.lastMs > OFFLINE_AFTER_MS ? known.lastMs : null),
    });
  }

  /** Writes every acknowledged heartbeat; concurrent calls run one after another. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.writePending());
    return this.flushing;
  }

  private async writePending(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = [...this.pending.values()];
    const versions = this.pendingVersions;
    this.pending = new Map();
    this.pendingVersions = new Map();
    const started = performance.now();
    try {
      await inTurns(batch, (slice) => this.upsert('devices', slice, DEVICE_COLUMNS));
      await this.writeVersions(batch, versions);
      this.observer?.flushed(batch.length, (performance.now() - started) / 1000);
    } catch (err) {
      // Keep what was not written for the next flush, merged with what arrived since.
      for (const [deviceId, version] of versions) {
        if (!this.pendingVersions.has(deviceId)) this.pendingVersions.set(deviceId, version);
      }
      for (const row of batch) {
        const newer = this.pending.get(row.deviceId);
        this.pending.set(
          row.deviceId,
          newer
            ? { ...newer, firstSeenAt: row.firstSeenAt, heartbeatCount: newer.heartbeatCount + row.heartbeatCount }
            : row,
        );
      }
      throw err;
    }
  }

  /**
   * Per device and app version: first and last heartbeat, and the start of the first silence over
   * 3 minutes, also across flushes (this window's first heartbeat against the stored last one).
   */
  private async writeVersions(batch: readonly Pending[], versions: ReadonlyMap<string, PendingVersion>) {
    const rows = batch.flatMap((p): VersionRow[] => {
      const v = versions.get(p.deviceId);
      return p.appVersion === null || !v
        ? []
        : [
            {
              deviceId: p.deviceId,
              appVersion: p.appVersion,
              firstSeenMs: v.sinceMs,
              lastSeenMs: v.lastMs,
              quietFromMs: v.quietFromMs,
            },
          ];
    });
    await inTurns(rows, (slice) => this.upsert('deviceVersions', slice, VERSION_COLUMNS));
  }

  /**
   * One upsert of a slice of `table`'s rows, with a statement built and compiled once per table and
   * size. On PostgreSQL the rows go as one array per column (`unnest`): eight parameters instead of
   * eight a row, so the server parses and plans a short statement rather than a thousand-row VALUES
   * list each time. SQLite (in process) takes the rows as values.
   */
  private upsert<R>(table: 'devices' | 'deviceVersions', rows: R[], columns: Columns<R>) {
    const postgres = this.engine === 'postgres';
    const key = postgres ? table : `${table}:${rows.length}`;
    let statement = this.statements.get(key);
    if (statement === undefined) {
      const slots = (row: number) => Object.fromEntries(columns.map(([name]) => [name, slot(name, row)]));
      const source = postgres ? unnest(slots(0), columns) : Array.from({ length: rows.length }, (_, i) => slots(i));
      statement = compileOnce(table === 'devices' ? this.upsertDevices(source) : this.upsertVersions(source));
      this.statements.set(key, statement);
    }
    const values = postgres
      ? Object.fromEntries(columns.map(([name]) => [name, rows.map((row) => row[name])]))
      : (rows as Array<Record<string, unknown>>);
    return this.db.executeQuery(statement(values));
  }

  /** The upsert of devices from `source`: rows of values, or a select of them. */
  private upsertDevices(source: Array<Record<string, unknown>> | ReturnType<typeof unnest>) {
    const insert = this.db.insertInto('devices');
    const values = Array.isArray(source)
      ? insert.values(source as unknown as Array<Insertable<DevicesTable>>)
      : insert.columns(DEVICE_COLUMNS.map(([key]) => key)).expression(source);
    return values.onConflict((oc) =>
      oc.column('deviceId').doUpdateSet({
        os: sql`coalesce(excluded.os, devices.os)`,
        osVersion: sql`coalesce(excluded.os_version, devices.os_version)`,
        appVersion: sql`coalesce(excluded.app_version, devices.app_version)`,
        ip: sql`excluded.ip`,
        lastSeenAt: sql`case when excluded.last_seen_at > devices.last_seen_at then excluded.last_seen_at else devices.last_seen_at end`,
        heartbeatCount: sql`devices.heartbeat_count + excluded.heartbeat_count`,
      }),
    );
  }

  private upsertVersions(source: Array<Record<string, unknown>> | ReturnType<typeof unnest>) {
    const insert = this.db.insertInto('deviceVersions');
    const values = Array.isArray(source)
      ? insert.values(source as unknown as Array<Insertable<DeviceVersionsTable>>)
      : insert.columns(VERSION_COLUMNS.map(([key]) => key)).expression(source);
    return values.onConflict((oc) =>
      oc.columns(['deviceId', 'appVersion']).doUpdateSet({
        lastSeenMs: sql`case when excluded.last_seen_ms > device_versions.last_seen_ms then excluded.last_seen_ms else device_versions.last_seen_ms end`,
        quietFromMs: sql`coalesce(device_versions.quiet_from_ms, case when excluded.first_seen_ms - device_versions.last_seen_ms > ${OFFLINE_AFTER_MS} then device_versions.last_seen_ms end, excluded.quiet_from_ms)`,
      }),
    );
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }

  private onlineSince(now: number): string {
    return new Date(now - OFFLINE_AFTER_MS).toISOString();
  }

  /** Devices online now, whichever instance received their heartbeats (one indexed count). */
  async countOnline(now = clockNow()): Promise<number> {
    return countSince(this.reads, this.onlineSince(now));
  }

  /**
   * The devices' figures, read in one snapshot (one REPEATABLE READ transaction): while another
   * instance flushes, separate reads could count its devices in `total` but not yet in `online`.
   * The groupings read the covering index of `last_seen_at` (migration 011), off the event loop.
   */
  async stats(now = clockNow()) {
    const since = this.onlineSince(now);
    return this.reads
      .transaction()
      .setIsolationLevel('repeatable read')
      .execute(async (trx) => {
        const online = await countSince(trx, since);
        const total = await countSince(trx, null);
        const byVersion = await groupOnline(trx, 'appVersion', since);
        const byOs = await groupOnline(trx, 'os', since);
        return {
          online,
          total,
          onlineByAppVersion: byVersion.map((r) => ({ appVersion: r.key ?? '', count: Number(r.count) })),
          onlineByOs: byOs.map((r) => ({ os: r.key ?? '', count: Number(r.count) })),
        };
      });
  }

  /**
   * The devices, most recently seen first, as a JSON array: read from one snapshot a page at a time,
   * each page turned to JSON in its own turn of the event loop, so that ten thousand devices never
   * hold it for the whole answer.
   */
  async listJson(options: { onlineOnly: boolean; limit: number }, now = clockNow()): Promise<string> {
    const since = this.onlineSince(now);
    const parts: string[] = [];
    await this.reads
      .transaction()
      .setIsolationLevel('repeatable read')
      .execute(async (trx) => {
        let after: DeviceRow | undefined;
        for (let left = options.limit; left > 0;) {
          if (parts.length > 0) await setImmediate();
          let query = trx
            .selectFrom('devices')
            .selectAll()
            .orderBy('lastSeenAt', 'desc')
            .orderBy('deviceId')
            .limit(Math.min(left, LIST_PAGE));
          if (options.onlineOnly) query = query.where('lastSeenAt', '>=', since);
          if (after !== undefined) {
            const { lastSeenAt, deviceId } = after;
            query = query
              .where('lastSeenAt', '<=', lastSeenAt)
              .where((eb) => eb.or([eb('lastSeenAt', '<', lastSeenAt), eb('deviceId', '>', deviceId)]));
          }
          const rows = await query.execute();
          if (rows.length > 0) {
            parts.push(rows.map((row) => JSON.stringify({ ...row, online: row.lastSeenAt >= since })).join(','));
          }
          after = rows.at(-1);
          left = rows.length < LIST_PAGE ? 0 : left - rows.length;
        }
      });
    return `[${parts.join(',')}]`;
  }
}

/** Devices per page of `listJson`. */
const LIST_PAGE = 500;

/** Devices seen since `since` (all of them for null). */
async function countSince(db: Db, since: string | null): Promise<number> {
  let query = db.selectFrom('devices').select((eb) => eb.fn.countAll<number>().as('n'));
  if (since !== null) query = query.where('lastSeenAt', '>=', since);
  return Number((await query.executeTakeFirstOrThrow()).n);
}

function groupOnline(db: Db, column: 'appVersion' | 'os', since: string) {
  return db
    .selectFrom('devices')
    .select((eb) => [eb.ref(column).as('key'), eb.fn.countAll<number>().as('count')])
    .where('lastSeenAt', '>=', since)
    .groupBy(column)
    .orderBy('count', 'desc')
    .orderBy(column)
    .execute();
}
