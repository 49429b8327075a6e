import { sql } from 'kysely';
import type { Db } from '../../db/index.js';
import type { DeviceRow } from '../../db/schema.js';

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

/** What the service reports as it works (metrics). */
export interface HeartbeatObserver {
  accepted(): void;
  flushed(rows: number, seconds: number): void;
}

/** Rows per statement: stays under SQLite's 32,766 bound parameters (8 columns a row). */
const BATCH_ROWS = 1000;

const HOUR_MS = 3600_000;

/**
 * The devices each client address beat for in the current clock hour, up to `perAddress` of them.
 * An internet café behind one address fits; a flood of made-up ids from one address does not.
 */
class AddressWindow {
  private hour = -1;
  private readonly byAddress = new Map<string, Set<string>>();

  constructor(private readonly perAddress: number) {}

  /** Whether `deviceId` is within its address's bound for the hour of `at` (counting it when new). */
  admits(ip: string, deviceId: string, at: Date): boolean {
    if (this.perAddress === 0) return true;
    const hour = Math.floor(at.getTime() / HOUR_MS);
    if (hour !== this.hour) {
      this.byAddress.clear();
      this.hour = hour;
    }
    let seen = this.byAddress.get(ip);
    if (seen === undefined) {
      seen = new Set();
      this.byAddress.set(ip, seen);
    }
    if (seen.has(deviceId)) return true;
    if (seen.size >= this.perAddress) return false;
    seen.add(deviceId);
    return true;
  }
}

/**
 * Heartbeats are acknowledged at once and written in batches: one multi-row upsert per flush,
 * adding counts, so several instances writing at once stay exact. `close()` writes what is left.
 */
export class DeviceService {
  private pending = new Map<string, Pending>();
  private flushing: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | null = null;
  private readonly window: AddressWindow;

  constructor(
    private readonly db: Db,
    options: { flushMs: number; devicesPerAddressHour: number },
    private readonly onError: (err: unknown) => void,
    private readonly observer?: HeartbeatObserver,
  ) {
    this.window = new AddressWindow(options.devicesPerAddressHour);
    this.timer = setInterval(() => void this.flush().catch(this.onError), options.flushMs);
    this.timer.unref();
  }

  /**
   * Whether a heartbeat may be recorded: its device is within its address's hourly bound of
   * devices, or is already known (a device that beat before keeps beating whatever the bound).
   * Answers synchronously in the common case; only a device over the bound costs a look-up.
   */
  admits(beat: Heartbeat, at = new Date()): boolean | Promise<boolean> {
    if (this.window.admits(beat.ip, beat.deviceId, at) || this.pending.has(beat.deviceId)) return true;
    return this.db
      .selectFrom('devices')
      .select('deviceId')
      .where('deviceId', '=', beat.deviceId)
      .executeTakeFirst()
      .then((row) => row !== undefined);
  }

  record(beat: Heartbeat, at = new Date()): void {
    const now = at.toISOString();
    const previous = this.pending.get(beat.deviceId);
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

  /** Writes every acknowledged heartbeat; concurrent calls run one after another. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.writePending());
    return this.flushing;
  }

  private async writePending(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = [...this.pending.values()];
    this.pending = new Map();
    const started = performance.now();
    try {
      for (let i = 0; i < batch.length; i += BATCH_ROWS) {
        await this.db
          .insertInto('devices')
          .values(batch.slice(i, i + BATCH_ROWS))
          .onConflict((oc) =>
            oc.column('deviceId').doUpdateSet({
              os: sql`coalesce(excluded.os, devices.os)`,
              osVersion: sql`coalesce(excluded.os_version, devices.os_version)`,
              appVersion: sql`coalesce(excluded.app_version, devices.app_version)`,
              ip: sql`excluded.ip`,
              lastSeenAt: sql`case when excluded.last_seen_at > devices.last_seen_at then excluded.last_seen_at else devices.last_seen_at end`,
              heartbeatCount: sql`devices.heartbeat_count + excluded.heartbeat_count`,
            }),
          )
          .execute();
      }
      this.observer?.flushed(batch.length, (performance.now() - started) / 1000);
    } catch (err) {
      // Keep what was not written for the next flush, merged with what arrived since.
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

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
  }

  private onlineSince(now: number): string {
    return new Date(now - OFFLINE_AFTER_MS).toISOString();
  }

  /** Devices online now, whichever instance received their heartbeats (one indexed count). */
  async countOnline(now = Date.now()): Promise<number> {
    const row = await this.db
      .selectFrom('devices')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('lastSeenAt', '>=', this.onlineSince(now))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async stats(now = Date.now()) {
    const since = this.onlineSince(now);
    const [online, total, byVersion, byOs] = await Promise.all([
      this.countOnline(now),
      this.db
        .selectFrom('devices')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow(),
      this.groupOnline('appVersion', since),
      this.groupOnline('os', since),
    ]);
    return {
      online,
      total: Number(total.n),
      onlineByAppVersion: byVersion.map((r) => ({ appVersion: r.key ?? '', count: Number(r.count) })),
      onlineByOs: byOs.map((r) => ({ os: r.key ?? '', count: Number(r.count) })),
    };
  }

  private groupOnline(column: 'appVersion' | 'os', since: string) {
    return this.db
      .selectFrom('devices')
      .select((eb) => [eb.ref(column).as('key'), eb.fn.countAll<number>().as('count')])
      .where('lastSeenAt', '>=', since)
      .groupBy(column)
      .orderBy('count', 'desc')
      .orderBy(column)
      .execute();
  }

  async list(options: { onlineOnly: boolean; limit: number }, now = Date.now()) {
    const since = this.onlineSince(now);
    let query = this.db
      .selectFrom('devices')
      .selectAll()
      .orderBy('lastSeenAt', 'desc')
      .orderBy('deviceId')
      .limit(options.limit);
    if (options.onlineOnly) query = query.where('lastSeenAt', '>=', since);
    const rows = await query.execute();
    return rows.map((row: DeviceRow) => ({ ...row, online: row.lastSeenAt >= since }));
  }
}
