import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ContentCache } from '../../db/content-writes.js';
import type { Db } from '../../db/index.js';
import type { DeltaRow, VersionRow } from '../../db/schema.js';
import { newId, now as clockNow, nowIso } from '../../domain/clock.js';
import { isPublished } from '../../domain/rollout.js';
import { attemptOutcome, claimJob, dueJobs, Poller } from '../../db/jobs.js';
import { localFileOf } from '../../storage/local-file.js';
import { keyFromFilePath, type Storage } from '../../storage/storage.js';
import { keyForUpload } from '../files/service.js';
import { makeDelta, rebuiltDigest, zstdVersion, type ZstdRun } from './zstd.js';

export interface DeltaOptions {
  /** Deltas to a new version from this many of the newest earlier versions. */
  sources: number;
  /** A delta is kept only when smaller than this share of the target file. */
  maxRatio: number;
  /**
   * Pairs with a file larger than this get no delta (recorded as skipped): zstd holds both files
   * and its tables, about 3 × the file, and nothing of zstd's caps that (`MAX_DELTA_FILE_BYTES`).
   */
  maxFileBytes: number;
  /** How often each instance plans and looks for a job. */
  pollMs: number;
  /** A claimed job is this instance's for this long, renewed while zstd runs; a crashed holder's lapses. */
  leaseMs: number;
  /** Attempts before a job is recorded as failed; the wait after the first failure (doubling). */
  maxAttempts: number;
  backoffMs: number;
}

export const DEFAULT_DELTA_OPTIONS = {
  pollMs: 1000,
  leaseMs: 60_000,
  maxAttempts: 5,
  backoffMs: 60_000,
} as const;

/**
 * A version published longer ago than this gets no deltas planned for it, unless it is its
 * package's newest: switching deltas on plans no history, only what players will update to.
 */
const PLAN_WINDOW_MS = 7 * 24 * 60 * 60 * 1000;

interface Logger {
  info(obj: object, msg: string): void;
  warn(msg: string): void;
}

type Stored = Pick<
  VersionRow,
  | 'id'
  | 'packageId'
  | 'versionCode'
  | 'filePath'
  | 'fileSize'
  | 'sha256'
  | 'publishAt'
  | 'createdAt'
  | 'revokedAt'
  | 'downloadType'
>;

/** What one attempt came to: a delta kept, one not worth keeping, or (thrown) a failure. */
type Made =
  | { status: 'ready'; fileKey: string; fileSize: number; sha256: string; run: ZstdRun }
  | { status: 'skipped'; error: string };

/** When a version became public: its publication time, or its creation when published at once. */
function publishedAt(v: Stored): number {
  const created = Date.parse(v.createdAt);
  return v.publishAt === null ? created : Math.max(created, Date.parse(v.publishAt));
}

/**
 * Makes delta updates in the background, on every instance: each pass plans the deltas of versions
 * that became published (created published, or their `publishAt` passed), then makes one due delta
 * with zstd. A job is claimed with a lease (db/jobs.ts), so each is made once however many instances
 * run, and one at a time per instance. A failed attempt is tried again with backoff, then recorded
 * as failed. A delta made ready clears every instance's cached check-update answers.
 */
export class DeltaWorker extends Poller {
  private zstd: Promise<string | null> | null = null;
  /** Aborts the zstd run under way (when the instance stops). */
  private current: AbortController | null = null;

  constructor(
    private readonly db: Db,
    private readonly storage: Storage,
    private readonly cache: ContentCache,
    private readonly options: DeltaOptions,
    private readonly log: Logger,
  ) {
    super(options.pollMs);
  }

  /** The zstd version found (checked once), or null when zstd is missing or older than 1.4.5. */
  zstdVersion(): Promise<string | null> {
    this.zstd ??= zstdVersion();
    return this.zstd;
  }

  /** Starts making deltas when zstd is installed; warns and makes none when it is not. */
  async launch(onError: (err: unknown) => void): Promise<boolean> {
    const version = await this.zstdVersion();
    if (version === null) {
      this.log.warn(
        'delta updates are off: the zstd program (1.4.5 or later) was not found; install it (apt-get install zstd) or set DELTAS=off',
      );
      return false;
    }
    this.start(onError);
    return true;
  }

  /** Stops looking for jobs; a delta being made is abandoned and its job left to the next instance at once. */
  override async stop(): Promise<void> {
    this.current?.abort();
    await super.stop();
  }

  /** One pass: plans what became published, then makes at most one due delta. */
  async tick(at = clockNow()): Promise<void> {
    await this.plan(at);
    const [due] = await dueJobs(this.db, 'softwareDeltas', at, 1);
    if (due !== undefined) await this.attempt(due, at);
  }

