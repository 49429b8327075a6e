import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin } from '../../../test/helpers/app.js';
import { SignatureError, type TrustedKey, UpdateManager } from '../src/index.js';
import { launcherPackage, publishVersion, type Service, startService } from './helpers.js';

// No overlap: after a rotation only the new key signs, so a launcher must adopt it to go on.
let s: Service;
beforeAll(async () => {
  s = await startService({ SIGNING_OVERLAP_DAYS: '0' });
  const full = await launcherPackage(s.t, 'rot-launcher');
  await publishVersion(s.t, full, 1);
});
afterAll(() => s.close());

function manager(stateDir: string, trustedKeys: TrustedKey[]) {
  return new UpdateManager({ serverUrl: s.proxy.url, trustedKeys, stateDir, app: 'rot' });
}

async function rotate(): Promise<TrustedKey & { endorsement: { keyId: string } | null }> {
  const res = await admin(s.t, 'POST', '/api/admin/signing-keys/rotate');
  expect(res.statusCode).toBe(201);
  return res.json();
}

const keyFetches = () => s.proxy.requests('/api/signing-keys').length;
const adopted = (stateDir: string) =>
  JSON.parse(fs.readFileSync(path.join(stateDir, 'trusted-keys.json'), 'utf8')) as TrustedKey[];

describe('signing key rotation', () => {
  it('a rotated key is adopted through its endorsement by a trusted key (chains too), and remembered', async () => {
    const [first] = await s.keys();
    const pinned = [first!];
    const stateDir = s.stateDir();
    expect(await manager(stateDir, pinned).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
    expect(fs.existsSync(path.join(stateDir, 'trusted-keys.json'))).toBe(false);

    const second = await rotate();
    expect(second.endorsement?.keyId).toBe(first!.keyId);
    const fetches = keyFetches();
    expect(await manager(stateDir, pinned).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
    expect(keyFetches()).toBe(fetches + 1);
    expect(adopted(stateDir).map((k) => k.keyId)).toEqual([second.keyId]);

    // Remembered: a new run with only the first key pinned needs no key list.
    expect(await manager(stateDir, pinned).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
    expect(keyFetches()).toBe(fetches + 1);

    // Two rotations while the launcher was away: third endorsed by second, endorsed by first.
    const otherState = s.stateDir();
    const third = await rotate();
    expect(await manager(otherState, pinned).checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
    expect(
      adopted(otherState)
        .map((k) => k.keyId)
        .sort(),
    ).toEqual([second.keyId, third.keyId].sort());
  });

  it('a key endorsed by no trusted key is refused and not remembered', async () => {
    // The app pins another service's key: nothing this service lists is endorsed by it.
    const other = await startService();
    try {
      const pinnedElsewhere = await other.keys();
      const stateDir = s.stateDir();
      await expect(manager(stateDir, pinnedElsewhere).checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
      expect(fs.existsSync(path.join(stateDir, 'trusted-keys.json'))).toBe(false);
    } finally {
      await other.close();
    }
  });
});
