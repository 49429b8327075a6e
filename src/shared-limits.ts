import { sql } from 'kysely';
import type { Db } from './db/index.js';

/*
 * Per-client bounds that hold across instances: counted in the shared database, so that N instances
 * do not multiply a bound by N. Windows are fixed (a minute for logins, a clock hour for devices),
 * and rows of past windows are pruned as new windows begin.
 */

/** What @fastify/rate-limit asks of a store. */
interface RateLimitStore {
  incr(
    key: string,
    callback: (err: Error | null, result?: { current: number; ttl: number }) => void,
    timeWindow: number,
  ): void;
  child(): RateLimitStore;
}

export class SharedLimits {
  private prunedWindow = 0;

  constructor(private readonly db: Db) {}

  /** Counts one hit of `key` in its fixed window of `windowMs`; answers the window's count so far. */
  async hit(key: string, windowMs: number, at = Date.now()): Promise<{ count: number; resetAt: number }> {
    const windowStart = Math.floor(at / windowMs) * windowMs;
    const row = await this.db
      .insertInto('rateCounters')
      .values({ key, windowStart, windowEnd: windowStart + windowMs, count: 1 })
      .onConflict((oc) => oc.columns(['key', 'windowStart']).doUpdateSet({ count: sql`rate_counters.count + 1` }))
      .returning('count')
      .executeTakeFirstOrThrow();
    await this.prune(at);
    return { count: Number(row.count), resetAt: windowStart + windowMs };
  }

  /**
   * Adds `member` to the set `key` of the clock hour of `at` unless the set already holds `bound`
   * others; answers whether it is in the set. Every instance sees the same sets.
   */
  async admitToHourlySet(key: string, member: string, bound: number, at = Date.now()): Promise<boolean> {
    const hourStart = Math.floor(at / 3_600_000) * 3_600_000;
    await this.prune(at);
    return this.db.transaction().execute(async (trx) => {
      const inserted = await trx
        .insertInto('hourlyMembers')
        .values({ key, hourStart, member })
        .onConflict((oc) => oc.columns(['key', 'hourStart', 'member']).doNothing())
        .executeTakeFirst();
      if ((inserted.numInsertedOrUpdatedRows ?? 0n) === 0n) return true;
      const size = await trx
        .selectFrom('hourlyMembers')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('key', '=', key)
        .where('hourStart', '=', hourStart)
        .executeTakeFirstOrThrow();
      if (Number(size.n) <= bound) return true;
      await trx
        .deleteFrom('hourlyMembers')
        .where('key', '=', key)
        .where('hourStart', '=', hourStart)
        .where('member', '=', member)
        .execute();
      return false;
    });
  }

  /** Removes windows that ended, at most once a minute. */
  private async prune(at: number): Promise<void> {
    const minute = Math.floor(at / 60_000);
    if (minute === this.prunedWindow) return;
    this.prunedWindow = minute;
    await this.db.deleteFrom('rateCounters').where('windowEnd', '<', at).execute();
    await this.db
      .deleteFrom('hourlyMembers')
      .where('hourStart', '<', at - 2 * 3_600_000)
      .execute();
  }

  /** A store for @fastify/rate-limit that counts in the database, under `namespace`. */
  rateLimitStore(namespace: string): new () => RateLimitStore {
    const hit = (key: string, windowMs: number, at: number) => this.hit(`${namespace}:${key}`, windowMs, at);
    return class SharedRateLimitStore implements RateLimitStore {
      incr(key: string, callback: Parameters<RateLimitStore['incr']>[1], timeWindow: number): void {
        const at = Date.now();
        hit(key, timeWindow, at).then(
          ({ count, resetAt }) => callback(null, { current: count, ttl: resetAt - at }),
          (err: Error) => callback(err),
        );
      }

      child(): RateLimitStore {
        return this;
      }
    };
  }
}
