import { sql } from 'kysely';
import { isUniqueViolation } from './db/errors.js';
import type { Db } from './db/index.js';
import { conflict } from './http/errors.js';

/** Bounds memory when clients vary keys (search terms): the oldest entry makes room. */
const MAX_ENTRIES = 10_000;

/**
 * Coherent read caches across instances. Every content write bumps `content_state.version` in the
 * same database; each instance compares it with the version its caches were built from at most
 * every `checkMs`, and drops them when it moved. A write made here clears this instance at once.
 */
export class ContentCache {
  private version = -1;
  private checkedAt = 0;
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
      result = await this.db.transaction().execute(work);
    } catch (err) {
      if (isUniqueViolation(err)) throw conflict('slug already exists');
      throw err;
    }
    await this.bump();
    return result;
  }

  /** Clears local entries and marks the change for the other instances. Call after a committed write. */
  async bump(): Promise<void> {
    this.entries.clear();
    const row = await this.db
      .updateTable('contentState')
      .set({ version: sql`version + 1` })
      .where('id', '=', 1)
      .returning('version')
      .executeTakeFirst();
    this.version = row?.version ?? -1;
    this.checkedAt = Date.now();
  }

  private async refresh(): Promise<void> {
    const row = await this.db.selectFrom('contentState').select('version').where('id', '=', 1).executeTakeFirst();
    const version = row?.version ?? 0;
    if (version !== this.version) {
      this.entries.clear();
      this.version = version;
    }
    this.checkedAt = Date.now();
  }

  /** Resolves once the local view is no older than `checkMs`. */
  private fresh(): Promise<void> | null {
    if (Date.now() - this.checkedAt < this.checkMs) return null;
    this.pending ??= this.refresh().finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  /** The cached value for `key`, computing and keeping it when absent or stale. */
  async get<T>(key: string, compute: () => Promise<T>): Promise<T> {
    const waiting = this.fresh();
    if (waiting) await waiting;
    const hit = this.entries.has(key);
    this.onLookup?.(key, hit);
    if (hit) return this.entries.get(key) as T;
    const version = this.version;
    const value = await compute();
    if (version === this.version) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value as string);
      this.entries.set(key, value);
    }
    return value;
  }
}
