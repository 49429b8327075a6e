import type { Db } from '../../db/index.js';
import { publishedBy } from '../../db/published.js';
import { CHANNEL } from '../../domain/channel.js';

/** Items per feed: feed readers poll for what is new, not for the archive. */
export const FEED_ITEMS = 50;

/** The newest published releases of published addons, with their addon's names. */
export function newestReleases(db: Db, at: string) {
  return db
    .selectFrom('releases')
    .innerJoin('addons', 'addons.id', 'releases.addonId')
    .select([
      'releases.id',
      'releases.version',
      'releases.changelogZh',
      'releases.changelogEn',
      'releases.createdAt',
      'releases.publishAt',
      'addons.slug',
      'addons.nameZh',
      'addons.nameEn',
    ])
    .where('releases.wowVersion', '=', CHANNEL)
    .where('addons.published', '=', 1)
    .where(publishedBy(at, 'releases.publishAt'))
    .orderBy('releases.createdAt', 'desc')
    .orderBy('releases.id', 'desc')
    .limit(FEED_ITEMS)
    .execute();
}

/**
 * The newest software versions offered to everyone: published, not revoked and at a 100 % rollout
 * (a staged version reaches only some launchers, so it is not news for all).
 */
export function newestVersionsForAll(db: Db, at: string) {
  return db
    .selectFrom('softwareVersions')
    .innerJoin('softwarePackages', 'softwarePackages.id', 'softwareVersions.packageId')
    .select([
      'softwareVersions.id',
      'softwareVersions.version',
      'softwareVersions.changelogZh',
      'softwareVersions.changelogEn',
      'softwareVersions.createdAt',
      'softwareVersions.publishAt',
      'softwarePackages.slug',
      'softwarePackages.nameZh',
      'softwarePackages.nameEn',
    ])
    .where('softwareVersions.revokedAt', 'is', null)
    .where('softwareVersions.rolloutPercent', '>=', 100)
    .where(publishedBy(at, 'softwareVersions.publishAt'))
    .orderBy('softwareVersions.createdAt', 'desc')
    .orderBy('softwareVersions.id', 'desc')
    .limit(FEED_ITEMS)
    .execute();
}
