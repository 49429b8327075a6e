import { sql } from 'kysely';
import { Redis } from 'ioredis';
import type { Db } from '../db/index.js';

/*
 * Per-client bounds that hold across instances: counted in the shared database, or in Redis when
 * `REDIS_URL` is set, so that N instances do not multiply a bound by N. Windows are fixed (a minute
 * for logins, a clock hour for devices); past windows are pruned (database) or expire (Redis).
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

export abstract class SharedLimits {
  /** Counts one hit of `key` in its fixed window of `windowMs`; answers the window's count so far. */
  abstract hit(key: string, windowMs: number, at?: number): Promise<{ count: number; resetAt: number }>;

  /**
   * Adds `member` to the set `key` of the clock hour of `at` unless the set already holds `bound`
   * others; answers whether it is in the set. Every instance sees the same sets.
   */
  abstract admitToHourlySet(key: string, member: string, bound: number, at?: number): Promise<boolean>;

  /** Resolves while the store answers (`/readyz`); the database is asked there already. */
  ping(): Promise<void> {
    return Promise.resolve();
  }

  /** Releases what the store holds open (a Redis connection). */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /** A store for @fastify/rate-limit that counts here, under `namespace`. */
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

const HOUR_MS = 3_600_000;

/** The bounds counted in the service's database (tables `rate_counters` and `hourly_members`). */
export class DatabaseLimits extends SharedLimits {
  private prunedWindow = 0;

  constructor(private readonly db: Db) {
    super();
  }

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

  async admitToHourlySet(key: string, member: string, bound: number, at = Date.now()): Promise<boolean> {
    const hourStart = Math.floor(at / HOUR_MS) * HOUR_MS;
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
      .where('hourStart', '<', at - 2 * HOUR_MS)
      .execute();
  }
}

/** Adds a member to an hour's set unless it holds the bound already; 1 when the member is in the set. */
const ADMIT_SCRIPT = `
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1`;

/** The bounds counted in Redis (`REDIS_URL`): keys under `REDIS_PREFIX`, each expiring with its window. */
export class RedisLimits extends SharedLimits {
  private readonly redis: Redis;

  constructor(url: string, prefix: string) {
    super();
    // A request fails fast while Redis is away (as it would with the database), instead of queueing.
    this.redis = new Redis(url, { keyPrefix: prefix, maxRetriesPerRequest: 1, lazyConnect: true });
  }

  async hit(key: string, windowMs: number, at = Date.now()): Promise<{ count: number; resetAt: number }> {
    const windowStart = Math.floor(at / windowMs) * windowMs;
    const resetAt = windowStart + windowMs;
    const name = `rate:${key}:${windowStart}`;
    const results = await this.redis
      .multi()
      .incr(name)
      .pexpireat(name, resetAt + 1000)
      .exec();
    const [error, count] = results?.[0] ?? [new Error('redis: no answer to INCR'), null];
    if (error) throw error;
    return { count: Number(count), resetAt };
  }

  async admitToHourlySet(key: string, member: string, bound: number, at = Date.now()): Promise<boolean> {
    const hourStart = Math.floor(at / HOUR_MS) * HOUR_MS;
    const admitted = await this.redis.eval(
      ADMIT_SCRIPT,
      1,
      `hour:${key}:${hourStart}`,
      member,
      bound,
      hourStart + 2 * HOUR_MS,
    );
    return admitted === 1;
  }

  override async ping(): Promise<void> {
    await this.redis.ping();
  }

  override async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
