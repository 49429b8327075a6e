import { sql } from 'kysely';
import { recordAudit } from '../modules/audit/log.js';
import { isUniqueViolation } from './errors.js';
import type { Db } from './index.js';
import { now } from '../domain/clock.js';
import { conflict } from '../http/errors.js';

/** Bounds memory when clients vary keys (search terms): the oldest entry makes room. */
const MAX_ENTRIES = 10_000;

/** Longest life of an entry: rendered answers carry a signature time that must stay under an hour old. */
export const MAX_ENTRY_AGE_MS = 30 * 60 * 1000;

/** The next `publishAt` after `at` among versions, releases, articles and game builds, in epoch ms (or null). */
async function nextScheduled(db: Db, at: number): Promise<number | null> {
  const after = new Date(at).toISOString();
  const times = await Promise.all(
    (['softwareVersions', 'releases', 'articles', 'gameBuilds'] as const).map((table) =>
      db
        .selectFrom(table)
        .select((eb) => eb.fn.min('publishAt').as('next'))
        .where('publishAt', '>', after)
        .executeTakeFirst(),
    ),
  );
  const next = times.flatMap((t) => (typeof t?.next === 'string' ? [Date.parse(t.next)] : []));
  return next.length > 0 ? Math.min(...next) : null;
}

/**
 * Coherent read caches across instances. Every content write bumps `content_state.version` in the
 * same database; each instance compares it with the version its caches were built from at most
 * every `checkMs`, and drops them when it moved. A write made here clears this instance at once.
 * Entries also expire, with no write, when the next scheduled row (`publishAt`) becomes published
 * and at the latest after `MAX_ENTRY_AGE_MS`.
 */
export class ContentCache {
  private version = -1;
  private checkedAt = 0;
  /** Clock time (see domain/clock) at which the entries stop being valid. */
  private expiresAt = 0;
  /** Counts clears, so that a value computed before one is not kept after it. */
  private generation = 0;
  private pending: Promise<void> | null = null;
  private readonly entries = new Map<string, unknown>();

  constructor(
    private readonly db: Db,
    private readonly checkMs: number,
    /** Told of every lookup (metrics): the key and whether it was answered from memory. */
    private readonly onLookup?: (key: string, hit: boolean) => void,
  ) {}

  /**
   * Runs a content write in one transaction and, once it committed, tells every instance's caches.
   * A unique-constraint violation (a slug taken by a concurrent write) is a 409.
   */
  async commit<T>(work: (trx: Db) => Promise<T>): Promise<T> {
    let result: T;
    try {
      result = await this.db.transaction().execute(async (trx) => {
        const done = await work(trx);
        await recordAudit(trx);
        return done;
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw conflict('slug already exists');
      throw err;
    }
    await this.bump();
    return result;
  }

  /** Clears local entries and marks the change for the other instances. Call after a committed write. */
  async bump(): Promise<void> {
    this.clear();
    const row = await this.db
      .updateTable('contentState')
      .set({ version: sql`version + 1` })
      .where('id', '=', 1)
      .returning('version')
      .executeTakeFirst();
    this.version = row?.version ?? -1;
    await this.planExpiry();
    this.checkedAt = Date.now();
  }

  private clear(): void {
    this.entries.clear();
    this.generation += 1;
  }

  /** Entries now valid until the next scheduled publication, or for `MAX_ENTRY_AGE_MS`. */
  private async planExpiry(): Promise<void> {
    const at = now();
    const next = await nextScheduled(this.db, at);
    this.expiresAt = Math.min(next ?? Infinity, at + MAX_ENTRY_AGE_MS);
  }

  private async refresh(): Promise<void> {
    const row = await this.db.selectFrom('contentState').select('version').where('id', '=', 1).executeTakeFirst();
    const version = row?.version ?? 0;
    if (version !== this.version || now() >= this.expiresAt) {
      this.clear();
      this.version = version;
      await this.planExpiry();
    }
    this.checkedAt = Date.now();
  }

  /** Resolves once the local view is no older than `checkMs` and no scheduled time has passed since. */
  private fresh(): Promise<void> | null {
    if (Date.now() - this.checkedAt < this.checkMs && now() < this.expiresAt) return null;
    this.pending ??= this.refresh().finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  /**
   * The value kept for `key` when the local view is fresh, else undefined: a synchronous look for a
   * hot path that falls back to `get` (a stale view starts its refresh here).
   */
  peek<T>(key: string): T | undefined {
    if (this.fresh() !== null) return undefined;
    return this.entries.get(key) as T | undefined;
  }

  /** The cached value for `key`, computing and keeping it when absent or stale. */
  async get<T>(key: string, compute: () => Promise<T>): Promise<T> {
    const waiting = this.fresh();
    if (waiting) await waiting;
    const hit = this.entries.has(key);
    this.onLookup?.(key, hit);
    if (hit) return this.entries.get(key) as T;
    const generation = this.generation;
    const value = await compute();
    if (generation === this.generation) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value as string);
      this.entries.set(key, value);
    }
    return value;
  }
}
