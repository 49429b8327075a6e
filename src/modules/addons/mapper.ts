import type { Static } from 'typebox';
import type { AddonRow, ReleaseRow, ScreenshotRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { type Lang, localize } from '../../domain/lang.js';
import { fileSignatureFields } from '../downloads/file-signature.js';
import type {
  AddonSchema,
  AddonSummarySchema,
  ReleaseDependencySchema,
  ReleaseListItemSchema,
  ReleaseSchema,
  ScreenshotSchema,
} from './schemas.js';

export type Release = Static<typeof ReleaseSchema>;
export type ReleaseListItem = Static<typeof ReleaseListItemSchema>;
export type Screenshot = Static<typeof ScreenshotSchema>;
export type Addon = Static<typeof AddonSchema>;
export type AddonSummary = Static<typeof AddonSummarySchema>;

/** The latest of an addon's releases (newest first): the flagged one, else the newest. */
export function effectiveLatest<R extends Pick<ReleaseRow, 'isLatest'>>(releases: readonly R[]): R | undefined {
  return releases.find((r) => r.isLatest === 1) ?? releases[0];
}

export function toRelease(row: ReleaseRow, lang: Lang, latestId: string | undefined): Release {
  return {
    id: row.id,
    addonId: row.addonId,
    version: row.version,
    ...localize('changelog', row.changelogZh, row.changelogEn, lang),
    downloadType: row.downloadType,
    filePath: row.filePath,
    externalUrl: row.externalUrl,
    fileSize: row.fileSize,
    sha256: row.sha256,
    gameVersion: row.gameVersion,
    downloadCount: row.downloadCount,
    isLatest: row.id === latestId,
    wowVersion: CHANNEL,
    createdAt: row.createdAt,
    publishAt: row.publishAt,
    dependencies: dependenciesOf(row),
    ...fileSignatureFields(row.fileSignature),
  };
}

export type ReleaseDependency = Static<typeof ReleaseDependencySchema>;

/** The stored dependencies of a release (JSON text written by the service only). */
export function dependenciesOf(row: Pick<ReleaseRow, 'dependencies'>): ReleaseDependency[] {
  return row.dependencies === '[]' ? [] : (JSON.parse(row.dependencies) as ReleaseDependency[]);
}

export function toAddonSummary(row: Pick<AddonRow, 'id' | 'slug' | 'nameZh' | 'nameEn'>, lang: Lang): AddonSummary {
  return { id: row.id, slug: row.slug, ...localize('name', row.nameZh, row.nameEn, lang) };
}

export function toReleaseListItem(
  row: ReleaseRow,
  addon: Pick<AddonRow, 'id' | 'slug' | 'nameZh' | 'nameEn'>,
  lang: Lang,
  latestId: string | undefined,
): ReleaseListItem {
  return { ...toRelease(row, lang, latestId), addon: toAddonSummary(addon, lang), lang };
}

export function toScreenshot(row: ScreenshotRow): Screenshot {
  return {
    id: row.id,
    addonId: row.addonId,
    imageUrl: row.imageUrl,
    sortOrder: row.sortOrder,
    createdAt: row.createdAt,
  };
}

/**
 * An addon as the API shows it. `releases` are those to show (the list: the latest only; the
 * detail: all, newest first); `latestId` marks the latest among them.
 */
export function toAddon(
  row: AddonRow,
  shown: { releases: readonly ReleaseRow[]; latestId: string | undefined; releaseCount: number },
  screenshots: readonly ScreenshotRow[],
  lang: Lang,
): Addon {
  return {
    id: row.id,
    slug: row.slug,
    ...localize('name', row.nameZh, row.nameEn, lang),
    ...localize('summary', row.summaryZh, row.summaryEn, lang),
    ...localize('description', row.descriptionZh, row.descriptionEn, lang),
    iconUrl: row.iconUrl,
    category: row.category,
    published: row.published === 1,
    totalDownloads: row.totalDownloads,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    releases: shown.releases.map((r) => toRelease(r, lang, shown.latestId)),
    screenshots: screenshots.map(toScreenshot),
    _count: { releases: shown.releaseCount },
    lang,
  };
}
