import type { Db } from '../../db/index.js';
import type { DeltaRow } from '../../db/schema.js';

/** A ready delta as check-update and the download route offer it. */
export interface DeltaOffer {
  readonly fromVersionCode: number;
  readonly fileKey: string;
  readonly fileSize: number;
  readonly sha256: string;
}

/** A delta as admin answers list it beside its target version. */
export interface DeltaSummary {
  fromVersionCode: number;
  status: DeltaRow['status'];
  fileSize: number | null;
  sha256: string | null;
}

/**
 * The deltas that may be offered to each of `targetIds`, by the source's `versionCode`: ready,
 * neither end revoked, and both ends still holding the files the delta was made from.
 */
export async function readyDeltas(db: Db, targetIds: readonly string[]): Promise<Map<string, Map<number, DeltaOffer>>> {
  const out = new Map<string, Map<number, DeltaOffer>>();
  if (targetIds.length === 0) return out;
  const rows = await db
    .selectFrom('softwareDeltas as d')
    .innerJoin('softwareVersions as s', 's.id', 'd.sourceVersionId')
    .innerJoin('softwareVersions as t', 't.id', 'd.targetVersionId')
    .select(['d.targetVersionId', 's.versionCode', 'd.fileKey', 'd.fileSize', 'd.sha256'])
    .where('d.status', '=', 'ready')
    .where('d.targetVersionId', 'in', targetIds)
    .where('s.revokedAt', 'is', null)
    .where('t.revokedAt', 'is', null)
    .whereRef('s.sha256', '=', 'd.sourceSha256')
    .whereRef('t.sha256', '=', 'd.targetSha256')
    .execute();
  for (const row of rows) {
    if (row.fileKey === null || row.fileSize === null || row.sha256 === null) continue;
    const offers = out.get(row.targetVersionId) ?? new Map<number, DeltaOffer>();
    offers.set(row.versionCode, {
      fromVersionCode: row.versionCode,
      fileKey: row.fileKey,
      fileSize: row.fileSize,
      sha256: row.sha256,
    });
    out.set(row.targetVersionId, offers);
  }
  return out;
}

/** Every delta to each of `targetIds`, newest source first. */
export async function deltaSummaries(db: Db, targetIds: readonly string[]): Promise<Map<string, DeltaSummary[]>> {
  const out = new Map<string, DeltaSummary[]>();
  if (targetIds.length === 0) return out;
  const rows = await db
    .selectFrom('softwareDeltas as d')
    .innerJoin('softwareVersions as s', 's.id', 'd.sourceVersionId')
    .select(['d.targetVersionId', 's.versionCode', 'd.status', 'd.fileSize', 'd.sha256'])
    .where('d.targetVersionId', 'in', targetIds)
    .orderBy('s.versionCode', 'desc')
    .execute();
  for (const row of rows) {
    const list = out.get(row.targetVersionId) ?? [];
    list.push({ fromVersionCode: row.versionCode, status: row.status, fileSize: row.fileSize, sha256: row.sha256 });
    out.set(row.targetVersionId, list);
  }
  return out;
}

/**
 * Store keys of the delta files made from or to the versions that `scope` names (versions, or a
 * package's): read before those versions are deleted (their delta rows go with them, by cascade),
 * deleted from the store once that is committed.
 */
export async function deltaFileKeys(
  db: Db,
  scope: { versionIds: readonly string[] } | { packageId: string },
): Promise<string[]> {
  const ids =
    'packageId' in scope
      ? (await db.selectFrom('softwareVersions').select('id').where('packageId', '=', scope.packageId).execute()).map(
          (v) => v.id,
        )
      : scope.versionIds;
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('softwareDeltas')
    .select('fileKey')
    .where((eb) => eb.or([eb('sourceVersionId', 'in', ids), eb('targetVersionId', 'in', ids)]))
    .where('fileKey', 'is not', null)
    .execute();
  return rows.flatMap((r) => (r.fileKey === null ? [] : [r.fileKey]));
}
