import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, parseSecretKey, signPrehash, type MinisignSecretKey } from '../../publish/src/minisign.js';
import { minisign, minisignKeyPair, minisignWanted } from '../../../test/helpers/minisign.js';
import { prehash, versionTrustedComment } from '../src/trust/minisign.js';
import { PublisherSignatureError, UpdateManager } from '../src/index.js';
import { admin, downloadsOf, launcherPackage, publishVersion, type Service, startService } from './helpers.js';

/**
 * Pinned publisher keys: a service that was taken over (here: an administrator publishing what the
 * publisher never signed, with PUBLISHER_KEYS unset) signs its answers as ever, and the launcher
 * still refuses every file the publisher's key did not sign for exactly this package and version.
 */

const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');

let s: Service;
let publisher: MinisignSecretKey;
let publisherPub: string;
let intruder: MinisignSecretKey;
let keysDir: string;

beforeAll(async () => {
  s = await startService();
  keysDir = s.stateDir();
  const pair = await generateKeyPair('');
  publisher = await parseSecretKey(pair.secretKeyFile, '');
  publisherPub = path.join(keysDir, 'publisher.pub');
  fs.writeFileSync(publisherPub, pair.publicKeyFile);
  intruder = await parseSecretKey((await generateKeyPair('')).secretKeyFile, '');
});
afterAll(() => s.close());

const sign = async (key: MinisignSecretKey, content: Buffer, slug: string, versionCode: number, sha256: string) =>
  signPrehash(key, await prehash([content]), versionTrustedComment({ slug, versionCode, sha256 }));

async function manager(app: string, stateDir: string, publisherKeys?: string[]) {
  return new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: await s.keys(),
    stateDir,
    app,
    ...(publisherKeys ? { publisherKeys } : {}),
  });
}

/** Publishes versionCode `code` of `slug`, then signs it with `signer` (or leaves it unsigned). */
async function release(
  packageId: string,
  slug: string,
  code: number,
  signer: ((content: Buffer, sha256: string) => Promise<string>) | null,
) {
  // Forced: the flow then downloads the full package (a patch package is downloaded when newer anyway).
  const version = await publishVersion(s.t, packageId, code, { forceUpdate: true });
  if (signer) {
    const fileSignature = await signer(version.content, version.sha256);
    const res = await admin(s.t, 'PUT', `/api/software/versions/${version.id}`, { fileSignature });
    expect(res.statusCode, res.body).toBe(200);
  }
  return version;
}

/** The outcome of checking and downloading as a launcher on versionCode 0 would. */
async function outcome(m: UpdateManager) {
  const check = await m.checkForUpdates(0);
  if (!check.update) throw new Error('no update offered');
  return m.downloadUpdate(check.update).then(
    (d) => ({ ok: true as const, file: d.file }),
    (err: unknown) => ({ ok: false as const, err }),
  );
}

