import { type CompiledQuery, sql } from 'kysely';
import { compileOnce, slot } from '../../db/compile-once.js';
import { escapeLiteral } from 'pg';
import type { Db, Engine } from '../../db/index.js';

/** The kinds of counted downloads kept in the daily roll-up. */
export type DownloadKind = 'installer' | 'launcher' | 'addon' | 'game';

/** Row of `content_state` whose version counts release downloads (row 1 counts content writes). */
export const COUNTERS_STATE_ID = 2;

/** The day (UTC) a download is rolled up under. */
export const dayOf = (date: Date) => date.toISOString().slice(0, 10);

/** Counted downloads gathered while the previous batch commits, written together in one transaction. */
interface Batch {
  /** Per software version: downloads and launcher self-updates. */
  readonly versions: Map<string, { all: number; launcher: number }>;
  /** Per release: downloads and its addon. */
  readonly releases: Map<string, { addonId: string; count: number }>;
  /** Per game build: manifests fetched. */
  readonly builds: Map<number, number>;
  readonly kinds: Map<DownloadKind, number>;
  readonly done: Promise<void>;
  settle(error?: unknown): void;
}

function newBatch(): Batch {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const done = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return {
    versions: new Map(),
    releases: new Map(),
    builds: new Map(),
    kinds: new Map(),
    done,
    settle: (error) => (error === undefined ? resolve() : reject(error)),
  };
}

/**
 * Group commit of download counters. A counted download joins the open batch and waits until that
 * batch has committed, so it is durable (and exact) before its bytes are sent; while one batch
 * commits, the downloads arriving meanwhile gather into the next. Under load one transaction carries
 * many downloads instead of each download waiting for its own commit on rows every download locks.
 */
export class DownloadCounter {
  private open: Batch | null = null;
  private flushing: Promise<void> | null = null;
  private readonly compiled;

  constructor(
    private readonly db: Db,
    private readonly engine: Engine,
    /** Told of committed counted downloads (metrics). */
    private readonly onCounted?: (kind: DownloadKind, count: number) => void,
  ) {
    const n = slot<number>('n');
    const id = slot<string>('id');
    const version = (launcher: boolean) =>
      compileOnce(
        db
          .updateTable('softwareVersions')
          .set((eb) => ({
            downloadCount: eb('downloadCount', '+', n),
            ...(launcher ? { launcherDownloadCount: eb('launcherDownloadCount', '+', slot<number>('launcher')) } : {}),
          }))
          .where('id', '=', id),
      );
    // Both rows of a release's download carry the counter version it was committed under.
    const seq = sql<number>`(select version from content_state where id = ${COUNTERS_STATE_ID})`;
    this.compiled = {
      version: version(false),
      launcherVersion: version(true),
      // First in a batch with releases: the row lock on the counter version orders the batches of
      // every instance, so the version the rows below are marked with is committed in that order.
      counterVersion: compileOnce(
        db
          .updateTable('contentState')
          .set({ version: sql`version + 1` })
          .where('id', '=', COUNTERS_STATE_ID),
      ),
      release: compileOnce(
        db
          .updateTable('releases')
          .set((eb) => ({ downloadCount: eb('downloadCount', '+', n), counterSeq: seq }))
          .where('id', '=', id),
      ),
      addon: compileOnce(
        db
          .updateTable('addons')
          .set((eb) => ({ totalDownloads: eb('totalDownloads', '+', n), counterSeq: seq }))
          .where('id', '=', id),
      ),
      gameBuild: compileOnce(
        db
          .updateTable('gameBuilds')
          .set((eb) => ({ downloadCount: eb('downloadCount', '+', n) }))
          .where('buildCode', '=', slot<number>('code')),
      ),
      daily: compileOnce(
        db
          .insertInto('downloadDaily')
          .values({ day: slot<string>('day'), kind: slot<DownloadKind>('kind'), count: n })
          .onConflict((oc) => oc.columns(['day', 'kind']).doUpdateSet({ count: sql`download_daily.count + ${n}` })),
      ),
    };
  }

  /** One counted download of a software version; `launcher` also counts as a launcher self-update. */
  version(versionId: string, launcher: boolean): Promise<void> {
    const batch = this.join(launcher ? 'launcher' : 'installer');
    const entry = batch.versions.get(versionId) ?? { all: 0, launcher: 0 };
    entry.all += 1;
    if (launcher) entry.launcher += 1;
    batch.versions.set(versionId, entry);
    return batch.done;
  }

