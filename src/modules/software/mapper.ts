import type { Static } from 'typebox';
import type { PackageRow, VersionRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { type Lang, localize } from '../../domain/lang.js';
import { fileSignatureFields } from '../downloads/file-signature.js';
import { isPublished, packageLatest, type RolloutVersion } from '../../domain/rollout.js';
import type { AutoHaltSchema, PackageSchema, VersionSchema } from './schemas.js';

export type Version = Static<typeof VersionSchema>;
export type Package = Static<typeof PackageSchema>;
export type AutoHalt = Static<typeof AutoHaltSchema>;

/** A version row as the rollout rules see it at time `at` (epoch ms). */
export interface RolloutRow extends RolloutVersion {
  readonly row: VersionRow;
}

export function toRollout(row: VersionRow, at: number): RolloutRow {
  return {
    row,
    id: row.id,
    versionCode: row.versionCode,
    rolloutPercent: row.rolloutPercent,
    forceUpdate: row.forceUpdate === 1,
    isLatest: row.isLatest === 1,
    offered: row.revokedAt === null && isPublished(row.publishAt, at),
    revoked: row.revokedAt !== null,
  };
}

/** The id of the latest among offered versions (flag rules), for the `isLatest` of answers. */
export function latestIdOf(versions: readonly VersionRow[], at: number): string | undefined {
  return packageLatest(versions.map((v) => toRollout(v, at)))?.row.id;
}

export function autoHaltOf(row: VersionRow): AutoHalt | null {
  return row.autoHalt === null ? null : (JSON.parse(row.autoHalt) as AutoHalt);
}

export function toVersion(row: VersionRow, lang: Lang, latestId: string | undefined): Version {
  return {
    id: row.id,
    packageId: row.packageId,
    version: row.version,
    versionCode: row.versionCode,
    ...localize('changelog', row.changelogZh, row.changelogEn, lang),
    downloadType: row.downloadType,
    filePath: row.filePath,
    externalUrl: row.externalUrl,
    fileSize: row.fileSize,
    sha256: row.sha256,
    forceUpdate: row.forceUpdate === 1,
    minVersion: row.minVersion,
    isLatest: row.id === latestId,
    wowVersion: CHANNEL,
    downloadCount: row.downloadCount,
    launcherDownloadCount: row.launcherDownloadCount,
    createdAt: row.createdAt,
    rolloutPercent: row.rolloutPercent,
    publishAt: row.publishAt,
    revokedAt: row.revokedAt,
    autoHalt: autoHaltOf(row),
    haltedAt: row.haltedAt,
    haltReason: row.haltReason,
    ...fileSignatureFields(row.fileSignature),
  };
}

/**
 * A package as the API shows it. `versions` are the versions to show, newest first; in the list
 * only the latest is shown, in the detail all of them.
 */
export function toPackage(
  row: PackageRow,
  versions: readonly VersionRow[],
  lang: Lang,
  only: 'latest' | 'all',
  at: number,
): Package {
  const latestId = latestIdOf(versions, at);
  const latest = versions.find((v) => v.id === latestId);
  const shown = only === 'all' ? versions : latest ? [latest] : [];
  return {
    id: row.id,
    slug: row.slug,
    ...localize('name', row.nameZh, row.nameEn, lang),
    ...localize('description', row.descriptionZh, row.descriptionEn, lang),
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    versions: shown.map((v) => toVersion(v, lang, latestId)),
    _count: { versions: versions.length },
    lang,
  };
}
