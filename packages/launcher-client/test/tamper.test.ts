import { generateKeyPairSync } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { admin, upload } from '../../../test/helpers/app.js';
import { setClock } from '../../../src/domain/clock.js';
import { DigestError, SignatureError, StaleAnswerError, type TrustedKey, UpdateManager } from '../src/index.js';
import {
  type Answer,
  downloadsOf,
  launcherPackage,
  publishVersion,
  type Service,
  signLikeTheService,
  startService,
} from './helpers.js';

const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');

let s: Service;
let pinned: TrustedKey[];
beforeAll(async () => {
  s = await startService();
  pinned = await s.keys();
  const full = await launcherPackage(s.t, 'tam-launcher');
  await publishVersion(s.t, full, 1);
  await publishVersion(s.t, full, 2, { forceUpdate: true });
});
afterEach(() => {
  s.proxy.rule = null;
  setClock(null);
});
afterAll(() => s.close());

function manager(options: { stateDir?: string; trustedKeys?: TrustedKey[]; maxAnswerAgeSeconds?: number } = {}) {
  return new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: options.trustedKeys ?? pinned,
    stateDir: options.stateDir ?? s.stateDir(),
    app: 'tam',
    retry: { baseDelayMs: 10 },
    ...(options.maxAnswerAgeSeconds === undefined ? {} : { maxAnswerAgeSeconds: options.maxAnswerAgeSeconds }),
  });
}

const isCheck = (url: string) => url.startsWith('/api/software/check-update');
const downloads = (from: number) => s.proxy.seen.slice(from).filter((r) => r.url.startsWith('/api/software/download'));

/** Changes each check-update answer with `change` (the service's answer otherwise untouched). */
function tamperChecks(change: (answer: Answer) => Answer) {
  s.proxy.rule = async (seen, upstream) => (isCheck(seen.url) ? change(await upstream()) : undefined);
}

function flipByte(body: Buffer): Buffer {
  const changed = Buffer.from(body);
  const at = changed.indexOf('"versionCode":2') + '"versionCode":'.length;
  changed[at] = '9'.charCodeAt(0);
  return changed;
}

