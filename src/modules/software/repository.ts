import type { Db, Engine } from '../../db/index.js';
import type { PackageRow, VersionRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { conflict } from '../../http/errors.js';

export function findPackage(db: Db, idOrSlug: string): Promise<PackageRow | undefined> {
  return db
    .selectFrom('softwarePackages')
    .selectAll()
    .where((eb) => eb.or([eb('id', '=', idOrSlug), eb('slug', '=', idOrSlug)]))
    .executeTakeFirst();
}

export function findPackageBySlug(db: Db, slug: string): Promise<PackageRow | undefined> {
  return db.selectFrom('softwarePackages').selectAll().where('slug', '=', slug).executeTakeFirst();
}

export function listPackages(db: Db): Promise<PackageRow[]> {
  return db.selectFrom('softwarePackages').selectAll().orderBy('createdAt', 'asc').orderBy('id').execute();
}

/** Versions of the channel, newest `versionCode` first. */
export function versionsOf(db: Db, packageIds: readonly string[]): Promise<VersionRow[]> {
  if (packageIds.length === 0) return Promise.resolve([]);
  return db
    .selectFrom('softwareVersions')
    .selectAll()
    .where('packageId', 'in', packageIds)
    .where('wowVersion', '=', CHANNEL)
    .orderBy('versionCode', 'desc')
    .orderBy('createdAt', 'desc')
    .execute();
}

/** The latest version of a package: the flagged one, else the highest `versionCode`. */
export async function latestVersion(db: Db, packageId: string): Promise<VersionRow | undefined> {
  return db
    .selectFrom('softwareVersions')
    .selectAll()
    .where('packageId', '=', packageId)
    .where('wowVersion', '=', CHANNEL)
    .orderBy('isLatest', 'desc')
    .orderBy('versionCode', 'desc')
    .orderBy('createdAt', 'desc')
    .limit(1)
    .executeTakeFirst();
}

/**
 * Refuses a `versionCode` another version of the package (in the channel) holds: 409. Creations hold
 * `lockPackage`, so two concurrent ones cannot both pass.
 */
export async function requireFreeVersionCode(
  db: Db,
  packageId: string,
  versionCode: number,
  exceptId: string | null = null,
): Promise<void> {
  let query = db
    .selectFrom('softwareVersions')
    .select(['id', 'version'])
    .where('packageId', '=', packageId)
    .where('wowVersion', '=', CHANNEL)
    .where('versionCode', '=', versionCode);
  if (exceptId !== null) query = query.where('id', '!=', exceptId);
  const taken = await query.executeTakeFirst();
  if (taken) {
    throw conflict(
      `versionCode ${versionCode} is already used in this package (version ${taken.version}, id ${taken.id})`,
    );
  }
}

export function findVersion(db: Db, id: string): Promise<VersionRow | undefined> {
  return db.selectFrom('softwareVersions').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * Locks a package row for the rest of the transaction and answers whether it exists. Every write that
 * moves the `isLatest` flag takes this lock first, so concurrent moves on PostgreSQL (several
 * instances, or one instance's pool) queue up instead of colliding on `software_versions_one_latest`.
 * SQLite needs no lock: it runs one write transaction at a time.
 */
export async function lockPackage(trx: Db, engine: Engine, packageId: string): Promise<boolean> {
  const query = trx.selectFrom('softwarePackages').select('id').where('id', '=', packageId);
  const row = await (engine === 'postgres' ? query.forUpdate() : query).executeTakeFirst();
  return row !== undefined;
}

/** Makes `versionId` the only latest version of its package in the channel; hold `lockPackage` first. */
export async function moveLatest(trx: Db, packageId: string, versionId: string): Promise<void> {
  await trx
    .updateTable('softwareVersions')
    .set({ isLatest: 0 })
    .where('packageId', '=', packageId)
    .where('wowVersion', '=', CHANNEL)
    .where('isLatest', '=', 1)
    .where('id', '!=', versionId)
    .execute();
  await trx.updateTable('softwareVersions').set({ isLatest: 1 }).where('id', '=', versionId).execute();
}

/** After the latest was deleted: flags the remaining version with the highest `versionCode`. */
export async function reflagLatest(trx: Db, packageId: string): Promise<void> {
  const flagged = await trx
    .selectFrom('softwareVersions')
    .select('id')
    .where('packageId', '=', packageId)
    .where('wowVersion', '=', CHANNEL)
    .where('isLatest', '=', 1)
    .executeTakeFirst();
  if (flagged) return;
  const next = await latestVersion(trx, packageId);
  if (next) await moveLatest(trx, packageId, next.id);
}
