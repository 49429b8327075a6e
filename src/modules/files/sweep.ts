import { randomUUID } from 'node:crypto';
import type { Db } from '../../db/index.js';
import { Poller, takeLease } from '../../db/jobs.js';
import { now as clockNow } from '../../domain/clock.js';
import type { Storage } from '../../storage/storage.js';
import { GAME_CHUNKS_PREFIX } from '../game/chunks.js';
import { type TextNames, textNames, unnamedKeys } from './names.js';
import type { FileService } from './service.js';

const JOB = 'stored-upload-sweep';
/** Renewed with every batch: a crashed holder's lease lapses within it. */
const LEASE_MS = 4 * 60 * 1000;
/** Old keys looked up at once (a few indexed `IN` lookups per batch). */
const BATCH = 500;
/**
 * How long what the text columns name is used before it is read again: each read is one pass over
 * the rows that hold `/uploads/`, where searching them for every batch made a sweep grow with the
 * square of the store. A file first named in a text in that time could go: it is older than the expiry
 * and was named by nothing, the same as if the sweep had reached it a minute earlier.
 */
const TEXT_FOR_MS = 60_000;

export interface SweepCounts {
  /** Stored files listed. */
  examined: number;
  /** Of those, deleted: older than the expiry and named by nothing. */
  swept: number;
}

/**
 * Deletes stored files that nothing names (see `unnamedKeys`) once they are older than the upload
 * expiry: an upload whose version or release was refused, never created or deleted since. The store's
 * listing is streamed and looked up a batch at a time (the text columns read once a minute); game
 * chunks (`game-chunks/`) are not this sweep's. One instance at a time runs (a lease), each instance
 * trying every 10 minutes.
 */
export class StoredUploadSweep extends Poller {
  private readonly holder = randomUUID();

  constructor(
    private readonly db: Db,
    private readonly storage: Storage,
    private readonly files: FileService,
    private readonly expiryMs: number,
    private readonly onSwept?: (counts: SweepCounts) => void,
    /** Like the expiry of unfinished resumable uploads: every 10 minutes on each instance. */
    everyMs = 10 * 60_000,
    /** Sweeps what is recorded elsewhere (the game client's chunks) older than `before` (ISO 8601), under this lease. */
    private readonly sweepAlso?: (before: string) => Promise<unknown>,
  ) {
    super(everyMs);
  }

  /** One sweep at `at`; null when another instance holds the lease. */
  async run(at = clockNow()): Promise<SweepCounts | null> {
    if (!(await takeLease(this.db, JOB, this.holder, at, LEASE_MS))) return null;
    const before = at - this.expiryMs;
    const counts: SweepCounts = { examined: 0, swept: 0 };
    let batch: string[] = [];
    let inText: { names: TextNames; readAt: number } | null = null;
    const sweep = async () => {
      if (batch.length === 0) return;
      if (!(await takeLease(this.db, JOB, this.holder, clockNow(), LEASE_MS))) throw new Error('sweep lease lost');
      if (inText === null || performance.now() - inText.readAt >= TEXT_FOR_MS) {
        inText = { names: await textNames(this.db), readAt: performance.now() };
      }
      const unnamed = await unnamedKeys(this.db, batch, inText.names);
      await this.files.discardKeys(unnamed);
      counts.swept += unnamed.length;
      batch = [];
    };
    try {
      // Chunks are recorded in game_chunks and swept by `sweepAlso`, never by a lookup of names.
      for await (const object of this.storage.list(GAME_CHUNKS_PREFIX)) {
        counts.examined += 1;
        if (object.lastModified.getTime() >= before) continue;
        batch.push(object.key);
        if (batch.length >= BATCH) await sweep();
      }
      await sweep();
      await this.sweepAlso?.(new Date(before).toISOString());
    } finally {
      this.onSwept?.(counts);
    }
    return counts;
  }

  async tick(): Promise<void> {
    await this.run();
  }
}