describe('every answer is verified before anything is used', () => {
  it('accepts the service as it is', async () => {
    expect(await manager().checkForUpdates(1)).toMatchObject({ result: 'mandatory', update: { versionCode: 2 } });
  });

  it('a byte changed in an answer: DigestError, nothing downloaded', async () => {
    tamperChecks((a) => ({ ...a, body: flipByte(a.body) }));
    const from = s.proxy.seen.length;
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
    expect(downloads(from)).toEqual([]);
  });

  it('a byte changed and the digest made anew: SignatureError (the signature covers the digest)', async () => {
    tamperChecks((a) => {
      const body = flipByte(a.body);
      const { 'content-digest': digest } = signLikeTheService(body, generateKeyPairSync('ed25519').privateKey, 'x');
      return { ...a, body, headers: { ...a.headers, 'content-digest': digest } };
    });
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
  });

  it('the signature removed, or made malformed: SignatureError', async () => {
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, signature: undefined, 'signature-input': undefined } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, signature: 'sig1=:not base64!:' } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    tamperChecks((a) => ({ ...a, headers: { ...a.headers, 'content-digest': undefined } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
  });

  it('an answer compressed by a proxy cannot be checked as received: DigestError', async () => {
    const { gzipSync } = await import('node:zlib');
    tamperChecks((a) => ({ ...a, body: gzipSync(a.body), headers: { ...a.headers, 'content-encoding': 'gzip' } }));
    await expect(manager().checkForUpdates(1)).rejects.toBeInstanceOf(DigestError);
  });

  it('signed by a key the app does not trust: SignatureError after looking for an endorsement', async () => {
    const stranger = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x ?? '';
    const stateDir = s.stateDir();
    const m = manager({
      stateDir,
      trustedKeys: [{ keyId: 'pinned-elsewhere', publicKey: Buffer.from(stranger, 'base64url').toString('base64') }],
    });
    const from = s.proxy.seen.length;
    await expect(m.checkForUpdates(1)).rejects.toThrow(/signed by no trusted key/);
    expect(s.proxy.seen.slice(from).map((r) => r.url)).toContain('/api/signing-keys');
    expect(fs.existsSync(path.join(stateDir, 'trusted-keys.json'))).toBe(false);
  });

  it('an attacker signing with its own key, listed as endorsed by nobody or by a forged endorsement: refused', async () => {
    const attacker = generateKeyPairSync('ed25519');
    const raw = Buffer.from(attacker.publicKey.export({ format: 'jwk' }).x ?? '', 'base64url').toString('base64');
    const forged = Buffer.alloc(64, 7).toString('base64');
    s.proxy.rule = async (seen, upstream) => {
      if (seen.url === '/api/signing-keys') {
        const listed = JSON.parse((await upstream()).body.toString()) as unknown[];
        const fake = (keyId: string, endorsement: unknown) => ({
          keyId,
          algorithm: 'ed25519',
          publicKey: raw,
          createdAt: new Date().toISOString(),
          status: 'active',
          endorsement,
        });
        const keys = [fake('evil1', null), fake('evil2', { keyId: pinned[0]!.keyId, signature: forged }), ...listed];
        return {
          status: 200,
          headers: { 'content-type': 'application/json' },
          body: Buffer.from(JSON.stringify(keys)),
        };
      }
      if (!isCheck(seen.url)) return undefined;
      const answer = await upstream();
      const body = flipByte(answer.body);
      return {
        ...answer,
        body,
        headers: { ...answer.headers, ...signLikeTheService(body, attacker.privateKey, 'evil2') },
      };
    };
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    await expect(manager({ stateDir }).checkForUpdates(1)).rejects.toBeInstanceOf(SignatureError);
    expect(downloads(from)).toEqual([]);
    expect(fs.existsSync(path.join(stateDir, 'trusted-keys.json'))).toBe(false);
  });

  it('a replayed older answer of the same URL is refused, even within the hour', async () => {
    const stateDir = s.stateDir();
    let recorded: Answer | null = null;
    tamperChecks((a) => (recorded ??= a));
    expect(await manager({ stateDir }).checkForUpdates(2)).toMatchObject({ result: 'up-to-date' });
    s.proxy.rule = null;
    // Later, the service answers anew (a change, signed a minute later): accepted and remembered.
    setClock(() => Date.now() + 60_000);
    const full = (await s.t.inject('/api/software/tam-launcher')).json<{ id: string }>();
    expect(full.id).toBeTruthy();
    await publishVersion(s.t, full.id, 3);
    expect(await manager({ stateDir }).checkForUpdates(2)).toMatchObject({
      result: 'up-to-date',
      optional: { versionCode: 3 },
    });
    // The old answer replayed (a freeze attack): refused, by a new UpdateManager on the same state folder too.
    tamperChecks(() => recorded!);
    await expect(manager({ stateDir }).checkForUpdates(2)).rejects.toBeInstanceOf(StaleAnswerError);
    // Another device (another state folder) has no memory of the newer answer: the old one is still fresh.
    expect(await manager().checkForUpdates(2)).toBeTruthy();
  });

  it('an answer signed longer ago than the limit is refused (1 hour by default, configurable)', async () => {
    const full = await launcherPackage(s.t, 'old-launcher');
    await publishVersion(s.t, full, 1);
    setClock(() => Date.now() - 2 * 3600_000);
    const m = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: pinned, stateDir: s.stateDir(), app: 'old' });
    await expect(m.checkForUpdates(1)).rejects.toBeInstanceOf(StaleAnswerError);
    const fresh = await launcherPackage(s.t, 'ten-launcher');
    await publishVersion(s.t, fresh, 1);
    setClock(() => Date.now() - 10 * 60_000);
    const strict = new UpdateManager({
      serverUrl: s.proxy.url,
      trustedKeys: pinned,
      stateDir: s.stateDir(),
      app: 'ten',
      maxAnswerAgeSeconds: 300,
    });
    await expect(strict.checkForUpdates(1)).rejects.toBeInstanceOf(StaleAnswerError);
    const lenient = new UpdateManager({
      serverUrl: s.proxy.url,
      trustedKeys: pinned,
      stateDir: s.stateDir(),
      app: 'ten',
    });
    expect(await lenient.checkForUpdates(1)).toMatchObject({ result: 'up-to-date' });
  });

  it('the CLI exits 2 with {error, kind} and leaves no file in downloads', async () => {
    tamperChecks((a) => ({ ...a, body: flipByte(a.body) }));
    const stateDir = s.stateDir();
    const keys = path.join(stateDir, 'keys.json');
    fs.writeFileSync(keys, JSON.stringify(pinned));
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const args = [
        'update',
        '--server',
        s.proxy.url,
        '--trust',
        keys,
        '--state',
        stateDir,
        '--app',
        'tam',
        '--version-code',
        '1',
      ];
      const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args]);
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(JSON.parse(run.stderr.trim())).toMatchObject({ kind: 'digest', error: expect.any(String) });
    expect(downloadsOf(stateDir)).toEqual([]);
  });
});

describe('addon managers', () => {
  let sha256 = '';
  beforeAll(async () => {
    const addon = await admin(s.t, 'POST', '/api/addons', {
      slug: 'questie',
      name: '任务',
      nameEn: 'Questie',
      summary: 's',
    });
    const file = await upload(s.t, 'questie.zip', 'questie bytes');
    sha256 = file.sha256;
    const release = await admin(s.t, 'POST', '/api/releases', {
      addonId: addon.json<{ id: string }>().id,
      version: '1.0',
      downloadType: 'local',
      filePath: file.filePath,
    });
    expect(release.statusCode).toBe(201);
  });

  it('addon updates and by-hash are verified like every answer', async () => {
    const m = manager();
    const updates = await m.checkAddons([{ slug: 'questie', version: '0.9' }, { sha256 }]);
    expect(updates.results.map((r) => r.updateAvailable)).toEqual([true, false]);
    expect((await m.releaseByHash(sha256))?.release.version).toBe('1.0');
    expect(await m.releaseByHash('0'.repeat(64))).toBeNull();

    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/addons/updates') && !seen.url.startsWith('/api/releases/by-hash'))
        return undefined;
      const answer = await upstream();
      const body = Buffer.from(answer.body.toString().replace('1.0', '6.6'));
      return { ...answer, body };
    };
    await expect(m.checkAddons([{ slug: 'questie', version: '0.9' }])).rejects.toBeInstanceOf(DigestError);
    await expect(m.releaseByHash(sha256)).rejects.toBeInstanceOf(DigestError);
  });
});
