import { createHash } from 'node:crypto';
import { type Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { sql } from 'kysely';
import { recordAudit } from '../audit/log.js';
import type { Db } from '../../db/index.js';
import { nowIso } from '../../domain/clock.js';
import { MAX_CHUNK_BYTES } from '../../domain/game-manifest.js';
import { AppError, badRequest } from '../../http/errors.js';
import type { ObjectInfo, Storage } from '../../storage/storage.js';

/** Where the store keeps chunks: `game-chunks/<first two hex digits>/<sha256>` (a mirror copies this folder). */
export const GAME_CHUNKS_PREFIX = 'game-chunks/';

export const chunkKey = (sha256: string): string => `${GAME_CHUNKS_PREFIX}${sha256.slice(0, 2)}/${sha256}`;

export const isChunkName = (value: string): boolean => /^[0-9a-f]{64}$/.test(value);

/** Rows looked up or changed per statement (both engines' parameter limits stay far away). */
const BATCH = 1000;
/** Chunks deleted per sweep transaction: their files are deleted inside it (see `sweep`). */
const SWEEP_BATCH = 100;

export function* batches<T>(items: readonly T[], size = BATCH): Generator<T[]> {
  for (let at = 0; at < items.length; at += size) yield items.slice(at, at + size);
}

/**
 * The bytes of a chunk upload passed through, counted and hashed: more than `MAX_CHUNK_BYTES` fails
 * with a 413, and at the end a SHA-256 other than `name` fails with a 400, so that a store writing
 * from it never keeps the object (it appears only once its source ended well).
 */
function checkedAgainst(name: string): Transform & { failure: AppError | null } {
  const hash = createHash('sha256');
  let size = 0;
  const transform = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      size += chunk.length;
      if (size > MAX_CHUNK_BYTES) {
        checker.failure = new AppError(413, `body: a chunk is at most ${MAX_CHUNK_BYTES} bytes`);
        return done(checker.failure);
      }
      hash.update(chunk);
      done(null, chunk);
    },
    flush(done) {
      const actual = hash.digest('hex');
      if (size === 0) checker.failure = badRequest('body: a chunk is at least 1 byte');
      else if (actual !== name) {
        checker.failure = badRequest(`body: the bytes hash to ${actual}, not to the chunk's name ${name}`);
      }
      done(checker.failure);
    },
  });
  const checker = Object.assign(transform, { failure: null as AppError | null });
  return checker;
}

/**
 * The game client's chunks: stored once under content-addressed keys, recorded in `game_chunks`
 * (so "which are missing" is one query, never a listing of the store), swept once no build names
 * them and they were not touched within the upload expiry.
 */
export class GameChunks {
  constructor(
    private readonly db: Db,
    private readonly storage: Storage,
    /** Told of chunks swept (metrics). */
    private readonly onSwept?: (count: number) => void,
  ) {}

  /**
   * Renews `touched_at` of the stored chunks among `names` (with `trx`: inside the caller's
   * transaction) and answers them with their sizes: a chunk touched now is not swept for the
   * upload expiry, even when no build names it yet.
   */
  async touch(trx: Db, names: readonly string[]): Promise<Map<string, number>> {
    const found = new Map<string, number>();
    const at = nowIso();
    for (const batch of batches(names)) {
      const rows = await trx
        .updateTable('gameChunks')
        .set({ touchedAt: at })
        .where('sha256', 'in', batch)
        .returning(['sha256', 'size'])
        .execute();
      for (const row of rows) found.set(row.sha256, Number(row.size));
    }
    return found;
  }

  /** Those of `names` the store lacks, in the order asked; the others are touched. */
  async missing(names: readonly string[]): Promise<string[]> {
    const unique = [...new Set(names)];
    const stored = await this.db.transaction().execute((trx) => this.touch(trx, unique));
    return unique.filter((name) => !stored.has(name));
  }

