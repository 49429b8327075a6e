import type { Db } from '../../db/index.js';
import type { VersionRow } from '../../db/schema.js';
import type { EventSubject } from '../webhooks/events.js';

/** A version as webhook events name it: its package's name and its version. */
export async function versionSubject(
  trx: Db,
  version: Pick<VersionRow, 'id' | 'packageId' | 'version' | 'changelogEn' | 'changelogZh'>,
): Promise<EventSubject> {
  const pkg = await trx
    .selectFrom('softwarePackages')
    .select(['nameZh', 'nameEn', 'slug'])
    .where('id', '=', version.packageId)
    .executeTakeFirst();
  return {
    id: version.id,
    title: `${pkg?.nameEn || pkg?.nameZh || ''} ${version.version}`.trim(),
    text: version.changelogEn || version.changelogZh,
  };
}

/** What webhook events tell of a version. */
export function versionData(version: VersionRow): Record<string, unknown> {
  return {
    id: version.id,
    packageId: version.packageId,
    version: version.version,
    versionCode: version.versionCode,
    rolloutPercent: version.rolloutPercent,
    forceUpdate: version.forceUpdate === 1,
    publishAt: version.publishAt,
  };
}