describe('pinned publisher keys', () => {
  it.runIf(minisignWanted())(
    'keep a file signed for this package, versionCode and sha256, by ours or by minisign',
    async () => {
      const full = await launcherPackage(s.t, 'pinned-launcher');
      await release(full, 'pinned-launcher', 1, (c, h) => sign(publisher, c, 'pinned-launcher', 1, h));
      const state = s.stateDir();
      const m = await manager('pinned', state, [fs.readFileSync(publisherPub, 'utf8')]);
      const got = await outcome(m);
      expect(got.ok).toBe(true);

      // A key and signature made by minisign, pinned as the bare base64 line.
      const theirs = minisignKeyPair(keysDir, 'minisign-publisher');
      const v2 = await release(full, 'pinned-launcher', 2, async (content, sha256) => {
        const file = path.join(keysDir, 'v2.bin');
        fs.writeFileSync(file, content);
        const comment = versionTrustedComment({ slug: 'pinned-launcher', versionCode: 2, sha256 });
        minisign(['-S', '-s', theirs.key, '-m', file, '-t', comment], { cwd: keysDir });
        return fs.readFileSync(`${file}.minisig`, 'utf8');
      });
      const line = fs.readFileSync(theirs.pub, 'utf8').split('\n')[1] ?? '';
      const got2 = await outcome(await manager('pinned', s.stateDir(), [line]));
      expect(got2.ok && fs.readFileSync(got2.file)).toEqual(v2.content);
    },
  );

  it('refuse unsigned files, other keys, copied signatures and other packages, deleting the file', async () => {
    const pinned = [fs.readFileSync(publisherPub, 'utf8')];
    const cases: [string, (slug: string, packageId: string) => Promise<unknown>, RegExp][] = [
      ['unsigned', (slug, id) => release(id, slug, 1, null), /carries no publisher signature/],
      ['other-key', (slug, id) => release(id, slug, 1, (c, h) => sign(intruder, c, slug, 1, h)), /not a trusted key/],
      [
        'copied',
        async (slug, id) => {
          const v1 = await release(id, slug, 1, (c, h) => sign(publisher, c, slug, 1, h));
          const copied = await sign(publisher, v1.content, slug, 1, v1.sha256);
          await release(id, slug, 2, async () => copied);
        },
        /does not match the file/,
      ],
      [
        'other-package',
        (slug, id) => release(id, slug, 1, (c, h) => sign(publisher, c, 'another-launcher', 1, h)),
        /trusted comment is "package=another-launcher versionCode=1 /,
      ],
      [
        'other-version',
        (slug, id) => release(id, slug, 1, (c, h) => sign(publisher, c, slug, 7, h)),
        /expected "package=.* versionCode=1 sha256=/,
      ],
    ];
    for (const [name, publish, reason] of cases) {
      const slug = `refused-${name}-launcher`;
      await publish(slug, await launcherPackage(s.t, slug));
      const state = s.stateDir();
      const got = await outcome(await manager(`refused-${name}`, state, pinned));
      expect(got.ok, name).toBe(false);
      expect(!got.ok && got.err, name).toBeInstanceOf(PublisherSignatureError);
      expect(!got.ok && (got.err as PublisherSignatureError).message, name).toMatch(reason);
      expect(!got.ok && (got.err as PublisherSignatureError).kind).toBe('publisher-signature');
      expect(downloadsOf(state), name).toEqual([]);
      // Without pinned keys, the same download goes through as before.
      expect((await outcome(await manager(`refused-${name}`, s.stateDir()))).ok, name).toBe(true);
    }
  });

  it('check the patch too, and a file kept from before the keys were pinned', async () => {
    const full = await launcherPackage(s.t, 'kept-launcher');
    const patch = await launcherPackage(s.t, 'kept-launcher-patch');
    await publishVersion(s.t, full, 1);
    await release(patch, 'kept-launcher-patch', 2, null);
    const state = s.stateDir();
    const m = await manager('kept', state);
    const check = await m.checkForUpdates(1);
    expect(check.result).toBe('patch');
    await m.downloadUpdate(check.update!);
    expect(downloadsOf(state).length).toBeGreaterThan(0);
    const pinned = await manager('kept', state, [fs.readFileSync(publisherPub, 'utf8')]);
    await expect(pinned.downloadUpdate((await pinned.checkForUpdates(1)).update!)).rejects.toBeInstanceOf(
      PublisherSignatureError,
    );
    expect(downloadsOf(state).filter((f) => f.includes('kept-launcher-patch-1.2'))).toEqual([]);
  });

  it('the CLI takes --publisher-key (repeatable) and exits 2 with kind publisher-signature', async () => {
    const full = await launcherPackage(s.t, 'cli-pinned-launcher');
    await release(full, 'cli-pinned-launcher', 1, (c, h) => sign(intruder, c, 'cli-pinned-launcher', 1, h));
    const keysFile = path.join(keysDir, 'trust.json');
    fs.writeFileSync(keysFile, JSON.stringify(await s.keys()));
    const intruderPub = path.join(keysDir, 'unrelated.pub');
    fs.writeFileSync(intruderPub, (await generateKeyPair('')).publicKeyFile);
    const state = s.stateDir();
    const args = ['update', '--server', s.proxy.url, '--trust', keysFile, '--state', state, '--app', 'cli-pinned'];
    const run = (more: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args, '--version-code', '0', ...more], {
          cwd: ROOT,
        });
        let stderr = '';
        child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        child.on('close', (code) => resolve({ code, stderr }));
      });
    const refused = await run(['--publisher-key', publisherPub, '--publisher-key', intruderPub]);
    expect(refused.code).toBe(2);
    expect(JSON.parse(refused.stderr.trim().split('\n').at(-1) ?? '')).toMatchObject({ kind: 'publisher-signature' });
    expect(downloadsOf(state)).toEqual([]);
    // The intruder's key pinned (beside ours): its signature is then accepted.
    const intruderKey = path.join(keysDir, 'intruder.pub');
    fs.writeFileSync(
      intruderKey,
      `untrusted comment: minisign public key ${intruder.keyId}\n${intruder.publicKey.base64}\n`,
    );
    const accepted = await run(['--publisher-key', publisherPub, '--publisher-key', intruderKey]);
    expect(accepted.code, accepted.stderr).toBe(0);
    const missing = await run(['--publisher-key', path.join(keysDir, 'absent.pub')]);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr.trim().split('\n').at(-1) ?? '')).toMatchObject({ kind: 'usage' });
  });
});
