import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePublicKey } from 'patchwell-client/minisign';
import { minisign, minisignKeyPair, minisignWanted } from '../../../test/helpers/minisign.js';
import { generateKeyPair, MinisignKeyError, parseSecretKey, scryptParams, signFile } from '../src/minisign.js';

// Keys and signatures in minisign's formats, checked both ways against Debian's minisign 0.11.
// Nothing here touches a database (an encrypted key costs scrypt with 1 GiB, as minisign's own do).
describe.skipIf(!minisignWanted())('minisign keys and signatures against the real minisign', () => {
  let dir: string;
  let file: string;
  const comment = 'addon=maps version=1.2.0 sha256=' + 'cd'.repeat(32);
  const password = 'correct horse battery staple';

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minisign-publish-'));
    file = path.join(dir, 'addon.zip');
    fs.writeFileSync(file, randomBytes(1024 * 1024 + 3));
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, text: string) => {
    const target = path.join(dir, name);
    fs.writeFileSync(target, text);
    return target;
  };
  /** minisign -V of `signature` over the file; answers the trusted comment it printed. */
  const minisignVerifies = (pub: string, signature: string) =>
    minisign(['-V', '-H', '-Q', '-p', pub, '-m', file, '-x', signature], { cwd: dir }).trim();

  it('derives the scrypt parameters libsodium derives from minisign limits', () => {
    expect(scryptParams(33_554_432n, 1_073_741_824n)).toEqual({ N: 2 ** 20, r: 8, p: 1 });
    expect(scryptParams(524_288n, 16_777_216n)).toEqual({ N: 2 ** 14, r: 8, p: 1 });
    expect(scryptParams(1n, 1_073_741_824n)).toEqual({ N: 2 ** 10, r: 8, p: 1 });
  });

  it('an unencrypted key pair of ours is laid out as minisign -W makes it, and works both ways', async () => {
    const ours = await generateKeyPair('');
    const theirs = minisignKeyPair(dir, 'w');
    const layout = (text: string) => {
      const raw = Buffer.from(text.split('\n')[1] ?? '', 'base64');
      // algorithms, then salt, limits, and the checksum are all zero; the key id and key differ.
      return [raw.length, raw.subarray(0, 54).toString('hex'), raw.subarray(126).toString('hex')];
    };
    expect(layout(ours.secretKeyFile)).toEqual(layout(fs.readFileSync(theirs.key, 'utf8')));
    expect(ours.secretKeyFile.split('\n')[0]).toBe(fs.readFileSync(theirs.key, 'utf8').split('\n')[0]);
    expect(ours.publicKeyFile).toMatch(
      new RegExp(`^untrusted comment: minisign public key ${ours.keyId}\\n[A-Za-z0-9+/=]{56}\\n$`),
    );

    const pub = write('ours.pub', ours.publicKeyFile);
    const key = write('ours.key', ours.secretKeyFile);
    // minisign signs with our key, and recreates our public key file from it.
    minisign(['-S', '-s', key, '-m', file, '-x', path.join(dir, 'by-minisign.minisig'), '-t', comment], { cwd: dir });
    expect(minisignVerifies(pub, path.join(dir, 'by-minisign.minisig'))).toBe(comment);
    minisign(['-R', '-s', key, '-p', path.join(dir, 'recreated.pub')], { cwd: dir });
    expect(fs.readFileSync(path.join(dir, 'recreated.pub'), 'utf8')).toBe(ours.publicKeyFile);
    // Our signature verifies with minisign.
    const secret = await parseSecretKey(ours.secretKeyFile, '');
    expect(secret.keyId).toBe(ours.keyId);
    expect(minisignVerifies(pub, write('ours.minisig', await signFile(secret, file, comment)))).toBe(comment);
  });

  it('a key made by minisign -G -W signs here, and minisign verifies it', async () => {
    const theirs = minisignKeyPair(dir, 'theirs-w');
    const secret = await parseSecretKey(fs.readFileSync(theirs.key, 'utf8'), '');
    expect(secret.keyId).toBe(parsePublicKey(fs.readFileSync(theirs.pub, 'utf8')).keyId);
    expect(minisignVerifies(theirs.pub, write('w.minisig', await signFile(secret, file, comment)))).toBe(comment);
  });

  it('an encrypted key of ours opens in minisign with the password', async () => {
    const ours = await generateKeyPair(password);
    expect(
      Buffer.from(ours.secretKeyFile.split('\n')[1] ?? '', 'base64')
        .subarray(0, 6)
        .toString('latin1'),
    ).toBe('EdScB2');
    const key = write('enc.key', ours.secretKeyFile);
    const pub = write('enc.pub', ours.publicKeyFile);
    minisign(['-S', '-s', key, '-m', file, '-x', path.join(dir, 'enc.minisig'), '-t', comment], {
      cwd: dir,
      input: `${password}\n`,
    });
    expect(minisignVerifies(pub, path.join(dir, 'enc.minisig'))).toBe(comment);
  });

  it('a key encrypted by minisign -G opens here with the password, and not without it', async () => {
    const theirs = minisignKeyPair(dir, 'theirs-enc', password);
    const text = fs.readFileSync(theirs.key, 'utf8');
    const secret = await parseSecretKey(text, password);
    expect(minisignVerifies(theirs.pub, write('theirs-enc.minisig', await signFile(secret, file, comment)))).toBe(
      comment,
    );
    await expect(parseSecretKey(text, 'wrong')).rejects.toThrow(MinisignKeyError);
  });

  it('refuses what is not a secret key, and a trusted comment of several lines', async () => {
    await expect(parseSecretKey('hello', '')).rejects.toThrow(MinisignKeyError);
    const ours = await generateKeyPair('');
    const damaged = ours.secretKeyFile.replace(
      /\n(.{100})(.)/,
      (_, head: string, c: string) => `\n${head}${c === 'A' ? 'B' : 'A'}`,
    );
    await expect(parseSecretKey(damaged, '')).rejects.toThrow(/damaged/);
    const secret = await parseSecretKey(ours.secretKeyFile, '');
    await expect(signFile(secret, file, 'one\ntwo')).rejects.toThrow(/one line/);
  });
});
