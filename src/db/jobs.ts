import type { Db } from './index.js';

/**
 * Background work that must be done once across instances (webhook deliveries, delta jobs): a
 * table of jobs, each `pending` until done, claimed by an instance with a lease (a conditional
 * update, so that one instance wins), retried with backoff. A crashed holder's lease lapses and
 * another instance takes the job up.
 */

/** Tables of jobs: an `id`, a `status` that is `pending` until done, `nextAttemptMs` and `leaseUntilMs`. */
export type JobTable = 'webhookDeliveries' | 'softwareDeltas';

const MAX_BACKOFF_MS = 60 * 60 * 1000;

/** The wait before attempt `attempts + 1`: doubling from `base`, with up to 20 % jitter, at most an hour. */
export function backoff(base: number, attempts: number, random = Math.random()): number {
  const plain = Math.min(MAX_BACKOFF_MS, base * 2 ** Math.max(0, attempts - 1));
  return Math.round(plain * (1 + 0.2 * random));
}

/** Ids of pending jobs due at `at` and held by no live lease, the longest waiting first. */
export async function dueJobs(db: Db, table: JobTable, at: number, limit: number): Promise<string[]> {
  const rows = await db
    .selectFrom(table)
    .select('id')
    .where('status', '=', 'pending')
    .where('nextAttemptMs', '<=', at)
    .where('leaseUntilMs', '<', at)
    .orderBy('nextAttemptMs')
    .limit(limit)
    .execute();
  return rows.map((r) => r.id);
}

/**
 * Claims a pending job until `until` (epoch ms) unless a live lease holds it; answers whether this
 * caller got it. With `held` (the lease this caller holds), extends that lease instead.
 */
export async function claimJob(
  db: Db,
  table: JobTable,
  id: string,
  at: number,
  until: number,
  held?: number,
): Promise<boolean> {
  const result = await db
    .updateTable(table)
    .set({ leaseUntilMs: until })
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .where('leaseUntilMs', held === undefined ? '<' : '=', held ?? at)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * The columns that end attempt number `attempt` and release its lease: `done` (a final status), else
 * `failed` when the caller gives up, else pending again after the backoff from `backoffMs`.
 */
export function attemptOutcome<S extends string>(
  done: S | null,
  attempt: number,
  giveUp: boolean,
  backoffMs: number,
  at: number,
): { status: S | 'pending' | 'failed'; attempts: number; leaseUntilMs: number; nextAttemptMs?: number } {
  if (done !== null) return { status: done, attempts: attempt, leaseUntilMs: 0 };
  if (giveUp) return { status: 'failed', attempts: attempt, leaseUntilMs: 0 };
  return { status: 'pending', attempts: attempt, leaseUntilMs: 0, nextAttemptMs: at + backoff(backoffMs, attempt) };
}

/**
 * Takes or renews the lease of a job that one instance at a time runs (`jobLeases`), unless another
 * holder's lease is still running; answers whether `holder` has it until `at + leaseMs`.
 */
export async function takeLease(db: Db, name: string, holder: string, at: number, leaseMs: number): Promise<boolean> {
  await db
    .insertInto('jobLeases')
    .values({ name, holder: '', expiresMs: 0 })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  const taken = await db
    .updateTable('jobLeases')
    .set({ holder, expiresMs: at + leaseMs })
    .where('name', '=', name)
    .where((eb) => eb.or([eb('holder', '=', holder), eb('expiresMs', '<=', at)]))
    .executeTakeFirst();
  return taken.numUpdatedRows > 0n;
}

/**
 * Runs `tick` every `pollMs` on each instance, one pass at a time; `stop` waits for the pass under way.
 */
export abstract class Poller {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly pollMs: number) {}

  abstract tick(): Promise<void>;

  start(onError: (err: unknown) => void): void {
    this.timer = setInterval(() => {
      this.running ??= this.tick()
        .catch(onError)
        .finally(() => (this.running = null));
    }, this.pollMs);
    this.timer.unref();
  }

  /** Stops looking for work and waits for the pass under way. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }
}
