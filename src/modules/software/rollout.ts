import { type RawBuilder, sql } from 'kysely';
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

  /**
   * Devices active on a version at each of `points` times evenly spaced from `from` to `to` (the
   * i-th at `from + floor(i × span / (points − 1))`): first heartbeat on it at or before, last one at
   * most 3 minutes before. One pass over the version's rows: each row is active from the first point
   * not before its first heartbeat (`b`) up to the first point more than 3 minutes after its last
   * (`a`), both found by integer arithmetic in the database; the counts are prefix sums of those.
   */
  private async activeAt(appVersion: string | null, from: number, to: number, points: number): Promise<number[]> {
    const active = new Array<number>(points).fill(0);
    if (appVersion === null) return active;
    const span = to - from;
    const last = points - 1;
    const int = (value: number) => sql<number>`cast(${value} as bigint)`;
    /** How many points come before the time `from + offset` (offset > 0, clamped to `points`): ceil(last × offset / span). */
    const pointsBefore = (offset: RawBuilder<number>) =>
      sql<number>`case when ${offset} <= 0 then 0 when ${offset} > ${int(span)} then ${int(points)}
        else (${int(last)} * (${offset}) + ${int(span - 1)}) / ${int(span)} end`;
    const rows = await this.ctx.reads
      .selectFrom('deviceVersions')
      .select([
        pointsBefore(sql<number>`first_seen_ms - ${int(from)}`).as('b'),
        pointsBefore(sql<number>`last_seen_ms + ${int(OFFLINE_AFTER_MS + 1)} - ${int(from)}`).as('a'),
        (eb) => eb.fn.countAll<number | string>().as('n'),
      ])
      .where('appVersion', '=', appVersion)
      .groupBy([sql`b`, sql`a`])
      .execute();
    const change = new Array<number>(points + 1).fill(0);
    for (const row of rows) {
      const [b, a, n] = [Number(row.b), Number(row.a), Number(row.n)];
      if (a <= b) continue;
      change[b] = (change[b] ?? 0) + n;
      change[a] = (change[a] ?? 0) - n;
    }
    let running = 0;
    return active.map((_, i) => (running += change[i] ?? 0));
  }

  /** Devices active on the version and on the previous one at up to 48 evenly spaced times since `from`. */
  private async timeline(from: number, to: number, appVersion: string, previous: string | null) {
    if (!(from < to)) return [];
    const span = to - from;
    const times = Array.from(
      { length: TIMELINE_POINTS },
      (_, i) => from + Math.floor((i * span) / (TIMELINE_POINTS - 1)),
    );
    const on = await this.activeAt(appVersion, from, to, TIMELINE_POINTS);
    const onPrevious = await this.activeAt(previous, from, to, TIMELINE_POINTS);
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
