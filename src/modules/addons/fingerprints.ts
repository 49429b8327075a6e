import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import { ArchiveError, archiveFingerprints, type FolderFingerprint } from 'patchwell-client/fingerprint';
import type { Db } from '../../db/index.js';
import { Poller, takeLease } from '../../db/jobs.js';
import type { ReleaseRow } from '../../db/schema.js';
import { now as clockNow, nowIso } from '../../domain/clock.js';
import { localFileOf } from '../../storage/local-file.js';
import { keyFromFilePath, type Storage } from '../../storage/storage.js';

const JOB = 'release-fingerprints';
/** Renewed with every batch: a crashed holder's lease lapses within it. */
const LEASE_MS = 4 * 60 * 1000;
/** Releases read per query. */
const BATCH = 50;
/** Fingerprints looked up per query (under both engines' parameter limits). */
const LOOKUP_CHUNK = 1000;

/** The columns that say whether, and from which file, a release has folders. */
export type FingerprintedRelease = Pick<ReleaseRow, 'id' | 'downloadType' | 'filePath'>;

/** The folders of a release's stored file, as read: null when it could not be read now (tried again later). */
export type ReadFolders = FolderFingerprint[] | null;

/** A stored fingerprint: a folder of a release. */
export interface FolderMatch {
  fingerprint: string;
  folder: string;
  releaseId: string;
}

export interface FingerprintCounts {
  /** Releases whose stored file was read (their folders recorded, none when it is not an addon zip). */
  fingerprinted: number;
  /** Releases whose file could not be read this time (tried again on the next run). */
  failed: number;
}

/**
 * The fingerprint of each top-level folder of each addon release's stored zip (the algorithm of
 * `patchwell-client/fingerprint`, shared with the addon manager): read when a release is created or
 * its file changes, and by this background job for releases that have none recorded for their current
 * file (those from before, or whose read failed). The job runs on one instance at a time (a lease),
 * a bounded batch of releases per query, and resumes where the records say after a restart.
 */
export class ReleaseFingerprints extends Poller {
  private readonly holder = randomUUID();

  constructor(
    private readonly db: Db,
    private readonly storage: Storage,
    private readonly log: FastifyBaseLogger,
    everyMs = 60_000,
  ) {
    super(everyMs);
  }

  /**
   * The folders of the release's stored file: none for a link, a file not in the store or a file that
   * is not an addon zip; null (logged) when the store could not be read now.
   */
  async read(release: FingerprintedRelease): Promise<ReadFolders> {
    const key = release.downloadType === 'local' ? keyFromFilePath(release.filePath) : null;
    if (key === null) return [];
    const work = await fs.promises.mkdtemp(path.join(os.tmpdir(), 'patchwell-fingerprints-'));
    try {
      const file = await localFileOf(this.storage, key, path.join(work, 'release.zip'));
      return file === null ? [] : await archiveFingerprints(file);
    } catch (err) {
      if (err instanceof ArchiveError) return [];
      this.log.warn({ err, releaseId: release.id }, 'could not fingerprint the folders of a release file');
      return null;
    } finally {
      await fs.promises.rm(work, { recursive: true, force: true });
    }
  }

  /**
   * Records `folders` (read from the file `filePath`) as the release's, replacing what it had, unless
   * the release is gone or its file has changed since. `trx` is a transaction.
   */
  async record(trx: Db, releaseId: string, filePath: string, folders: readonly FolderFingerprint[]): Promise<void> {
    const current = await trx.selectFrom('releases').select('filePath').where('id', '=', releaseId).executeTakeFirst();
    if (current?.filePath !== filePath) return;
    await this.forget(trx, releaseId);
    if (folders.length > 0) {
      await trx
        .insertInto('releaseFolders')
        .values(folders.map((f) => ({ releaseId, folder: f.folder, fingerprint: f.fingerprint })))
        .execute();
    }
    await trx.insertInto('releaseFingerprints').values({ releaseId, filePath, createdAt: nowIso() }).execute();
  }

  /** Forgets the release's folders (its file is gone, or is about to be read again). */
  async forget(trx: Db, releaseId: string): Promise<void> {
    await trx.deleteFrom('releaseFolders').where('releaseId', '=', releaseId).execute();
    await trx.deleteFrom('releaseFingerprints').where('releaseId', '=', releaseId).execute();
  }

  /** The stored folders with any of these fingerprints. */
  async matches(fingerprints: readonly string[]): Promise<FolderMatch[]> {
    const out: FolderMatch[] = [];
    for (let i = 0; i < fingerprints.length; i += LOOKUP_CHUNK) {
      const chunk = fingerprints.slice(i, i + LOOKUP_CHUNK);
      out.push(
        ...(await this.db
          .selectFrom('releaseFolders')
          .select(['fingerprint', 'folder', 'releaseId'])
          .where('fingerprint', 'in', chunk)
          .execute()),
      );
    }
    return out;
  }

  /** Every top-level folder of each of these releases, sorted. */
  async foldersOf(releaseIds: readonly string[]): Promise<Map<string, string[]>> {
    const out = new Map<string, string[]>();
    for (let i = 0; i < releaseIds.length; i += LOOKUP_CHUNK) {
      const rows = await this.db
        .selectFrom('releaseFolders')
        .select(['releaseId', 'folder'])
        .where('releaseId', 'in', releaseIds.slice(i, i + LOOKUP_CHUNK))
        .execute();
      for (const row of rows) out.set(row.releaseId, [...(out.get(row.releaseId) ?? []), row.folder]);
    }
    for (const list of out.values()) list.sort();
    return out;
  }

  /** Stored-file releases whose folders are not recorded for their current file, by id after `after`. */
  private pending(after: string): Promise<FingerprintedRelease[]> {
    return this.db
      .selectFrom('releases as r')
      .leftJoin('releaseFingerprints as f', 'f.releaseId', 'r.id')
      .select(['r.id', 'r.downloadType', 'r.filePath'])
      .where('r.downloadType', '=', 'local')
      .where('r.filePath', '<>', '')
      .where((eb) => eb.or([eb('f.releaseId', 'is', null), eb('f.filePath', '<>', eb.ref('r.filePath'))]))
      .where('r.id', '>', after)
      .orderBy('r.id')
      .limit(BATCH)
      .execute();
  }

  /** One pass over every release without folders for its file; null when another instance holds the lease. */
  async run(at = clockNow()): Promise<FingerprintCounts | null> {
    if (!(await takeLease(this.db, JOB, this.holder, at, LEASE_MS))) return null;
    const counts: FingerprintCounts = { fingerprinted: 0, failed: 0 };
    let after = '';
    for (;;) {
      const batch = await this.pending(after);
      if (batch.length === 0) return counts;
      for (const release of batch) {
        const folders = await this.read(release);
        if (folders === null) {
          counts.failed += 1;
          continue;
        }
        await this.db.transaction().execute((trx) => this.record(trx, release.id, release.filePath, folders));
        counts.fingerprinted += 1;
      }
      after = batch[batch.length - 1]?.id ?? after;
      if (!(await takeLease(this.db, JOB, this.holder, clockNow(), LEASE_MS))) {
        throw new Error('release fingerprint lease lost');
      }
    }
  }

  async tick(): Promise<void> {
    await this.run();
  }
}
