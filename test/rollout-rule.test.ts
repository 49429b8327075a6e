import { describe, expect, it } from 'vitest';
import {
  decideCheckUpdate,
  effectiveLatest,
  inRollout,
  packageLatest,
  type RolloutVersion,
  rolloutBucket,
} from '../src/domain/rollout.js';
import { bucketOf } from './helpers/bucket.js';

function v(id: string, versionCode: number, extra: Partial<RolloutVersion> = {}): RolloutVersion {
  return {
    id,
    versionCode,
    rolloutPercent: 100,
    forceUpdate: false,
    isLatest: false,
    offered: true,
    revoked: false,
    ...extra,
  };
}

describe('rollout bucket', () => {
  it('is the first 4 bytes of SHA-256("<versionId>:<deviceId>"), big-endian, mod 100', () => {
    for (let i = 0; i < 2000; i++) {
      const versionId = `version-${i % 7}`;
      const deviceId = `device-${i}`;
      expect(rolloutBucket(versionId, deviceId)).toBe(bucketOf(versionId, deviceId));
    }
    // Any printable deviceId: hashed as its UTF-8 bytes (a lone surrogate as U+FFFD, as Node encodes it).
    for (const deviceId of ['启动器-设备-7', 'café-😀', 'x'.repeat(128), 'lone-\ud800-surrogate']) {
      expect(rolloutBucket('version-1', deviceId)).toBe(bucketOf('version-1', deviceId));
    }
  });

  it.each([
    [{ rolloutPercent: 100 }, null, true],
    [{ rolloutPercent: 99 }, null, false],
    [{ rolloutPercent: 0 }, 'd', false],
  ])('%j for device %s → %s', (extra, deviceId, expected) => {
    expect(inRollout({ id: 'x', rolloutPercent: extra.rolloutPercent }, deviceId)).toBe(expected);
  });

  it('a device is in when its bucket is below the percent', () => {
    const bucket = rolloutBucket('ver', 'dev');
    expect(inRollout({ id: 'ver', rolloutPercent: bucket + 1 }, 'dev')).toBe(true);
    expect(inRollout({ id: 'ver', rolloutPercent: bucket }, 'dev')).toBe(false);
  });
});

describe('effective latest', () => {
  // A device in no partial rollout: bucket of 'new' above 50 and of 'mid' above 50.
  const outside = Array.from({ length: 500 }, (_, i) => `d${i}`).find(
    (d) => rolloutBucket('new', d) >= 50 && rolloutBucket('mid', d) >= 50,
  )!;
  const inside = Array.from({ length: 500 }, (_, i) => `d${i}`).find((d) => rolloutBucket('new', d) < 50)!;

  it.each<[string, RolloutVersion[], string | null, string | undefined]>([
    ['latest at 100 for everyone', [v('new', 3, { isLatest: true }), v('old', 1)], null, 'new'],
    [
      'device inside the latest rollout',
      [v('new', 3, { isLatest: true, rolloutPercent: 50 }), v('old', 1)],
      'IN',
      'new',
    ],
    [
      'device outside falls back to the highest below at 100',
      [v('new', 3, { isLatest: true, rolloutPercent: 50 }), v('mid', 2, { rolloutPercent: 50 }), v('old', 1)],
      'OUT',
      'old',
    ],
    ['no deviceId: newest at 100', [v('new', 3, { isLatest: true, rolloutPercent: 50 }), v('old', 1)], null, 'old'],
    ['nothing below in: answered as in the latest', [v('new', 3, { isLatest: true, rolloutPercent: 0 })], null, 'new'],
    ['halted latest (0): previous', [v('new', 3, { isLatest: true, rolloutPercent: 0 }), v('old', 1)], 'IN', 'old'],
    [
      'revoked are never offered',
      [v('new', 3, { isLatest: true, offered: false, revoked: true }), v('old', 1)],
      null,
      'old',
    ],
    [
      'unpublished flagged counts as no flag',
      [v('new', 3, { isLatest: true, offered: false }), v('mid', 2), v('old', 1, { isLatest: false })],
      null,
      'mid',
    ],
    ['flag wins over a higher code', [v('new', 3), v('flag', 2, { isLatest: true })], null, 'flag'],
    ['nothing offered', [v('new', 3, { offered: false, revoked: true })], null, undefined],
  ])('%s', (_name, versions, device, expected) => {
    const deviceId = device === 'IN' ? inside : device === 'OUT' ? outside : device;
    expect(effectiveLatest(versions, deviceId)?.id).toBe(expected);
  });

  it('the latest follows the flag among offered versions', () => {
    expect(packageLatest([v('b', 5), v('a', 1)])?.id).toBe('b');
    expect(packageLatest([v('b', 5, { offered: false }), v('a', 1)])?.id).toBe('a');
  });
});

describe('check-update decision', () => {
  const versions = [
    v('bad', 5, { isLatest: true, offered: false, revoked: true }),
    v('good', 4, { forceUpdate: false }),
  ];

  it.each<[number, { hasUpdate: boolean; forceUpdate: boolean; downgrade: boolean; id: string }]>([
    [5, { hasUpdate: true, forceUpdate: true, downgrade: true, id: 'good' }],
    [4, { hasUpdate: false, forceUpdate: false, downgrade: false, id: 'good' }],
    [3, { hasUpdate: true, forceUpdate: false, downgrade: false, id: 'good' }],
  ])('client on %i', (code, expected) => {
    const decided = decideCheckUpdate(versions, code, null);
    expect({ ...decided, id: decided?.version.id, version: undefined }).toEqual({ ...expected, version: undefined });
  });

  it('forced follows the offered version as the contract says', () => {
    expect(decideCheckUpdate([v('f', 2, { forceUpdate: true })], 1, null)).toMatchObject({
      hasUpdate: true,
      forceUpdate: true,
    });
    expect(decideCheckUpdate([v('f', 2, { forceUpdate: true })], 2, null)).toMatchObject({
      hasUpdate: false,
      forceUpdate: false,
    });
  });

  it('answers nothing when no version is offered', () => {
    expect(decideCheckUpdate([v('bad', 5, { offered: false, revoked: true })], 5, 'd')).toBeUndefined();
  });
});
