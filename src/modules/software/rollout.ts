import type { Static } from 'typebox';
import { recordEvent } from '../webhooks/events.js';
import { versionData, versionSubject } from './events.js';
import type { AppContext } from '../../context.js';
import type { VersionRow } from '../../db/schema.js';
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

/** Rollout health of versions from stored heartbeats, and the optional automatic halt. */
export class RolloutService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /*
   * A version's device history is read by the database (off the event loop: `ctx.reads`), as counts:
   * at a million launchers a version has hundreds of thousands of rows.
   */

  /**
   * The share of devices first seen on a version at least 10 minutes ago that went silent on it for
   * more than 3 minutes (the offline threshold) in their first 10 minutes: between two heartbeats on
   * it, or after their last one on it (measured up to now). Null while no device qualifies.
   */
  private async quietShare(appVersion: string, at: number): Promise<{ rate: number | null; counted: number }> {
    const row = await this.ctx.reads
      .selectFrom('deviceVersions')
      .select((eb) => {
        const watchedUntil = eb('firstSeenMs', '+', WATCHED_MS);
        const quiet = eb.or([
          eb.and([eb('quietFromMs', 'is not', null), eb('quietFromMs', '<', watchedUntil)]),
          eb.and([eb('lastSeenMs', '<', watchedUntil), eb('lastSeenMs', '<', at - OFFLINE_AFTER_MS)]),
        ]);
        return [
          eb.fn.countAll<number | string>().as('counted'),
          eb.fn.sum<number | string | null>(eb.case().when(quiet).then(1).else(0).end()).as('quiet'),
        ];
      })
      .where('appVersion', '=', appVersion)
      .where('firstSeenMs', '<=', at - WATCHED_MS)
      .executeTakeFirstOrThrow();
    const counted = Number(row.counted);
    return { rate: counted === 0 ? null : Number(row.quiet ?? 0) / counted, counted };
  }

  /** Devices active on a version at each of `times`: first heartbeat on it at or before, last one at most 3 minutes before. */
  private async activeAt(appVersion: string | null, times: readonly number[]): Promise<number[]> {
    if (appVersion === null || times.length === 0) return times.map(() => 0);
    const row: Record<string, unknown> = await this.ctx.reads
      .selectFrom('deviceVersions')
      .select((eb) =>
        times.map((at, i) =>
          eb.fn
            .sum<number | string | null>(
              eb
                .case()
                .when(eb.and([eb('firstSeenMs', '<=', at), eb('lastSeenMs', '>=', at - OFFLINE_AFTER_MS)]))
                .then(1)
                .else(0)
                .end(),
            )
            .as(`t${i}`),
        ),
      )
      .where('appVersion', '=', appVersion)
      .executeTakeFirstOrThrow();
    return times.map((_, i) => Number(row[`t${i}`] ?? 0));
  }

  /** Devices active on the version and on the previous one at up to 48 evenly spaced times since `from`. */
  private async timeline(from: number, to: number, appVersion: string, previous: string | null) {
    if (!(from < to)) return [];
    const step = (to - from) / (TIMELINE_POINTS - 1);
    const times = Array.from({ length: TIMELINE_POINTS }, (_, i) => Math.round(from + i * step));
    const [on, onPrevious] = [await this.activeAt(appVersion, times), await this.activeAt(previous, times)];
    return times.map((at, i) => ({
      at: new Date(at).toISOString(),
      devicesOnVersion: on[i] ?? 0,
      devicesOnPrevious: onPrevious[i] ?? 0,
    }));
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
    const quiet = await this.quietShare(found.version, at);
    const version = (await this.haltIfDue(found, quiet))
      ? ((await repo.findVersion(this.db, versionId)) ?? found)
      : found;
    const siblings = await repo.versionsOf(this.db, [version.packageId]);
    const previous = siblings.find((v) => v.versionCode < version.versionCode && isPublished(v.publishAt, at)) ?? null;
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
            quietAfterUpdate: (await this.quietShare(previous.version, at)).rate,
          }
        : null,
      timeline: await this.timeline(Date.parse(publishedAt), at, version.version, previous?.version ?? null),
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
      if (isPublished(version.publishAt, at)) await this.haltIfDue(version, await this.quietShare(version.version, at));
    }
  }
}
