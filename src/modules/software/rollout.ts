import type { Static } from 'typebox';
import { recordEvent } from '../webhooks/events.js';
import { versionData, versionSubject } from './events.js';
import type { AppContext } from '../../context.js';
import type { DeviceVersionRow, VersionRow } from '../../db/schema.js';
import { now, nowIso } from '../../domain/clock.js';
import { isPublished } from '../../domain/rollout.js';
import { notFound } from '../../http/errors.js';
import { OFFLINE_AFTER_MS } from '../devices/service.js';
import { autoHaltOf } from './mapper.js';
import * as repo from './repository.js';
import type { RolloutHealthSchema } from './schemas.js';

type RolloutHealth = Static<typeof RolloutHealthSchema>;

const MINUTE = 60 * 1000;
/** A device's first minutes on a version, watched for silences. */
const WATCHED_MS = 10 * MINUTE;
const TIMELINE_POINTS = 48;
/** How often each instance checks the versions that have an automatic halt. */
export const AUTO_HALT_SWEEP_MS = MINUTE;

/**
 * The share of devices first seen on a version at least 10 minutes ago that went silent on it for more
 * than 3 minutes (the offline threshold) in their first 10 minutes: between two heartbeats on it, or after their last one on it
 * (measured up to now). Null while no device qualifies.
 */
export function quietShare(rows: readonly DeviceVersionRow[], at: number): { rate: number | null; counted: number } {
  const qualifying = rows.filter((r) => r.firstSeenMs <= at - WATCHED_MS);
  const quiet = qualifying.filter(
    (r) =>
      (r.quietFromMs !== null && r.quietFromMs < r.firstSeenMs + WATCHED_MS) ||
      (r.lastSeenMs < r.firstSeenMs + WATCHED_MS && at - r.lastSeenMs > OFFLINE_AFTER_MS),
  );
  return { rate: qualifying.length === 0 ? null : quiet.length / qualifying.length, counted: qualifying.length };
}

/** Devices active on a version at `at`: first heartbeat on it at or before, last one at most 3 minutes before. */
function activeAt(rows: readonly DeviceVersionRow[], at: number): number {
  return rows.filter((r) => r.firstSeenMs <= at && r.lastSeenMs >= at - OFFLINE_AFTER_MS).length;
}

/** Rollout health of versions from stored heartbeats, and the optional automatic halt. */
export class RolloutService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  private deviceRows(appVersion: string): Promise<DeviceVersionRow[]> {
    return this.db.selectFrom('deviceVersions').selectAll().where('appVersion', '=', appVersion).execute();
  }

  private async devicesOn(appVersion: string, at: number): Promise<{ total: number; online: number }> {
    const since = new Date(at - OFFLINE_AFTER_MS).toISOString();
    // No index on the app version: a scan of every device, off the event loop.
    const row = await this.ctx.reads
      .selectFrom('devices')
      .select((eb) => [
        eb.fn.countAll<number | string>().as('total'),
        eb.fn.sum<number | string | null>(eb.case().when('lastSeenAt', '>=', since).then(1).else(0).end()).as('online'),
      ])
      .where('appVersion', '=', appVersion)
      .executeTakeFirstOrThrow();
    return { total: Number(row.total), online: Number(row.online ?? 0) };
  }

  /** `GET /api/admin/software/versions/{id}/rollout`; applies the automatic halt when it is due. */
  async health(versionId: string): Promise<RolloutHealth> {
    const found = await repo.findVersion(this.db, versionId);
    if (!found) throw notFound(`software version not found: ${versionId}`);
    const at = now();
    const rows = await this.deviceRows(found.version);
    const quiet = quietShare(rows, at);
    const version = (await this.haltIfDue(found, quiet))
      ? ((await repo.findVersion(this.db, versionId)) ?? found)
      : found;
    const siblings = await repo.versionsOf(this.db, [version.packageId]);
    const previous = siblings.find((v) => v.versionCode < version.versionCode && isPublished(v.publishAt, at)) ?? null;
    const previousRows = previous ? await this.deviceRows(previous.version) : [];
    const publishedAt = version.publishAt ?? version.createdAt;
    const on = await this.devicesOn(version.version, at);
    return {
      rolloutPercent: version.rolloutPercent,
      publishedAt,
      devicesOnVersion: on.total,
      onlineOnVersion: on.online,
      quietAfterUpdate: quiet.rate,
      previous: previous
        ? {
            version: previous.version,
            devicesOnVersion: (await this.devicesOn(previous.version, at)).total,
            quietAfterUpdate: quietShare(previousRows, at).rate,
          }
        : null,
      timeline: timeline(Date.parse(publishedAt), at, rows, previousRows),
      haltedAt: version.haltedAt,
      haltReason: version.haltReason,
    };
  }

  /**
   * Sets `rolloutPercent` 0 with the reason once the version's `autoHalt` condition holds (at most once,
   * whichever instance gets there first); answers whether the version was halted by anyone.
   */
  private async haltIfDue(version: VersionRow, quiet: { rate: number | null; counted: number }): Promise<boolean> {
    const rule = autoHaltOf(version);
    if (!rule || version.haltedAt !== null || version.rolloutPercent === 0 || version.revokedAt !== null) return false;
    if (quiet.rate === null || quiet.counted < rule.minDevices || quiet.rate <= rule.maxQuietRate) return false;
    const halt = {
      rolloutPercent: 0,
      haltedAt: nowIso(),
      haltReason: `quietAfterUpdate ${quiet.rate.toFixed(3)} > maxQuietRate ${rule.maxQuietRate} over ${quiet.counted} devices`,
    };
    await this.ctx.cache.commit(async (trx) => {
      const result = await trx
        .updateTable('softwareVersions')
        .set(halt)
        .where('id', '=', version.id)
        .where('haltedAt', 'is', null)
        .executeTakeFirst();
      if (result.numUpdatedRows === 0n) return;
      const halted = { ...version, ...halt };
      await recordEvent(trx, 'version.rollout_changed', await versionSubject(trx, halted), {
        ...versionData(halted),
        previousRolloutPercent: version.rolloutPercent,
        haltReason: halt.haltReason,
      });
    });
    return true;
  }

  /** Evaluates the automatic halt of every version that has one and is still rolling out. */
  async sweep(): Promise<void> {
    const watched = await this.db
      .selectFrom('softwareVersions')
      .selectAll()
      .where('autoHalt', 'is not', null)
      .where('haltedAt', 'is', null)
      .where('revokedAt', 'is', null)
      .where('rolloutPercent', '>', 0)
      .execute();
    const at = now();
    for (const version of watched) {
      if (isPublished(version.publishAt, at))
        await this.haltIfDue(version, quietShare(await this.deviceRows(version.version), at));
    }
  }
}

/** Devices active on the version and on the previous one at up to 48 evenly spaced times since `from`. */
function timeline(
  from: number,
  to: number,
  rows: readonly DeviceVersionRow[],
  previousRows: readonly DeviceVersionRow[],
) {
  if (!(from < to)) return [];
  const step = (to - from) / (TIMELINE_POINTS - 1);
  return Array.from({ length: TIMELINE_POINTS }, (_, i) => {
    const at = Math.round(from + i * step);
    return {
      at: new Date(at).toISOString(),
      devicesOnVersion: activeAt(rows, at),
      devicesOnPrevious: activeAt(previousRows, at),
    };
  });
}