  /**
   * One counted download of an addon release: its count, the addon's total and the counter version
   * (`COUNTERS_STATE_ID`) in one transaction; both rows carry the new version (`counterSeq`), so a
   * reader holding the counters of an older version rereads just the rows counted since.
   */
  release(releaseId: string, addonId: string): Promise<void> {
    const batch = this.join('addon');
    const entry = batch.releases.get(releaseId) ?? { addonId, count: 0 };
    entry.count += 1;
    batch.releases.set(releaseId, entry);
    return batch.done;
  }

  /** One counted download of a game build: its manifest fetched. */
  gameBuild(buildCode: number): Promise<void> {
    const batch = this.join('game');
    batch.builds.set(buildCode, (batch.builds.get(buildCode) ?? 0) + 1);
    return batch.done;
  }

  private join(kind: DownloadKind): Batch {
    const batch = (this.open ??= newBatch());
    batch.kinds.set(kind, (batch.kinds.get(kind) ?? 0) + 1);
    this.flushing ??= this.drain();
    return batch;
  }

  /** Commits batches one after another until none is open. */
  private async drain(): Promise<void> {
    // Let the downloads of this turn of the event loop join the first batch.
    await new Promise((resolve) => setImmediate(resolve));
    for (let batch = this.open; batch !== null; batch = this.open) {
      this.open = null;
      try {
        await this.commit(batch);
        for (const [kind, count] of batch.kinds) this.onCounted?.(kind, count);
        batch.settle();
      } catch (error) {
        batch.settle(error);
      }
    }
    this.flushing = null;
  }

  /**
   * One transaction for the batch. Rows are updated in key order, so two instances' batches cannot
   * deadlock. On PostgreSQL the statements go in one message (one round trip, one implicit
   * transaction: all or nothing), and the commit does not wait for its WAL flush (synchronous_commit
   * off): a crash of the database server may lose the last fraction of a second of counts, never
   * consistency. On SQLite (in process) they run in a transaction one after another.
   */
  private async commit(batch: Batch): Promise<void> {
    const statements = this.statements(batch);
    if (this.engine === 'postgres') {
      const text = ['set local synchronous_commit = off', ...statements.map(inlined)].join(';\n');
      await sql.raw(text).execute(this.db);
      return;
    }
    await this.db.transaction().execute(async (trx) => {
      for (const statement of statements) await trx.executeQuery(statement);
    });
  }

  private statements(batch: Batch): CompiledQuery[] {
    const { compiled } = this;
    const statements: CompiledQuery[] = [];
    for (const [id, n] of [...batch.versions].sort(byKey)) {
      statements.push(
        n.launcher > 0
          ? compiled.launcherVersion({ id, n: n.all, launcher: n.launcher })
          : compiled.version({ id, n: n.all }),
      );
    }
    const addons = new Map<string, number>();
    if (batch.releases.size > 0) statements.push(compiled.counterVersion({}));
    for (const [id, n] of [...batch.releases].sort(byKey)) {
      statements.push(compiled.release({ id, n: n.count }));
      addons.set(n.addonId, (addons.get(n.addonId) ?? 0) + n.count);
    }
    for (const [id, n] of [...addons].sort(byKey)) statements.push(compiled.addon({ id, n }));
    for (const [code, n] of [...batch.builds].sort((a, b) => a[0] - b[0]))
      statements.push(compiled.gameBuild({ code, n }));
    const day = dayOf(new Date());
    for (const [kind, n] of [...batch.kinds].sort(byKey)) statements.push(compiled.daily({ day, kind, n }));
    return statements;
  }
}

/**
 * A compiled PostgreSQL statement with its parameters written in as literals, so that several go
 * in one simple-protocol message. Parameters here are ids, day strings and integers only.
 */
function inlined(query: CompiledQuery): string {
  return query.sql.replace(/\$(\d+)/g, (_, n: string) => {
    const value = query.parameters[Number(n) - 1];
    if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
    if (typeof value === 'string') return escapeLiteral(value);
    throw new Error(`counter statement parameter $${n} cannot be inlined: ${typeof value}`);
  });
}

const byKey = <T>(a: [string, T], b: [string, T]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