  /**
   * Forgets deltas whose source or target file changed since (row and file), and plans the deltas
   * of every published, stored version that has none yet: from each of the `sources` newest
   * published, non-revoked stored versions of its package with a lower `versionCode`. Inserting a
   * pair twice does nothing, so instances planning together plan each once.
   */
  async plan(at = clockNow()): Promise<void> {
    const versions: Stored[] = await this.db
      .selectFrom('softwareVersions')
      .select([
        'id',
        'packageId',
        'versionCode',
        'filePath',
        'fileSize',
        'sha256',
        'publishAt',
        'createdAt',
        'revokedAt',
        'downloadType',
      ])
      .execute();
    const deltas = await this.db
      .selectFrom('softwareDeltas')
      .select(['id', 'sourceVersionId', 'targetVersionId', 'sourceSha256', 'targetSha256', 'fileKey'])
      .execute();
    const byId = new Map(versions.map((v) => [v.id, v]));
    const stale = deltas.filter(
      (d) =>
        d.sourceSha256 === d.targetSha256 ||
        byId.get(d.sourceVersionId)?.sha256 !== d.sourceSha256 ||
        byId.get(d.targetVersionId)?.sha256 !== d.targetSha256,
    );
    if (stale.length > 0) await this.forget(stale);
    const planned = new Set(deltas.filter((d) => !stale.includes(d)).map((d) => d.targetVersionId));

    const offered = versions
      .filter(
        (v) =>
          v.downloadType === 'local' &&
          keyFromFilePath(v.filePath) !== null &&
          v.sha256 !== null &&
          v.revokedAt === null &&
          isPublished(v.publishAt, at),
      )
      .sort((a, b) => b.versionCode - a.versionCode);
    // Each package's newest offered version (they come newest first).
    const newest = new Map<string, string>();
    for (const v of offered) if (!newest.has(v.packageId)) newest.set(v.packageId, v.id);
    for (const target of offered) {
      if (planned.has(target.id)) continue;
      if (newest.get(target.packageId) !== target.id && publishedAt(target) < at - PLAN_WINDOW_MS) continue;
      // A version of the same bytes needs no delta (and zstd cannot take one file as both sides).
      const sources = offered
        .filter(
          (s) => s.packageId === target.packageId && s.versionCode < target.versionCode && s.sha256 !== target.sha256,
        )
        .slice(0, this.options.sources);
      if (sources.length === 0) continue;
      const created = nowIso();
      await this.db
        .insertInto('softwareDeltas')
        .values(
          sources.map((s) => ({
            id: newId(),
            sourceVersionId: s.id,
            targetVersionId: target.id,
            sourceSha256: s.sha256 ?? '',
            targetSha256: target.sha256 ?? '',
            status: 'pending' as const,
            nextAttemptMs: at,
            fileKey: null,
            fileSize: null,
            sha256: null,
            error: null,
            createdAt: created,
            updatedAt: created,
          })),
        )
        .onConflict((oc) => oc.columns(['sourceVersionId', 'targetVersionId']).doNothing())
        .execute();
    }
  }

  /** Deletes delta rows and then their files. */
  private async forget(rows: ReadonlyArray<Pick<DeltaRow, 'id' | 'fileKey'>>): Promise<void> {
    await this.db
      .deleteFrom('softwareDeltas')
      .where(
        'id',
        'in',
        rows.map((r) => r.id),
      )
      .execute();
    for (const row of rows) if (row.fileKey !== null) await this.storage.delete(row.fileKey);
    if (rows.some((r) => r.fileKey !== null)) await this.cache.bump();
  }

  /** Claims a job and, when this instance got it, makes one attempt; answers whether it did. */
  async attempt(id: string, at = clockNow()): Promise<boolean> {
    // From the claim on, a stop aborts this attempt (whatever step it is at).
    const controller = new AbortController();
    this.current = controller;
    try {
      return await this.attemptClaimed(id, at, controller);
    } finally {
      this.current = null;
    }
  }

