import type { CompiledQuery } from 'kysely';
import type { Db } from '../../db/index.js';
import { publishedBy } from '../../db/published.js';
import type { AddonRow, ReleaseRow, ScreenshotRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { COUNTERS_STATE_ID } from '../downloads/counting.js';

/** Longest `IN (…)` list sent in one statement; well under both engines' parameter limits. */
const CHUNK = 500;

async function inChunks<T>(ids: readonly string[], query: (chunk: string[]) => Promise<T[]>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < ids.length; i += CHUNK) out.push(...(await query(ids.slice(i, i + CHUNK))));
  return out;
}

export function findAddon(db: Db, idOrSlug: string): Promise<AddonRow | undefined> {
  return db
    .selectFrom('addons')
    .selectAll()
    .where((eb) => eb.or([eb('id', '=', idOrSlug), eb('slug', '=', idOrSlug)]))
    .executeTakeFirst();
}

export function findAddonById(db: Db, id: string): Promise<AddonRow | undefined> {
  return db.selectFrom('addons').selectAll().where('id', '=', id).executeTakeFirst();
}

export function findAddonBySlug(db: Db, slug: string): Promise<AddonRow | undefined> {
  return db.selectFrom('addons').selectAll().where('slug', '=', slug).executeTakeFirst();
}

/** Every addon (drafts included), most recently updated first. */
export function listAddons(db: Db): Promise<AddonRow[]> {
  return db.selectFrom('addons').selectAll().orderBy('updatedAt', 'desc').orderBy('id').execute();
}

/** The flagged latest release of every addon in the channel, when published at `at`. */
export function flaggedLatestReleases(db: Db, at: string): Promise<ReleaseRow[]> {
  return db
    .selectFrom('releases')
    .selectAll()
    .where('isLatest', '=', 1)
    .where('wowVersion', '=', CHANNEL)
    .where(publishedBy(at))
    .execute();
}

/** Number of channel releases published at `at`, per addon. */
export async function releaseCounts(db: Db, at: string): Promise<Map<string, number>> {
  const rows = await db
    .selectFrom('releases')
    .select(['addonId', (eb) => eb.fn.countAll<number | string>().as('count')])
    .where('wowVersion', '=', CHANNEL)
    .where(publishedBy(at))
    .groupBy('addonId')
    .execute();
  return new Map(rows.map((r) => [r.addonId, Number(r.count)]));
}

/** Every screenshot, by `sortOrder` then `createdAt`. */
export function allScreenshots(db: Db): Promise<ScreenshotRow[]> {
  return screenshotsQuery(db).execute();
}

function screenshotsQuery(db: Db) {
  return db.selectFrom('screenshots').selectAll().orderBy('sortOrder', 'asc').orderBy('createdAt', 'asc').orderBy('id');
}

export function screenshotsOf(db: Db, addonId: string): Promise<ScreenshotRow[]> {
  return screenshotsQuery(db).where('addonId', '=', addonId).execute();
}

