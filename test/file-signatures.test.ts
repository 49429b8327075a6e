import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePublicKey, releaseTrustedComment, versionTrustedComment } from 'patchwell-client/minisign';
import { generateKeyPair, parseSecretKey, signFile, type MinisignSecretKey } from 'patchwell-publish/minisign';
import { loadConfig } from '../src/config.js';
import { admin, buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';
import { minisign, minisignKeyPair, minisignWanted } from './helpers/minisign.js';

// Files signed by the publisher (minisign): `fileSignature` stored, validated and returned on
// versions and releases; with PUBLISHER_KEYS set, a stored file must carry a signature by one of
// those keys over that file, naming exactly what it is published as.

let keysDir: string;
let publisher: MinisignSecretKey;
let intruder: MinisignSecretKey;
let minisignMade: { pub: string; key: string };
let keysFile: string;
let seq = 0;
const uniq = (prefix: string) => `${prefix}-${++seq}`;

/** A file in the store, with the path of its bytes on disk for signing. */
interface Stored {
  filePath: string;
  sha256: string;
  local: string;
}

async function store(t: TestApp, content: string): Promise<Stored> {
  const local = path.join(keysDir, uniq('file'));
  fs.writeFileSync(local, content);
  const uploaded = await upload(t, 'launcher.zip', content);
  return { filePath: uploaded.filePath, sha256: uploaded.sha256, local };
}

const signVersion = (key: MinisignSecretKey, file: Stored, slug: string, versionCode: number) =>
  signFile(key, file.local, versionTrustedComment({ slug, versionCode, sha256: file.sha256 }));

const signRelease = (key: MinisignSecretKey, file: Stored, slug: string, version: string) =>
  signFile(key, file.local, releaseTrustedComment({ slug, version, sha256: file.sha256 }));

// The keys file holds a key made by Debian's minisign: these run where it is installed (CI requires it).
const withMinisign = minisignWanted();

beforeAll(async () => {
  keysDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-publisher-keys-'));
  publisher = await parseSecretKey((await generateKeyPair('')).secretKeyFile, '');
  intruder = await parseSecretKey((await generateKeyPair('')).secretKeyFile, '');
  if (!withMinisign) return;
  minisignMade = minisignKeyPair(keysDir, 'release-team');
  const ours = (await generateKeyPair('')).publicKeyFile.replace(/.*\n/, '');
  keysFile = path.join(keysDir, 'publishers');
  fs.writeFileSync(
    keysFile,
    `# the publishers\nuntrusted comment: minisign public key ${publisher.keyId}\n${publisher.publicKey.base64}\n\n` +
      fs.readFileSync(minisignMade.pub, 'utf8') +
      ours,
  );
});
afterAll(() => fs.rmSync(keysDir, { recursive: true, force: true }));

describe.runIf(withMinisign)('PUBLISHER_KEYS in the configuration', () => {
  it('reads minisign key files with comment lines, and refuses files that hold no keys', () => {
    expect(loadConfig({ PUBLISHER_KEYS: keysFile }).publisherKeys?.map((k) => k.keyId)).toEqual([
      publisher.keyId,
      parsePublicKey(fs.readFileSync(minisignMade.pub, 'utf8')).keyId,
      expect.stringMatching(/^[1-9A-F][0-9A-F]{0,15}$/),
    ]);
    expect(loadConfig({}).publisherKeys).toBeNull();
    expect(() => loadConfig({ PUBLISHER_KEYS: path.join(keysDir, 'absent') })).toThrow(/PUBLISHER_KEYS: cannot read/);
    fs.writeFileSync(path.join(keysDir, 'garbage'), 'RWQnot-a-key\n');
    expect(() => loadConfig({ PUBLISHER_KEYS: path.join(keysDir, 'garbage') })).toThrow(/PUBLISHER_KEYS/);
    fs.writeFileSync(path.join(keysDir, 'empty'), '# nothing yet\n');
    expect(() => loadConfig({ PUBLISHER_KEYS: path.join(keysDir, 'empty') })).toThrow(/no key/);
  });
});

describe('fileSignature without PUBLISHER_KEYS', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(() => t.close());

  it('is stored and returned on versions and in check-update, absent when there is none', async () => {
    const pkg = await createPackage(t, { slug: uniq('signed'), name: '启动器' });
    const file = await store(t, 'launcher bytes 1');
    const signature = await signVersion(publisher, file, pkg.slug, 1);
    const created = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
      version: '1.0',
      versionCode: 1,
      filePath: file.filePath,
      fileSignature: signature,
    });
    expect(created.statusCode).toBe(201);
    expect(created.json()).toMatchObject({ fileSignature: signature, fileSignatureKeyId: publisher.keyId });

    const detail = (await t.inject(`/api/software/${pkg.slug}`)).json<{ versions: Record<string, unknown>[] }>();
    expect(detail.versions[0]).toMatchObject({ fileSignature: signature, fileSignatureKeyId: publisher.keyId });
    const check = (await t.inject(`/api/software/check-update?slug=${pkg.slug}&versionCode=0`)).json();
    expect(check.latest.fileSignature).toBe(signature);

    // Unsigned: the answers are exactly as before, without the fields.
    const plain = await createPackage(t, { slug: uniq('plain'), name: '启动器' });
    const unsigned = await createVersion(t, plain.id, { version: '1.0', versionCode: 1, filePath: file.filePath });
    expect(unsigned).not.toHaveProperty('fileSignature');
    expect(unsigned).not.toHaveProperty('fileSignatureKeyId');
    const plainCheck = (await t.inject(`/api/software/check-update?slug=${plain.slug}&versionCode=0`)).json();
    expect(plainCheck.latest).not.toHaveProperty('fileSignature');

    // Any signature is stored as it is (nothing is checked without PUBLISHER_KEYS); null removes it.
    const other = await admin(t, 'PUT', `/api/software/versions/${unsigned.id}`, { fileSignature: signature });
    expect(other.json()).toMatchObject({ fileSignature: signature });
    const removed = await admin(t, 'PUT', `/api/software/versions/${unsigned.id}`, { fileSignature: null });
    expect(removed.statusCode).toBe(200);
    expect(removed.json()).not.toHaveProperty('fileSignature');
  });

  it("is returned by the website's latest?info=1 of the launcher package, absent when there is none", async () => {
    const launcher = await createPackage(t, { slug: `${t.app.ctx.config.appName}-launcher`, name: '启动器' });
    const file = await store(t, 'launcher bytes for the website');
    const unsigned = await createVersion(t, launcher.id, { version: '1.0', versionCode: 1, filePath: file.filePath });
    const plain = (await t.inject('/api/software/latest?info=1')).json();
    expect(plain).toMatchObject({ available: true, versionCode: 1 });
    expect(plain).not.toHaveProperty('fileSignature');
    const signature = await signVersion(publisher, file, launcher.slug, 1);
    await admin(t, 'PUT', `/api/software/versions/${unsigned.id}`, { fileSignature: signature });
    expect((await t.inject('/api/software/latest?info=1')).json()).toMatchObject({
      versionCode: 1,
      fileSignature: signature,
      fileSignatureKeyId: publisher.keyId,
    });
  });

  it('answers 400 naming the field for text that is not a minisign signature', async () => {
    const pkg = await createPackage(t, { slug: uniq('bad'), name: '启动器' });
    const file = await store(t, 'launcher bytes 2');
    const good = await signVersion(publisher, file, pkg.slug, 1);
    const version = await createVersion(t, pkg.id, { version: '1', versionCode: 1, filePath: file.filePath });
    for (const fileSignature of [
      'hello',
      good.replace('trusted comment: ', 'comment: '),
      good.split('\n').slice(0, 3).join('\n'),
    ]) {
      const create = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
        version: '2',
        versionCode: 2,
        filePath: file.filePath,
        fileSignature,
      });
      expect(create.statusCode).toBe(400);
      expect(create.json().error).toMatch(/^body\.fileSignature: /);
      const update = await admin(t, 'PUT', `/api/software/versions/${version.id}`, { fileSignature });
      expect(update.statusCode).toBe(400);
      expect(update.json().error).toMatch(/^body\.fileSignature: /);
    }
    const addon = await admin(t, 'POST', '/api/addons', { slug: uniq('addon'), name: '插件', summary: '简介' });
    const release = await admin(t, 'POST', '/api/releases', {
      addonId: addon.json().id,
      version: '1.0',
      filePath: file.filePath,
      fileSignature: 'hello',
    });
    expect(release.statusCode).toBe(400);
    expect(release.json().error).toMatch(/^body\.fileSignature: /);
  });

  it('is stored and returned on releases: admin, public lists and addon updates', async () => {
    const slug = uniq('maps');
    const addon = (await admin(t, 'POST', '/api/addons', { slug, name: '地图', summary: '简介' })).json<{
      id: string;
    }>();
    const file = await store(t, 'addon bytes 1');
    const signature = await signRelease(publisher, file, slug, '1.0');
    const created = await admin(t, 'POST', '/api/releases', {
      addonId: addon.id,
      version: '1.0',
      filePath: file.filePath,
      fileSignature: signature,
    });
    expect(created.statusCode).toBe(201);
    expect(created.json()).toMatchObject({ fileSignature: signature, fileSignatureKeyId: publisher.keyId });
    const listed = (await t.inject(`/api/releases?addonId=${addon.id}`)).json<{ items?: unknown[] } | unknown[]>();
    expect(JSON.stringify(listed)).toContain(JSON.stringify(signature));
    const updates = await t.inject({
      method: 'POST',
      url: '/api/addons/updates',
      payload: { installed: [{ slug, version: '0.9' }] },
    });
    expect(updates.json().results[0].latest.fileSignature).toBe(signature);
  });
});

