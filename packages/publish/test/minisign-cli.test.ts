import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, createPackage, type TestApp } from '../../../test/helpers/app.js';
import { minisign, minisignWanted } from '../../../test/helpers/minisign.js';
import { apiToken, listen } from '../../../test/helpers/tus.js';
import { errorOf, startCli } from './cli-process.js';

/**
 * launcher-publish keygen and --sign-key as programs, against the real service with PUBLISHER_KEYS
 * naming the key keygen made; what they sign is checked again by Debian's minisign.
 */

let t: TestApp;
let token: string;
let server: string;
let dir: string;
let keys: string;

const run = (args: string[], env: Record<string, string> = {}) =>
  startCli(args, { LAUNCHER_TOKEN: token, LAUNCHER_PUBLISH_STATE: path.join(dir, 'state.json'), ...env }).done;

function build(name: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, randomBytes(200_000));
  return file;
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-publish-sign-'));
  keys = path.join(dir, 'keys');
  const made = await run(['keygen', '--out', keys], { LAUNCHER_SIGN_PASSWORD: '' });
  expect(made.code, made.stderr).toBe(0);
  t = await buildTestApp({ PUBLISHER_KEYS: path.join(keys, 'publisher.pub') });
  server = await listen(t);
  token = await apiToken(t);
  await createPackage(t, { slug: 'signed-launcher', name: '启动器' });
  const addon = await admin(t, 'POST', '/api/addons', { slug: 'signed-addon', name: '插件', summary: '简介' });
  expect(addon.statusCode).toBe(201);
});
afterAll(async () => {
  await t?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('launcher-publish keygen and --sign-key', () => {
  it('keygen writes a key pair in minisign formats, and never over an existing one', async () => {
    const pub = fs.readFileSync(path.join(keys, 'publisher.pub'), 'utf8');
    expect(pub).toMatch(/^untrusted comment: minisign public key [1-9A-F][0-9A-F]{0,15}\n/);
    expect(fs.statSync(path.join(keys, 'publisher.key')).mode & 0o777).toBe(0o600);
    const again = await run(['keygen', '--out', keys]);
    expect(again.code).toBe(1);
    expect(errorOf(again)).toMatch(/EEXIST/);
    expect(fs.readFileSync(path.join(keys, 'publisher.pub'), 'utf8')).toBe(pub);
  });

  it.runIf(minisignWanted())(
    'signs a version the service accepts under PUBLISHER_KEYS, and minisign verifies',
    async () => {
      const file = build('launcher-2.0.zip');
      const common = ['--server', server, '--package', 'signed-launcher', '--file', file];
      const unsigned = await run(['version', ...common, '--version', '2.0', '--version-code', '20']);
      expect(unsigned.code).toBe(1);
      expect(errorOf(unsigned)).toMatch(/fileSignature: is required/);

      const signed = await run([
        'version',
        ...common,
        '--version',
        '2.0',
        '--version-code',
        '20',
        '--sign-key',
        path.join(keys, 'publisher.key'),
      ]);
      expect(signed.code, signed.stderr).toBe(0);
      const version = JSON.parse(signed.stdout) as {
        fileSignature: string;
        fileSignatureKeyId: string;
        sha256: string;
      };
      expect(fs.readFileSync(path.join(keys, 'publisher.pub'), 'utf8')).toContain(version.fileSignatureKeyId);
      fs.writeFileSync(`${file}.minisig`, version.fileSignature);
      const verified = minisign(['-V', '-H', '-Q', '-p', path.join(keys, 'publisher.pub'), '-m', file], { cwd: dir });
      expect(verified.trim()).toBe(`package=signed-launcher versionCode=20 sha256=${version.sha256}`);
    },
  );

  it('signs an addon release with the addon trusted comment', async () => {
    const file = build('addon-1.0.zip');
    const args = ['release', '--server', server, '--addon', 'signed-addon', '--version', '1.0', '--file', file];
    const signed = await run([...args, '--sign-key', path.join(keys, 'publisher.key')]);
    expect(signed.code, signed.stderr).toBe(0);
    const release = JSON.parse(signed.stdout) as { fileSignature: string; sha256: string };
    expect(release.fileSignature).toContain(
      `trusted comment: addon=signed-addon version=1.0 sha256=${release.sha256}\n`,
    );
  });

  // After the test above (its version 20), which needs minisign.
  it.skipIf(!minisignWanted())(
    'an encrypted key needs its password, and a wrong one fails before anything is uploaded',
    async () => {
      const encrypted = path.join(dir, 'encrypted');
      const made = await run(['keygen', '--out', encrypted], { LAUNCHER_SIGN_PASSWORD: 'right horse' });
      expect(made.code, made.stderr).toBe(0);
      expect(JSON.parse(made.stdout)).toMatchObject({ encrypted: true });
      const file = build('launcher-2.1.zip');
      const wrong = await run(
        [
          'version',
          '--server',
          server,
          '--package',
          'signed-launcher',
          '--version',
          '2.1',
          '--version-code',
          '21',
          '--file',
          file,
          '--sign-key',
          path.join(encrypted, 'publisher.key'),
        ],
        { LAUNCHER_SIGN_PASSWORD: 'wrong horse' },
      );
      expect(wrong.code).toBe(1);
      expect(errorOf(wrong)).toMatch(/wrong password/);
      const uploads = await admin(t, 'GET', '/api/software/signed-launcher');
      expect(uploads.json().versions.map((v: { versionCode: number }) => v.versionCode)).toEqual([20]);
    },
  );
});
