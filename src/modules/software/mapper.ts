import type { Static } from 'typebox';
import type { PackageRow, VersionRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { type Lang, localize } from '../../domain/lang.js';
import type { PackageSchema, VersionSchema } from './schemas.js';

export type Version = Static<typeof VersionSchema>;
export type Package = Static<typeof PackageSchema>;

/** The latest of a package's versions: the flagged one, else the highest `versionCode`. */
export function effectiveLatest(versions: readonly VersionRow[]): VersionRow | undefined {
  return versions.find((v) => v.isLatest === 1) ?? [...versions].sort((a, b) => b.versionCode - a.versionCode)[0];
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
  };
}

/**
 * A package as the API shows it. `versions` are the package's versions newest first; in the list
 * only the latest is shown, in the detail all of them.
 */
export function toPackage(
  row: PackageRow,
  versions: readonly VersionRow[],
  lang: Lang,
  only: 'latest' | 'all',
): Package {
  const latest = effectiveLatest(versions);
  const shown = only === 'all' ? versions : latest ? [latest] : [];
  return {
    id: row.id,
    slug: row.slug,
    ...localize('name', row.nameZh, row.nameEn, lang),
    ...localize('description', row.descriptionZh, row.descriptionEn, lang),
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    versions: shown.map((v) => toVersion(v, lang, latest?.id)),
    _count: { versions: versions.length },
    lang,
  };
}