export function findScreenshot(db: Db, id: string): Promise<ScreenshotRow | undefined> {
  return db.selectFrom('screenshots').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * Releases of the channel, newest first; of one addon when `addonId` is given; only those published
 * at `at` unless it is null (administrators see scheduled ones too).
 */
export function releasesOf(db: Db, addonId: string | undefined, at: string | null): Promise<ReleaseRow[]> {
  let query = db.selectFrom('releases').selectAll().where('wowVersion', '=', CHANNEL);
  if (addonId !== undefined) query = query.where('addonId', '=', addonId);
  if (at !== null) query = query.where(publishedBy(at));
  return query.orderBy('createdAt', 'desc').orderBy('id', 'desc').execute();
}

export function findRelease(db: Db, id: string): Promise<ReleaseRow | undefined> {
  return db.selectFrom('releases').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The newest release published at `at` of each of `addonIds` (for addons with no published flagged latest). */
export async function newestReleases(db: Db, addonIds: readonly string[], at: string): Promise<ReleaseRow[]> {
  const rows = await inChunks(addonIds, (chunk) =>
    db
      .selectFrom('releases')
      .selectAll()
      .where('addonId', 'in', chunk)
      .where('wowVersion', '=', CHANNEL)
      .where(publishedBy(at))
      .orderBy('createdAt', 'desc')
      .orderBy('id', 'desc')
      .execute(),
  );
  const newest = new Map<string, ReleaseRow>();
  for (const row of rows) if (!newest.has(row.addonId)) newest.set(row.addonId, row);
  return [...newest.values()];
}

/** Addon summaries (`id`, `slug`, names) by id. */
export async function addonSummaries(
  db: Db,
  ids: readonly string[],
): Promise<Map<string, Pick<AddonRow, 'id' | 'slug' | 'nameZh' | 'nameEn'>>> {
  const rows = await inChunks([...new Set(ids)], (chunk) =>
    db.selectFrom('addons').select(['id', 'slug', 'nameZh', 'nameEn']).where('id', 'in', chunk).execute(),
  );
  return new Map(rows.map((r) => [r.id, r]));
}

/** Makes `releaseId` the only latest release of its addon in the channel. */
export async function moveLatest(trx: Db, addonId: string, releaseId: string): Promise<void> {
  await trx
    .updateTable('releases')
    .set({ isLatest: 0 })
    .where('addonId', '=', addonId)
    .where('wowVersion', '=', CHANNEL)
    .where('isLatest', '=', 1)
    .where('id', '!=', releaseId)
    .execute();
  await trx.updateTable('releases').set({ isLatest: 1 }).where('id', '=', releaseId).execute();
}

/** After the latest was deleted: flags the newest remaining release, when there is one. */
export async function reflagLatest(trx: Db, addonId: string): Promise<void> {
  const next = await trx
    .selectFrom('releases')
    .select('id')
    .where('addonId', '=', addonId)
    .where('wowVersion', '=', CHANNEL)
    .orderBy('createdAt', 'desc')
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (next) await moveLatest(trx, addonId, next.id);
}

/**
 * Serialises release writes of one addon on PostgreSQL (the latest flag moves in two statements);
 * SQLite runs one write transaction at a time anyway. Answers whether the addon exists.
 */
export async function lockAddon(trx: Db, addonId: string, engine: 'sqlite' | 'postgres'): Promise<boolean> {
  let query = trx.selectFrom('addons').select('id').where('id', '=', addonId);
  if (engine === 'postgres') query = query.forUpdate();
  return (await query.executeTakeFirst()) !== undefined;
}

/* Download counters: read fresh, never from the content cache. */

/** Compiled once per database: this read runs on every catalogue request. */
const counterVersionQueries = new WeakMap<Db, CompiledQuery<{ version: number }>>();

export async function counterVersion(db: Db): Promise<number> {
  let query = counterVersionQueries.get(db);
  if (!query) {
    query = db.selectFrom('contentState').select('version').where('id', '=', COUNTERS_STATE_ID).compile();
    counterVersionQueries.set(db, query);
  }
  const { rows } = await db.executeQuery(query);
  return rows[0]?.version ?? 0;
}

/** Addon totals and release counts counted after counter version `since` (see `DownloadCounter.release`). */
export async function countersAfter(
  db: Db,
  since: number,
): Promise<{ totals: { id: string; totalDownloads: number }[]; releases: { id: string; downloadCount: number }[] }> {
  const totals = await db
    .selectFrom('addons')
    .select(['id', 'totalDownloads'])
    .where('counterSeq', '>', since)
    .execute();
  const releases = await db
    .selectFrom('releases')
    .select(['id', 'downloadCount'])
    .where('counterSeq', '>', since)
    .execute();
  return { totals, releases };
}

/** Published addons, as the addon managers' index names them. */
export function publishedAddonRefs(db: Db): Promise<Pick<AddonRow, 'id' | 'slug' | 'nameZh' | 'nameEn'>[]> {
  return db.selectFrom('addons').select(['id', 'slug', 'nameZh', 'nameEn']).where('published', '=', 1).execute();
}

export type ReleaseFileRow = Pick<
  ReleaseRow,
  'id' | 'addonId' | 'version' | 'sha256' | 'fileSize' | 'createdAt' | 'isLatest' | 'dependencies' | 'fileSignature'
>;

/** Every channel release published at `at`, newest first, without its texts (the addon managers' index). */
export function publishedReleaseFiles(db: Db, at: string): Promise<ReleaseFileRow[]> {
  return db
    .selectFrom('releases')
    .select([
      'id',
      'addonId',
      'version',
      'sha256',
      'fileSize',
      'createdAt',
      'isLatest',
      'dependencies',
      'fileSignature',
    ])
    .where('wowVersion', '=', CHANNEL)
    .where(publishedBy(at))
    .orderBy('createdAt', 'desc')
    .orderBy('id', 'desc')
    .execute();
}

/** The changelogs of these releases (at most one `IN` list's worth), by release id. */
export async function releaseChangelogs(
  db: Db,
  ids: readonly string[],
): Promise<Map<string, Pick<ReleaseRow, 'changelogZh' | 'changelogEn'>>> {
  const rows = await db
    .selectFrom('releases')
    .select(['id', 'changelogZh', 'changelogEn'])
    .where('id', 'in', [...new Set(ids)])
    .execute();
  return new Map(rows.map(({ id, ...texts }) => [id, texts]));
}

/** The ids of the addons with these slugs, by slug (unknown slugs are absent). */
export async function addonIdsBySlug(db: Db, slugs: readonly string[]): Promise<Map<string, string>> {
  if (slugs.length === 0) return new Map();
  const rows = await db
    .selectFrom('addons')
    .select(['id', 'slug'])
    .where('slug', 'in', [...slugs])
    .execute();
  return new Map(rows.map((r) => [r.slug, r.id]));
}
