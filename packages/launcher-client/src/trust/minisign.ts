/**
 * Verification of files signed by the publisher, in minisign's formats
 * (https://jedisct1.github.io/minisign/): Ed25519 over the file's BLAKE2b-512 ("prehashed",
 * algorithm `ED`), plus a global signature over the signature and its one-line trusted comment.
 * Node's `crypto` does the hashing and Ed25519; this module only reads the formats.
 *
 * Legacy signatures (algorithm `Ed`, Ed25519 over the whole file, `minisign -S -l`) are refused, as
 * `minisign -V -H` refuses them: verifying one needs the whole file in memory, and nothing we ship
 * makes them (minisign itself prehashes by default since 0.8).
 */
import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';
import { createReadStream } from 'node:fs';

const UNTRUSTED_PREFIX = 'untrusted comment: ';
const TRUSTED_PREFIX = 'trusted comment: ';
/** minisign's limits: a line of COMMENTMAXBYTES (1024) and TRUSTEDCOMMENTMAXBYTES (8192) with its prefix. */
const UNTRUSTED_COMMENT_MAX = 1024 - UNTRUSTED_PREFIX.length - 1;
const TRUSTED_COMMENT_MAX = 8192 - TRUSTED_PREFIX.length - 1;
const KEY_ALGORITHM = 'Ed';
const PREHASHED_ALGORITHM = 'ED';
const KEYNUM_BYTES = 8;
const ED25519_PUBLIC_BYTES = 32;
const ED25519_SIGNATURE_BYTES = 64;

/** The text is not a minisign key or signature (or uses a form this module refuses). */
export class MinisignFormatError extends Error {
  override name = 'MinisignFormatError';
}

export interface MinisignPublicKey {
  /** The key id as minisign prints it (`minisign public key 7C8AB6FFE15529F6`): up to 16 uppercase hex digits. */
  readonly keyId: string;
  /** The key id's 8 bytes as they appear in keys and signatures. */
  readonly keyNum: Buffer;
  readonly publicKey: KeyObject;
  /** The key's base64 line (what `minisign -P` takes). */
  readonly base64: string;
}

export interface MinisignSignature {
  readonly untrustedComment: string;
  /** The id of the key that made it (16 uppercase hex digits). */
  readonly keyId: string;
  readonly keyNum: Buffer;
  /** Ed25519 over the file's BLAKE2b-512. */
  readonly signature: Buffer;
  readonly trustedComment: string;
  /** Ed25519 over `signature || trustedComment`. */
  readonly globalSignature: Buffer;
}

/**
 * minisign prints a key id as the little-endian 64-bit number its 8 bytes make, in uppercase hex
 * without leading zeros (`%" PRIX64`): one key in 16 has fewer than 16 digits.
 */
export function keyIdOf(keyNum: Uint8Array): string {
  return Buffer.from(keyNum)
    .reverse()
    .toString('hex')
    .toUpperCase()
    .replace(/^0+(?=.)/, '');
}

/** Strict base64 (the original alphabet, padded, canonical), as libsodium's decoder wants it; `bytes` is the exact length. */
export function decodeBase64(text: string, bytes: number, what: string): Buffer {
  const decoded = /^[A-Za-z0-9+/]*={0,2}$/.test(text) && text.length % 4 === 0 ? Buffer.from(text, 'base64') : null;
  if (!decoded || decoded.toString('base64') !== text || decoded.length !== bytes) {
    throw new MinisignFormatError(`${what} is not ${bytes} bytes of base64`);
  }
  return decoded;
}

function ed25519PublicKey(raw: Buffer): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}

function parsePublicKeyLine(line: string): MinisignPublicKey {
  const raw = decodeBase64(line, 2 + KEYNUM_BYTES + ED25519_PUBLIC_BYTES, 'a minisign public key');
  if (raw.subarray(0, 2).toString('latin1') !== KEY_ALGORITHM) {
    throw new MinisignFormatError('unsupported minisign public key algorithm');
  }
  const keyNum = raw.subarray(2, 2 + KEYNUM_BYTES);
  return { keyId: keyIdOf(keyNum), keyNum, publicKey: ed25519PublicKey(raw.subarray(2 + KEYNUM_BYTES)), base64: line };
}

function lines(text: string): string[] {
  return text.split('\n').map((line) => line.replace(/\r$/, ''));
}

/**
 * Public keys from text: minisign's `.pub` files (an `untrusted comment:` line, then the base64
 * line), bare base64 lines, or several of either in one file. Blank lines, `untrusted comment:`
 * lines and `#` lines are ignored.
 */
export function parsePublicKeys(text: string): MinisignPublicKey[] {
  return lines(text)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#') && !line.startsWith(UNTRUSTED_PREFIX.trim()))
    .map(parsePublicKeyLine);
}

/** Exactly one public key (a `.pub` file or its base64 line). */
export function parsePublicKey(text: string): MinisignPublicKey {
  const keys = parsePublicKeys(text);
  if (keys.length !== 1 || !keys[0])
    throw new MinisignFormatError(`expected one minisign public key, found ${keys.length}`);
  return keys[0];
}

