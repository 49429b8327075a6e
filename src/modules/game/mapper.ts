import type { Static } from 'typebox';
import type { GameBuildRow } from '../../db/schema.js';
import { type Lang, localize } from '../../domain/lang.js';
import { decideCheckUpdate, isPublished, type RolloutVersion } from '../../domain/rollout.js';
import type { BuildSchema, PublicBuildSchema } from './schemas.js';

export type Build = Static<typeof BuildSchema>;
export type PublicBuild = Static<typeof PublicBuildSchema>;
/** A build's row without its manifest text (which only the manifest route reads). */
export type BuildSummary = Omit<GameBuildRow, 'manifest'>;

export const manifestPath = (buildCode: number) => `/api/game/builds/${buildCode}/manifest`;

/** When a build became published: its `publishAt`, else its creation. */
export const publishedAt = (row: BuildSummary): string => row.publishAt ?? row.createdAt;

export function toBuild(row: BuildSummary, lang: Lang): Build {
  return {
    version: row.version,
    buildCode: row.buildCode,
    ...localize('changelog', row.changelogZh, row.changelogEn, lang),
    forceUpdate: row.forceUpdate === 1,
    publishAt: row.publishAt,
    revokedAt: row.revokedAt,
    publishedAt: publishedAt(row),
    manifestSha256: row.manifestSha256,
    manifestSize: row.manifestSize,
    manifestSignature: row.manifestSignature,
    totalSize: row.totalSize,
    fileCount: row.fileCount,
    chunkCount: row.chunkCount,
    newBytes: row.newBytes,
    downloadCount: row.downloadCount,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    broken: row.broken,
  };
}

export function toPublicBuild(row: BuildSummary, lang: Lang): PublicBuild {
  return {
    version: row.version,
    buildCode: row.buildCode,
    ...localize('changelog', row.changelogZh, row.changelogEn, lang),
    totalSize: row.totalSize,
    fileCount: row.fileCount,
    publishedAt: publishedAt(row),
    revokedAt: row.revokedAt,
  };
}

/**
 * The check-update decision for builds (`builds` ordered by `buildCode`, highest first): the software
 * rules (release-safety.md) with every build at 100 % and no latest flag, except that `forceUpdate`
 * holds when any published build above the launcher's has `forceUpdate`. Null when no build is offered.
 *
 * A broken build (stored before the player-safety rules, which it breaks) is never offered, and its
 * `forceUpdate` forces nothing: the highest valid build is `latest`, and `hasUpdate`, `forceUpdate`
 * and `downgrade` follow from it as if the broken build were not there. A launcher installed on a
 * broken build is treated like any other build code: it is offered a valid build above it, and is
 * not sent down (it is not revoked; revoking it sends its launchers back, as for any build).
 */
export function decideGameUpdate(
  builds: readonly BuildSummary[],
  clientCode: number,
  at: number,
): { build: BuildSummary; hasUpdate: boolean; forceUpdate: boolean; downgrade: boolean } | null {
  const versions = builds.map((row): RolloutVersion & { row: BuildSummary } => ({
    row,
    id: String(row.buildCode),
    versionCode: row.buildCode,
    rolloutPercent: 100,
    forceUpdate: row.forceUpdate === 1,
    isLatest: false,
    offered: row.revokedAt === null && row.broken === null && isPublished(row.publishAt, at),
    revoked: row.revokedAt !== null,
  }));
  const decided = decideCheckUpdate(versions, clientCode, null);
  if (!decided) return null;
  const forced = versions.some(
    (v) => v.versionCode > clientCode && v.forceUpdate && v.row.broken === null && isPublished(v.row.publishAt, at),
  );
  return {
    build: decided.version.row,
    hasUpdate: decided.hasUpdate,
    forceUpdate: decided.downgrade || (decided.hasUpdate && forced),
    downgrade: decided.downgrade,
  };
}