  /**
   * Stores the chunk `name` from `body` (checked against its name as it streams): `created` false
   * when it was already stored (the bytes are still checked, and nothing is written).
   */
  async put(name: string, body: Readable): Promise<{ created: boolean; size: number }> {
    const key = chunkKey(name);
    const checker = checkedAgainst(name);
    const recorded = await this.db
      .selectFrom('gameChunks')
      .select('size')
      .where('sha256', '=', name)
      .executeTakeFirst();
    const present = recorded !== undefined && (await this.storage.stat(key)) !== null;
    let size: number;
    try {
      if (present) {
        await pipeline(body, checker, new Writable({ write: (_chunk, _encoding, done) => done() }));
        size = Number(recorded.size);
      } else {
        // A body that breaks off fails the checker too, and with it the write (nothing is kept).
        pipeline(body, checker).catch(() => undefined);
        size = (await this.storage.write(key, checker, 'application/octet-stream')).size;
      }
    } catch (err) {
      body.resume();
      throw checker.failure ?? err;
    }
    await this.db.transaction().execute(async (trx) => {
      const at = nowIso();
      await trx
        .insertInto('gameChunks')
        .values({ sha256: name, size, createdAt: at, touchedAt: at })
        .onConflict((oc) => oc.column('sha256').doUpdateSet({ touchedAt: at }))
        .execute();
      await recordAudit(trx);
    });
    // A sweep that deleted this chunk's old row may have deleted the file just written (it deletes
    // files before committing): the row is back, so the file must be too. Rare; the client retries.
    if (!present && (await this.storage.stat(key)) === null) {
      throw new AppError(503, 'the chunk was being swept while it was stored: send it again');
    }
    return { created: !present, size };
  }

  /**
   * Deletes chunks that no build names and that were not touched since `before` (ISO 8601): their
   * rows by one conditional statement per batch (a build being created touches its chunks in its
   * transaction first, so the condition no longer holds for them), then their files, inside the same
   * transaction; a file that cannot be deleted keeps its row. Answers how many were swept.
   */
  async sweep(before: string): Promise<number> {
    let swept = 0;
    for (;;) {
      const named = sql<boolean>`exists (select 1 from game_build_chunks b where b.sha256 = game_chunks.sha256)`;
      const batch = await this.db.transaction().execute(async (trx) => {
        const rows = await trx
          .deleteFrom('gameChunks')
          .where('sha256', 'in', (eb) =>
            eb
              .selectFrom('gameChunks')
              .select('sha256')
              .where('touchedAt', '<', before)
              .where(sql<boolean>`not ${named}`)
              .limit(SWEEP_BATCH),
          )
          .where('touchedAt', '<', before)
          .where(sql<boolean>`not ${named}`)
          .returningAll()
          .execute();
        const failed = new Set(
          (await this.storage.deleteMany(rows.map((row) => chunkKey(row.sha256)))).map((failure) => failure.key),
        );
        const kept = rows.filter((row) => failed.has(chunkKey(row.sha256)));
        if (kept.length > 0) await trx.insertInto('gameChunks').values(kept).execute();
        return { deleted: rows.length - kept.length, full: rows.length === SWEEP_BATCH };
      });
      swept += batch.deleted;
      if (!batch.full || batch.deleted === 0) break;
    }
    if (swept > 0) this.onSwept?.(swept);
    return swept;
  }

  /** Stored chunks and their bytes, store-wide (the console's Game client page). */
  async totals(): Promise<{ chunks: number; bytes: number }> {
    const chunks = await this.db
      .selectFrom('gameChunks')
      .select((eb) => [eb.fn.countAll<number>().as('n'), eb.fn.sum<number | string | null>('size').as('bytes')])
      .executeTakeFirstOrThrow();
    return { chunks: Number(chunks.n), bytes: Number(chunks.bytes ?? 0) };
  }

  /** Stored chunks and their bytes, and builds (metrics, read when scraped). */
  async figures(): Promise<{ chunks: number; bytes: number; builds: number }> {
    const builds = await this.db
      .selectFrom('gameBuilds')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    return { ...(await this.totals()), builds: Number(builds.n) };
  }

  /**
   * What `game_chunks` records of the stored chunk `name`: its size, and its first storing as its
   * last change (chunks never change); null when it is not stored. Answers a download that need not
   * ask the store (a presigned redirect).
   */
  async recorded(name: string): Promise<ObjectInfo | null> {
    const row = await this.db
      .selectFrom('gameChunks')
      .select(['size', 'createdAt'])
      .where('sha256', '=', name)
      .executeTakeFirst();
    return row === undefined ? null : { size: Number(row.size), lastModified: new Date(row.createdAt) };
  }
}
