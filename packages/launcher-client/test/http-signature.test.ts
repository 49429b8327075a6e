import { generateKeyPairSync, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SignatureError } from '../src/errors.js';
import { signatureBase, signatureCandidates, verifyEd25519 } from '../src/trust/http-signature.js';
import { parseDictionary, serializeInnerList, StructuredFieldError } from '../src/trust/structured-fields.js';

// RFC 9421 Appendix B.1.4: test-key-ed25519 (the JWK's x, the raw public key, base64url).
const RFC_PUBLIC_KEY = Buffer.from('JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs', 'base64url');
// Appendix B.2.6: signing the B.2 test request with ed25519.
const B26_INPUT =
  'sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"';
const B26_SIGNATURE =
  'sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:';
const B26_BASE = [
  '"date": Tue, 20 Apr 2021 02:07:55 GMT',
  '"@method": POST',
  '"@path": /foo',
  '"@authority": example.com',
  '"content-type": application/json',
  '"content-length": 18',
  '"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"',
].join('\n');
// The B.2 test request, as far as B.2.6's components see it.
const B2_REQUEST: Record<string, string> = {
  date: 'Tue, 20 Apr 2021 02:07:55 GMT',
  '@method': 'POST',
  '@path': '/foo',
  '@authority': 'example.com',
  'content-type': 'application/json',
  'content-length': '18',
};

describe('RFC 9421 signature base and Ed25519 (Appendix B.2.6)', () => {
  const [candidate] = signatureCandidates(B26_INPUT, B26_SIGNATURE);

  it('parses the candidate and rebuilds the signature base byte for byte', () => {
    expect(candidate?.label).toBe('sig-b26');
    expect(candidate?.components).toEqual([
      '"date"',
      '"@method"',
      '"@path"',
      '"@authority"',
      '"content-type"',
      '"content-length"',
    ]);
    const base = signatureBase(
      candidate!.components,
      (c) => B2_REQUEST[c.slice(1, -1)] ?? null,
      candidate!.signatureParams,
    );
    expect(base).toBe(B26_BASE);
  });

  it("verifies the RFC's signature with the RFC's key, and refuses any change", () => {
    expect(verifyEd25519(RFC_PUBLIC_KEY, B26_BASE, candidate!.signature)).toBe(true);
    expect(verifyEd25519(RFC_PUBLIC_KEY, B26_BASE.replace('POST', 'GET'), candidate!.signature)).toBe(false);
    const flipped = Buffer.from(candidate!.signature);
    flipped[10] = (flipped[10] ?? 0) ^ 1;
    expect(verifyEd25519(RFC_PUBLIC_KEY, B26_BASE, flipped)).toBe(false);
    const other = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x ?? '';
    expect(verifyEd25519(Buffer.from(other, 'base64url'), B26_BASE, candidate!.signature)).toBe(false);
  });

  it('a missing signed component is a SignatureError', () => {
    expect(() => signatureBase(['"date"'], () => null, '("date")')).toThrow(SignatureError);
  });

  it('verifies the service shape: ("content-digest") with created, keyid, alg', () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const digest = 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:';
    const params = '("content-digest");created=1795600000;keyid="abc";alg="ed25519"';
    const base = `"content-digest": ${digest}\n"@signature-params": ${params}`;
    const sig = sign(null, Buffer.from(base), privateKey).toString('base64');
    const [c] = signatureCandidates(`sig1=${params}`, `sig1=:${sig}:`);
    expect(c?.signatureParams).toBe(params);
    const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x ?? '', 'base64url');
    expect(
      verifyEd25519(
        raw,
        signatureBase(c!.components, () => digest, c!.signatureParams),
        c!.signature,
      ),
    ).toBe(true);
  });

  it('refuses malformed or mismatched headers with a SignatureError', () => {
    const bad: [string | null, string | null][] = [
      [null, B26_SIGNATURE],
      [B26_INPUT, null],
      ['sig-b26=("date"', B26_SIGNATURE],
      [B26_INPUT, 'sig-b26=:not base64:'],
      [B26_INPUT, 'sig-b26="a string"'],
      [B26_INPUT, 'other=:AAAA:'],
      ['sig-b26="date"', B26_SIGNATURE],
      ['sig-b26=(1)', B26_SIGNATURE],
      ['sig-b26=(date)', B26_SIGNATURE],
    ];
    for (const [input, signature] of bad) {
      expect(() => signatureCandidates(input, signature), `${input} / ${signature}`).toThrow(SignatureError);
    }
  });
});

describe('RFC 8941 structured fields', () => {
  it('parses dictionaries with items, inner lists, parameters and every bare item type', () => {
    const dict = parseDictionary(
      'a=1, b=-2.5;x, c="q\\"uote\\\\", d=tok/en:x, e=:AQID:, f=?0, g, h=(1 "two");p=?1, i=()',
    );
    expect([...dict.keys()]).toEqual(['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i']);
    expect(dict.get('a')).toEqual({ value: { type: 'integer', value: 1 }, params: new Map() });
    expect(dict.get('b')).toEqual({
      value: { type: 'decimal', value: -2.5 },
      params: new Map([['x', { type: 'boolean', value: true }]]),
    });
    expect(dict.get('c')).toMatchObject({ value: { type: 'string', value: 'q"uote\\' } });
    expect(dict.get('d')).toMatchObject({ value: { type: 'token', value: 'tok/en:x' } });
    expect(dict.get('e')).toMatchObject({ value: { type: 'bytes', value: Buffer.from([1, 2, 3]) } });
    expect(dict.get('f')).toMatchObject({ value: { type: 'boolean', value: false } });
    expect(dict.get('g')).toMatchObject({ value: { type: 'boolean', value: true } });
    const h = dict.get('h');
    expect(h && 'items' in h ? serializeInnerList(h) : null).toBe('(1 "two");p');
    expect(dict.get('i')).toEqual({ items: [], params: new Map() });
  });

  it('refuses what RFC 8941 refuses', () => {
    const bad = [
      'a=1,',
      'a=1 b=2',
      'A=1',
      'a="unterminated',
      'a="bad\\escape"',
      'a="tab\there"',
      'a=:AQI:',
      'a=:A Q:',
      'a=?2',
      'a=1234567890123456',
      'a=1.2345',
      'a=(1 2',
      'a=(1,2)',
      'a=@',
      '1a=1',
      'a=1;B=2',
      'a=é',
    ];
    for (const input of bad) expect(() => parseDictionary(input), input).toThrow(StructuredFieldError);
  });

  it('allows spaces around members and repeated fields joined by ", "', () => {
    expect([...parseDictionary('  a=1 ,\tb=2  ').keys()]).toEqual(['a', 'b']);
  });
});