/** A `.minisig` file: four lines (untrusted comment, signature, trusted comment, global signature). */
export function parseSignature(text: string): MinisignSignature {
  const all = lines(text);
  while (all.length > 4 && all[all.length - 1] === '') all.pop();
  const [untrusted, signatureLine, trusted, globalLine] = all;
  if (
    all.length !== 4 ||
    untrusted === undefined ||
    signatureLine === undefined ||
    trusted === undefined ||
    globalLine === undefined
  ) {
    throw new MinisignFormatError('a minisign signature has four lines');
  }
  if (!untrusted.startsWith(UNTRUSTED_PREFIX) || untrusted.length - UNTRUSTED_PREFIX.length > UNTRUSTED_COMMENT_MAX) {
    throw new MinisignFormatError(`the first line must start with "${UNTRUSTED_PREFIX}" (and fit minisign's limit)`);
  }
  if (!trusted.startsWith(TRUSTED_PREFIX) || Buffer.byteLength(trusted) - TRUSTED_PREFIX.length > TRUSTED_COMMENT_MAX) {
    throw new MinisignFormatError(`the third line must start with "${TRUSTED_PREFIX}" (and fit minisign's limit)`);
  }
  const raw = decodeBase64(signatureLine.trim(), 2 + KEYNUM_BYTES + ED25519_SIGNATURE_BYTES, 'the signature line');
  const algorithm = raw.subarray(0, 2).toString('latin1');
  if (algorithm === KEY_ALGORITHM) {
    throw new MinisignFormatError('legacy (non-prehashed) minisign signatures are not accepted: sign without -l');
  }
  if (algorithm !== PREHASHED_ALGORITHM) throw new MinisignFormatError('unsupported minisign signature algorithm');
  const keyNum = raw.subarray(2, 2 + KEYNUM_BYTES);
  return {
    untrustedComment: untrusted.slice(UNTRUSTED_PREFIX.length),
    keyId: keyIdOf(keyNum),
    keyNum,
    signature: raw.subarray(2 + KEYNUM_BYTES),
    trustedComment: trusted.slice(TRUSTED_PREFIX.length),
    globalSignature: decodeBase64(globalLine.trim(), ED25519_SIGNATURE_BYTES, 'the global signature line'),
  };
}

/** What minisign signs: a file's BLAKE2b-512, hashed as it streams by. */
export async function prehash(source: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): Promise<Buffer> {
  const hash = createHash('blake2b512');
  for await (const chunk of source) hash.update(chunk);
  return hash.digest();
}

export function prehashFile(path: string): Promise<Buffer> {
  return prehash(createReadStream(path));
}

/** The trusted comment that binds a launcher file to the version it is published as. */
export function versionTrustedComment(version: { slug: string; versionCode: number; sha256: string }): string {
  return `package=${version.slug} versionCode=${version.versionCode} sha256=${version.sha256.toLowerCase()}`;
}

/** The trusted comment that binds an addon file to the release it is published as. */
export function releaseTrustedComment(release: { slug: string; version: string; sha256: string }): string {
  return `addon=${release.slug} version=${release.version} sha256=${release.sha256.toLowerCase()}`;
}

/** The trusted comment that binds a game client manifest to the build it is published as (`game-files.md`). */
export function gameTrustedComment(build: { app: string; buildCode: number; sha256: string }): string {
  return `game=${build.app} buildCode=${build.buildCode} sha256=${build.sha256.toLowerCase()}`;
}

export type MinisignVerdict = { ok: true; key: MinisignPublicKey } | { ok: false; reason: string };

/**
 * Checks a signature against trusted keys and a file's prehash (`prehash`/`prehashFile`), as
 * `minisign -V` does (key id, file signature, then the trusted comment's signature), and then that
 * the trusted comment is exactly `expectedTrustedComment`.
 */
export function checkSignature(
  signature: MinisignSignature,
  keys: readonly MinisignPublicKey[],
  filePrehash: Uint8Array,
  expectedTrustedComment: string,
): MinisignVerdict {
  const key = keys.find((candidate) => candidate.keyNum.equals(signature.keyNum));
  if (!key) {
    const known = keys.map((candidate) => candidate.keyId).join(', ');
    return { ok: false, reason: `signed by key ${signature.keyId}, which is not a trusted key (${known || 'none'})` };
  }
  if (!verify(null, filePrehash, key.publicKey, signature.signature)) {
    return { ok: false, reason: `the signature by key ${key.keyId} does not match the file` };
  }
  const signed = Buffer.concat([signature.signature, Buffer.from(signature.trustedComment, 'utf8')]);
  if (!verify(null, signed, key.publicKey, signature.globalSignature)) {
    return { ok: false, reason: `the trusted comment's signature by key ${key.keyId} does not verify` };
  }
  if (signature.trustedComment !== expectedTrustedComment) {
    return {
      ok: false,
      reason: `the trusted comment is "${signature.trustedComment}", expected "${expectedTrustedComment}"`,
    };
  }
  return { ok: true, key };
}