  private async attemptClaimed(id: string, at: number, controller: AbortController): Promise<boolean> {
    let held = at + this.options.leaseMs;
    if (!(await claimJob(this.db, 'softwareDeltas', id, at, held))) return false;
    const job = await this.db.selectFrom('softwareDeltas').selectAll().where('id', '=', id).executeTakeFirst();
    const [source, target] = await Promise.all(
      [job?.sourceVersionId, job?.targetVersionId].map((v) =>
        this.db
          .selectFrom('softwareVersions')
          .select(['versionCode', 'filePath', 'fileSize'])
          .where('id', '=', v ?? '')
          .executeTakeFirst(),
      ),
    );
    if (job === undefined || source === undefined || target === undefined) return false;

    // The lease is renewed while zstd runs: a 2 GiB delta may take longer than one lease.
    let renewing = Promise.resolve();
    const renew = setInterval(
      () => {
        renewing = renewing.then(async () => {
          const until = clockNow() + this.options.leaseMs;
          if (await claimJob(this.db, 'softwareDeltas', id, clockNow(), until, held)) held = until;
        });
      },
      Math.max(10, this.options.leaseMs / 3),
    );
    const started = performance.now();
    let made: Made | null = null;
    let error: string | null = null;
    try {
      made = await this.make(job, source, target, controller.signal);
    } catch (err) {
      error = err instanceof Error ? err.message : String(err);
    } finally {
      clearInterval(renew);
      await renewing.catch(() => undefined);
    }
    if (controller.signal.aborted) {
      // Stopped midway: the job is left for another instance (or this one's next start) at once.
      await this.db
        .updateTable('softwareDeltas')
        .set({ leaseUntilMs: 0 })
        .where('id', '=', id)
        .where('leaseUntilMs', '=', held)
        .execute();
      if (made?.status === 'ready') await this.storage.delete(made.fileKey);
      return true;
    }
    const attempt = job.attempts + 1;
    const outcome = attemptOutcome(
      made?.status ?? null,
      attempt,
      attempt >= this.options.maxAttempts,
      this.options.backoffMs,
      clockNow(),
    );
    const failure = made?.status === 'skipped' ? made.error : error;
    const result = await this.db
      .updateTable('softwareDeltas')
      .set({
        ...outcome,
        error: failure,
        ...(made?.status === 'ready' ? { fileKey: made.fileKey, fileSize: made.fileSize, sha256: made.sha256 } : {}),
        updatedAt: nowIso(),
      })
      .where('id', '=', id)
      .where('leaseUntilMs', '=', held)
      .executeTakeFirst();
    const kept = result.numUpdatedRows > 0n;
    // The row went meanwhile (its version was deleted, or its file replaced): so does the delta.
    if (made?.status === 'ready' && !kept) await this.storage.delete(made.fileKey);
    if (made?.status === 'ready' && kept) await this.cache.bump();
    this.log.info(
      {
        delta: id,
        fromVersionCode: source.versionCode,
        toVersionCode: target.versionCode,
        status: outcome.status,
        attempt,
        ms: Math.round(performance.now() - started),
        ...(made?.status === 'ready'
          ? { bytes: made.fileSize, targetBytes: target.fileSize, kb: made.run.maxRssKb }
          : {}),
        ...(failure !== null ? { error: failure } : {}),
      },
      'delta job',
    );
    return true;
  }

  /** Makes the delta of `job` in a temporary folder and stores it when it is worth keeping. */
  private async make(
    job: DeltaRow,
    source: Pick<VersionRow, 'versionCode' | 'filePath' | 'fileSize'>,
    target: Pick<VersionRow, 'versionCode' | 'filePath' | 'fileSize'>,
    signal: AbortSignal,
  ): Promise<Made> {
    const limit = this.options.maxFileBytes;
    if (source.fileSize > limit || target.fileSize > limit) {
      return {
        status: 'skipped',
        error: `files over ${limit} bytes (DELTA_MAX_FILE_BYTES) get no delta: the source has ${source.fileSize}, the target ${target.fileSize}`,
      };
    }
    const work = await fs.promises.mkdtemp(path.join(os.tmpdir(), 'lds-delta-'));
    try {
      const from = await this.localFile(source.filePath, path.join(work, 'source'));
      const to = await this.localFile(target.filePath, path.join(work, 'target'));
      const out = path.join(work, 'delta.zst');
      const run = await makeDelta(from, to, out, signal);
      const size = (await fs.promises.stat(out)).size;
      if (size >= this.options.maxRatio * target.fileSize) {
        return {
          status: 'skipped',
          error: `the delta (${size} bytes) is not under ${this.options.maxRatio} of the file (${target.fileSize} bytes)`,
        };
      }
      // Checked before it is offered: the delta must rebuild exactly the file it was made for.
      const rebuilt = await rebuiltDigest(from, out, signal);
      if (rebuilt !== job.targetSha256) throw new Error('the delta does not rebuild the target file');
      const fileKey = keyForUpload(`delta-${source.versionCode}-to-${target.versionCode}.zst`);
      const written = await this.storage.write(fileKey, fs.createReadStream(out), 'application/zstd');
      return { status: 'ready', fileKey, fileSize: written.size, sha256: written.sha256, run };
    } finally {
      await fs.promises.rm(work, { recursive: true, force: true });
    }
  }

  /** A file zstd can read for the stored file `filePath`: the store's own (local), else a copy at `copy`. */
  private async localFile(filePath: string, copy: string): Promise<string> {
    const key = keyFromFilePath(filePath);
    if (key === null) throw new Error(`not a stored file: ${filePath}`);
    const file = await localFileOf(this.storage, key, copy);
    if (file === null) throw new Error(`the store has no file ${filePath}`);
    return file;
  }
}
