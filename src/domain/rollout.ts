import { hash } from 'node:crypto';
import { decideUpdate, type UpdateDecision } from './update.js';

/** What the rollout rules need of a software version. */
export interface RolloutVersion {
  readonly id: string;
  readonly versionCode: number;
  readonly rolloutPercent: number;
  readonly forceUpdate: boolean;
  readonly isLatest: boolean;
  /** Published (`publishAt` null or past) and not revoked. */
  readonly offered: boolean;
  readonly revoked: boolean;
}

/** `(first 4 bytes of SHA-256("<versionId>:<deviceId>") as an unsigned big-endian integer) mod 100`. */
export function rolloutBucket(versionId: string, deviceId: string): number {
  // One-shot hash: the check-update hot path computes one per request with a deviceId.
  return hash('sha256', `${versionId}:${deviceId}`, 'buffer').readUInt32BE(0) % 100;
}

/** At 100 every device (and every request) is in; otherwise only devices whose bucket is below the percent. */
export function inRollout(version: Pick<RolloutVersion, 'id' | 'rolloutPercent'>, deviceId: string | null): boolean {
  if (version.rolloutPercent >= 100) return true;
  return deviceId !== null && rolloutBucket(version.id, deviceId) < version.rolloutPercent;
}

/** Published (`publishAt` null or not after `at`, epoch ms). */
export function isPublished(publishAt: string | null, at: number): boolean {
  return publishAt === null || Date.parse(publishAt) <= at;
}

/**
 * The package's latest among offered versions: the flagged one when it is offered (an unpublished or
 * revoked flagged row counts as no flag), else the highest `versionCode`. `versions` are ordered by
 * `versionCode`, highest first (as the repository reads them), here and below.
 */
export function packageLatest<V extends RolloutVersion>(versions: readonly V[]): V | undefined {
  return versions.find((v) => v.offered && v.isLatest) ?? versions.find((v) => v.offered);
}

/**
 * The version a device (or, with `deviceId` null, the website and unidentified clients) is offered:
 * the latest when it is in its rollout, else the highest-`versionCode` offered version below it whose
 * rollout it is in, else the latest. Undefined when nothing is offered.
 */
export function effectiveLatest<V extends RolloutVersion>(
  versions: readonly V[],
  deviceId: string | null,
): V | undefined {
  const latest = packageLatest(versions);
  if (!latest || inRollout(latest, deviceId)) return latest;
  return versions.find((v) => v.offered && v.versionCode < latest.versionCode && inRollout(v, deviceId)) ?? latest;
}

export interface CheckUpdateDecision<V> extends UpdateDecision {
  readonly version: V;
  readonly downgrade: boolean;
}

/**
 * The whole check-update decision: the effective latest, then the contract's `hasUpdate`/`forceUpdate`,
 * except that a client on a revoked version's `versionCode` is sent, forced and with `downgrade: true`,
 * to its effective latest (even a lower one). Undefined when nothing is offered (the package then
 * answers as one without versions).
 */
export function decideCheckUpdate<V extends RolloutVersion>(
  versions: readonly V[],
  clientCode: number,
  deviceId: string | null,
): CheckUpdateDecision<V> | undefined {
  const version = effectiveLatest(versions, deviceId);
  if (!version) return undefined;
  const onRevoked = versions.some((v) => v.revoked && v.versionCode === clientCode);
  if (onRevoked && version.versionCode !== clientCode) {
    return { version, hasUpdate: true, forceUpdate: true, downgrade: true };
  }
  return { version, ...decideUpdate(version, clientCode), downgrade: false };
}
