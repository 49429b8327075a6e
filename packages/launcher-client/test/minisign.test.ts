import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { minisign, minisignKeyPair, minisignWanted } from '../../../test/helpers/minisign.js';
import {
  keyIdOf,
  checkSignature,
  MinisignFormatError,
  parsePublicKey,
  parsePublicKeys,
  parseSignature,
  prehash,
  prehashFile,
  releaseTrustedComment,
  versionTrustedComment,
} from '../src/trust/minisign.js';

// Signatures made by Debian's minisign verify with ours, and what minisign refuses we refuse.
describe('minisign key ids', () => {
  it('are printed as minisign prints them: uppercase hex of the little-endian number, no leading zeros', () => {
    expect(keyIdOf(Uint8Array.from([0xcb, 0xf5, 0xbd, 0x41, 0x1c, 0x85, 0x9f, 0x0e]))).toBe('E9F851C41BDF5CB');
    expect(keyIdOf(Uint8Array.from([0xf6, 0x29, 0x55, 0xe1, 0xff, 0xb6, 0x8a, 0x7c]))).toBe('7C8AB6FFE15529F6');
    expect(keyIdOf(new Uint8Array(8))).toBe('0');
  });
});

describe.runIf(minisignWanted())('minisign verification against the real minisign', () => {
  let dir: string;
  let publisher: { pub: string; key: string };
  let other: { pub: string; key: string };
  let file: string;
  const comment = 'package=demo versionCode=7 sha256=' + 'ab'.repeat(32);

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minisign-client-'));
    publisher = minisignKeyPair(dir, 'publisher');
    other = minisignKeyPair(dir, 'other');
    file = path.join(dir, 'launcher.zip');
    fs.writeFileSync(file, randomBytes(3 * 1024 * 1024 + 17));
    minisign(['-S', '-s', publisher.key, '-m', file, '-t', comment], { cwd: dir });
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const read = (p: string) => fs.readFileSync(p, 'utf8');

  it('reads minisign key files, bare key lines and files of several keys', () => {
    const key = parsePublicKey(read(publisher.pub));
    // The key id as minisign prints it in the .pub file's comment.
    expect(read(publisher.pub)).toContain(`minisign public key ${key.keyId}`);
    expect(key.keyId).toMatch(/^[1-9A-F][0-9A-F]{0,15}$/);
    expect(parsePublicKey(key.base64 + '\n').keyId).toBe(key.keyId);
    const both = parsePublicKeys(`# publishers\n${read(publisher.pub)}\n\n${read(other.pub)}`);
    expect(both.map((k) => k.keyId)).toEqual([key.keyId, parsePublicKey(read(other.pub)).keyId]);
    expect(() => parsePublicKey(read(publisher.pub) + read(other.pub))).toThrow(MinisignFormatError);
    expect(() => parsePublicKey('RWQnotakey')).toThrow(MinisignFormatError);
  });

  it('accepts a minisign signature over the streamed file with the right key and trusted comment', async () => {
    const signature = parseSignature(read(`${file}.minisig`));
    expect(signature.trustedComment).toBe(comment);
    expect(signature.untrustedComment).toBe('signature from minisign secret key');
    const keys = parsePublicKeys(read(other.pub) + read(publisher.pub));
    const verdict = checkSignature(signature, keys, await prehashFile(file), comment);
    expect(verdict).toEqual({ ok: true, key: keys[1] });
    expect(verdict.ok && verdict.key.keyId).toBe(signature.keyId);
    // The same digest, whichever way the bytes arrive.
    expect(await prehash([fs.readFileSync(file)])).toEqual(await prehashFile(file));
  });

  it('refuses another file, another key, an edited trusted comment, and another expected comment', async () => {
    const text = read(`${file}.minisig`);
    const signature = parseSignature(text);
    const keys = [parsePublicKey(read(publisher.pub))];
    const digest = await prehashFile(file);

    const changed = Buffer.from(fs.readFileSync(file));
    changed[1000] = (changed[1000] ?? 0) ^ 1;
    expect(checkSignature(signature, keys, await prehash([changed]), comment)).toEqual({
      ok: false,
      reason: expect.stringContaining('does not match the file'),
    });

    expect(checkSignature(signature, [parsePublicKey(read(other.pub))], digest, comment)).toEqual({
      ok: false,
      reason: expect.stringContaining(`signed by key ${signature.keyId}, which is not a trusted key`),
    });

    const edited = parseSignature(text.replace('versionCode=7', 'versionCode=8'));
    expect(checkSignature(edited, keys, digest, edited.trustedComment)).toEqual({
      ok: false,
      reason: expect.stringContaining("trusted comment's signature"),
    });

    const forOther = versionTrustedComment({ slug: 'other', versionCode: 7, sha256: 'AB'.repeat(32) });
    expect(forOther).toBe('package=other versionCode=7 sha256=' + 'ab'.repeat(32));
    expect(checkSignature(signature, keys, digest, forOther)).toEqual({
      ok: false,
      reason: `the trusted comment is "${comment}", expected "${forOther}"`,
    });
    expect(releaseTrustedComment({ slug: 'maps', version: '1.2.0', sha256: 'CD'.repeat(32) })).toBe(
      'addon=maps version=1.2.0 sha256=' + 'cd'.repeat(32),
    );
  });

  it('refuses legacy (non-prehashed) signatures, as minisign -V -H does', () => {
    const legacy = path.join(dir, 'legacy.minisig');
    minisign(['-S', '-l', '-s', publisher.key, '-m', file, '-x', legacy, '-t', comment], { cwd: dir });
    expect(() => parseSignature(read(legacy))).toThrow(/legacy/);
    expect(() => minisign(['-V', '-H', '-p', publisher.pub, '-m', file, '-x', legacy], { cwd: dir })).toThrow(/Legacy/);
  });

  it('refuses text that is not a minisign signature', () => {
    const text = read(`${file}.minisig`);
    const [untrusted, sig, trusted, global] = text.split('\n') as [string, string, string, string];
    const broken = [
      '',
      'hello',
      [sig, untrusted, trusted, global].join('\n'),
      [untrusted, sig, trusted.replace('trusted comment: ', 'comment: '), global].join('\n'),
      [untrusted, sig.slice(4), trusted, global].join('\n'),
      [untrusted, sig, trusted, global.slice(0, -4)].join('\n'),
      [untrusted, sig, trusted, global, 'extra'].join('\n'),
      [untrusted, sig, trusted].join('\n'),
    ];
    for (const candidate of broken) expect(() => parseSignature(candidate), candidate).toThrow(MinisignFormatError);
    // Trailing newlines and CRLF line ends are fine.
    expect(parseSignature(text.replaceAll('\n', '\r\n') + '\n').trustedComment).toBe(comment);
  });
});