describe.runIf(withMinisign)('fileSignature with PUBLISHER_KEYS', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp({ PUBLISHER_KEYS: keysFile });
  });
  afterAll(() => t.close());

  async function refused(method: 'POST' | 'PUT', url: string, body: object, reason: RegExp) {
    const res = await admin(t, method, url, body);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error).toMatch(/^body\.fileSignature: /);
    expect(res.json().error).toMatch(reason);
  }

  /**
   * A refusal of `file` (named by nothing yet): the refused upload is deleted at once (issue 38), and
   * the same bytes are uploaded again for the next try.
   */
  async function refusedAndGone(method: 'POST', url: string, body: object, reason: RegExp, file: Stored) {
    await refused(method, url, body, reason);
    expect((await t.inject({ method: 'GET', url: file.filePath })).statusCode).toBe(404);
    return store(t, fs.readFileSync(file.local, 'utf8'));
  }

  it('takes a version signed by a publisher key, ours or minisign-made, and refuses every other', async () => {
    const pkg = await createPackage(t, { slug: uniq('guarded'), name: '启动器' });
    let file = await store(t, 'guarded launcher 1');
    const url = `/api/software/${pkg.id}/versions`;
    const v = (versionCode: number, fileSignature?: string) => ({
      version: String(versionCode),
      versionCode,
      filePath: file.filePath,
      ...(fileSignature !== undefined ? { fileSignature } : {}),
    });

    file = await refusedAndGone('POST', url, v(1), /is required/, file);
    file = await refusedAndGone(
      'POST',
      url,
      v(1, await signVersion(intruder, file, pkg.slug, 1)),
      /not a trusted key/,
      file,
    );
    const forOtherPackage = await signVersion(publisher, file, 'another-package', 1);
    file = await refusedAndGone(
      'POST',
      url,
      v(1, forOtherPackage),
      /trusted comment is "package=another-package/,
      file,
    );
    const otherFile = await store(t, 'another file');
    // Signed over another file (with this file's hash in its comment): the bytes do not match.
    const overOther = await signFile(
      publisher,
      otherFile.local,
      versionTrustedComment({ slug: pkg.slug, versionCode: 1, sha256: file.sha256 }),
    );
    file = await refusedAndGone('POST', url, v(1, overOther), /does not match the file/, file);

    const signed = await signVersion(publisher, file, pkg.slug, 1);
    const first = await admin(t, 'POST', url, v(1, signed));
    expect(first.statusCode, first.body).toBe(201);
    expect(first.json().fileSignatureKeyId).toBe(publisher.keyId);
    // The signature of version 1, copied to version 2 of the same file.
    await refused('POST', url, v(2, signed), /expected "package=.* versionCode=2 /);

    // A key made by minisign, its signature made by minisign.
    const sigPath = path.join(keysDir, uniq('sig'));
    minisign(
      [
        '-S',
        '-s',
        minisignMade.key,
        '-m',
        file.local,
        '-x',
        sigPath,
        '-t',
        versionTrustedComment({ slug: pkg.slug, versionCode: 3, sha256: file.sha256 }),
      ],
      { cwd: keysDir },
    );
    const third = await admin(t, 'POST', url, v(3, fs.readFileSync(sigPath, 'utf8')));
    expect(third.statusCode, third.body).toBe(201);
    expect(third.json().fileSignatureKeyId).toBe(parsePublicKey(fs.readFileSync(minisignMade.pub, 'utf8')).keyId);

    // A link has no stored file to sign.
    const linked = await admin(t, 'POST', url, {
      version: '4',
      versionCode: 4,
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/launcher.zip',
    });
    expect(linked.statusCode, linked.body).toBe(201);
  });

  it('checks updates that change the file, its signature or its versionCode; other edits pass', async () => {
    const pkg = await createPackage(t, { slug: uniq('guarded-upd'), name: '启动器' });
    const file = await store(t, 'guarded launcher 2');
    const v1 = await signVersion(publisher, file, pkg.slug, 1);
    const created = await admin(t, 'POST', `/api/software/${pkg.id}/versions`, {
      version: '1',
      versionCode: 1,
      filePath: file.filePath,
      fileSignature: v1,
    });
    const url = `/api/software/versions/${created.json().id}`;
    await refused('PUT', url, { fileSignature: null }, /is required/);
    await refused('PUT', url, { versionCode: 5 }, /expected "package=.* versionCode=5 /);
    await refused('PUT', url, { fileSignature: await signVersion(intruder, file, pkg.slug, 1) }, /not a trusted key/);
    await refused(
      'PUT',
      url,
      { fileSignature: await signVersion(publisher, file, 'another-package', 1) },
      /another-package/,
    );
    const otherFile = await store(t, 'guarded launcher 2, rebuilt');
    await refused('PUT', url, { filePath: otherFile.filePath }, /does not match the file|expected/);

    const moved = await admin(t, 'PUT', url, {
      versionCode: 5,
      fileSignature: await signVersion(publisher, file, pkg.slug, 5),
    });
    expect(moved.statusCode, moved.body).toBe(200);
    const ramp = await admin(t, 'PUT', url, { rolloutPercent: 50, changelog: '修复' });
    expect(ramp.statusCode, ramp.body).toBe(200);
    const check = (await t.inject(`/api/software/check-update?slug=${pkg.slug}&versionCode=0`)).json();
    expect(check.latest.fileSignature).toContain('versionCode=5');
  });

  it('guards addon releases the same way, with the addon trusted comment', async () => {
    const slug = uniq('guarded-addon');
    const addon = (await admin(t, 'POST', '/api/addons', { slug, name: '地图', summary: '简介' })).json<{
      id: string;
    }>();
    let file = await store(t, 'guarded addon 1');
    const r = (version: string, fileSignature?: string) => ({
      addonId: addon.id,
      version,
      filePath: file.filePath,
      ...(fileSignature !== undefined ? { fileSignature } : {}),
    });
    file = await refusedAndGone('POST', '/api/releases', r('1.0'), /is required/, file);
    file = await refusedAndGone(
      'POST',
      '/api/releases',
      r('1.0', await signRelease(intruder, file, slug, '1.0')),
      /not a trusted key/,
      file,
    );
    file = await refusedAndGone(
      'POST',
      '/api/releases',
      r('1.0', await signRelease(publisher, file, 'other-addon', '1.0')),
      /addon=other-addon/,
      file,
    );
    // A launcher version's signature of the same file is no release signature.
    file = await refusedAndGone(
      'POST',
      '/api/releases',
      r('1.0', await signVersion(publisher, file, slug, 1)),
      /expected "addon=/,
      file,
    );
    const signed = await signRelease(publisher, file, slug, '1.0');
    const created = await admin(t, 'POST', '/api/releases', r('1.0', signed));
    expect(created.statusCode, created.body).toBe(201);
    // Copied to another version of the addon.
    await refused('POST', '/api/releases', r('1.1', signed), /expected "addon=.* version=1\.1 /);
    await refused('PUT', `/api/releases/${created.json().id}`, { version: '1.1' }, /version=1\.1/);
    const renamed = await admin(t, 'PUT', `/api/releases/${created.json().id}`, { changelog: '新' });
    expect(renamed.statusCode, renamed.body).toBe(200);
  });
});
