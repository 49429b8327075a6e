/**
 * The publisher's half of minisign (https://jedisct1.github.io/minisign/): key pairs and
 * signatures in minisign's exact file formats, so `minisign -V` checks what we sign and keys made
 * by `minisign -G` sign here. Node's `crypto` does Ed25519, BLAKE2b-512 and scrypt; the secret
 * key's checksum is BLAKE2b-256, which Node lacks, so `@noble/hashes` computes it. Reading keys and
 * signatures, prehashing and verifying live in `launcher-client/minisign`, shared with the
 * launcher and the service.
 */
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  scrypt,
  sign,
  type KeyObject,
} from 'node:crypto';
import { blake2b } from '@noble/hashes/blake2.js';
import { decodeBase64, keyIdOf, parsePublicKey, prehashFile, type MinisignPublicKey } from 'patchwell-client/minisign';

const UNTRUSTED_PREFIX = 'untrusted comment: ';
const SECRET_KEY_COMMENT = 'minisign encrypted secret key';
const SIGNATURE_COMMENT = 'signature from launcher-publish secret key';
const KEYNUM_BYTES = 8;
const SALT_BYTES = 32;
/** keynum (8) + Ed25519 secret key as libsodium keeps it, seed || public key (64) + checksum (32). */
const KEYNUM_SK_BYTES = KEYNUM_BYTES + 64 + 32;
const SECRET_KEY_BYTES = 2 + 2 + 2 + SALT_BYTES + 8 + 8 + KEYNUM_SK_BYTES;
/** libsodium's scryptsalsa208sha256 OPSLIMIT_SENSITIVE and MEMLIMIT_SENSITIVE, which minisign uses. */
const OPSLIMIT = 33_554_432n;
const MEMLIMIT = 1_073_741_824n;
/** The most memory a secret key file may ask scrypt for (minisign's own keys ask 1 GiB). */
const SCRYPT_MEMORY_CAP = 4 * 1024 * 1024 * 1024;

export class MinisignKeyError extends Error {
  override name = 'MinisignKeyError';
}

export interface MinisignSecretKey {
  readonly keyId: string;
  readonly keyNum: Buffer;
  readonly privateKey: KeyObject;
  readonly publicKey: MinisignPublicKey;
}

/**
 * libsodium's `pickparams`: the scrypt N, r, p that crypto_pwhash_scryptsalsa208sha256 derives
 * from an opslimit and a memlimit (the numbers minisign stores in a secret key file).
 */
export function scryptParams(opslimit: bigint, memlimit: bigint): { N: number; r: number; p: number } {
  const ops = opslimit < 32768n ? 32768n : opslimit;
  const r = 8n;
  let nLog2 = 1n;
  let p = 1n;
  const maxN = ops < memlimit / 32n ? ops / (r * 4n) : memlimit / (r * 128n);
  while (nLog2 < 63n && 1n << nLog2 <= maxN / 2n) nLog2 += 1n;
  if (ops >= memlimit / 32n) {
    let maxrp = ops / 4n / (1n << nLog2);
    if (maxrp > 0x3fffffffn) maxrp = 0x3fffffffn;
    p = maxrp / r;
  }
  return { N: Number(1n << nLog2), r: Number(r), p: Number(p) };
}

function keystream(password: string, salt: Buffer, opslimit: bigint, memlimit: bigint): Promise<Buffer> {
  const { N, r, p } = scryptParams(opslimit, memlimit);
  const memory = 128 * N * r * Math.max(p, 1);
  if (p < 1 || memory > SCRYPT_MEMORY_CAP)
    throw new MinisignKeyError('the secret key asks for scrypt parameters out of range');
  return new Promise((resolve, reject) =>
    scrypt(password, salt, KEYNUM_SK_BYTES, { N, r, p, maxmem: 2 * memory }, (error, key) =>
      error ? reject(error) : resolve(key),
    ),
  );
}

function xorInPlace(target: Buffer, stream: Buffer): void {
  for (let i = 0; i < target.length; i++) target[i] = (target[i] ?? 0) ^ (stream[i] ?? 0);
}

/** minisign's secret key checksum: BLAKE2b-256 over the algorithm, the key id and the secret key. */
function checksum(keyNum: Buffer, secret: Buffer): Buffer {
  return Buffer.from(blake2b(Buffer.concat([Buffer.from('Ed'), keyNum, secret]), { dkLen: 32 }));
}

/** A public key file as minisign writes it (`minisign -G`, `minisign -R`). */
function publicKeyFile(keyNum: Buffer, publicKey: Buffer): string {
  const line = Buffer.concat([Buffer.from('Ed'), keyNum, publicKey]).toString('base64');
  return `${UNTRUSTED_PREFIX}minisign public key ${keyIdOf(keyNum)}\n${line}\n`;
}

/**
 * A new key pair as `minisign -G` writes it: the secret key encrypted with scrypt from `password`
 * (minisign's sensitive parameters: 1 GiB of memory for a few seconds), or unencrypted when the
 * password is empty, exactly as `minisign -G -W` makes it.
 */
export async function generateKeyPair(
  password: string,
): Promise<{ keyId: string; publicKeyFile: string; secretKeyFile: string }> {
  const pair = generateKeyPairSync('ed25519');
  const jwk = pair.privateKey.export({ format: 'jwk' });
  if (!jwk.d || !jwk.x) throw new MinisignKeyError('Node did not export the Ed25519 key');
  const publicKey = Buffer.from(jwk.x, 'base64url');
  const keyNum = randomBytes(KEYNUM_BYTES);
  const secret = Buffer.concat([Buffer.from(jwk.d, 'base64url'), publicKey]);
  const encrypted = password !== '';
  const salt = encrypted ? randomBytes(SALT_BYTES) : Buffer.alloc(SALT_BYTES);
  const limits = Buffer.alloc(16);
  // minisign -W leaves the salt, the limits and the checksum zero: only an encrypted key checks them.
  const keynumSk = Buffer.concat([keyNum, secret, encrypted ? checksum(keyNum, secret) : Buffer.alloc(32)]);
  if (encrypted) {
    limits.writeBigUInt64LE(OPSLIMIT, 0);
    limits.writeBigUInt64LE(MEMLIMIT, 8);
    xorInPlace(keynumSk, await keystream(password, salt, OPSLIMIT, MEMLIMIT));
  }
  const header = Buffer.from(encrypted ? 'EdScB2' : 'Ed\0\0B2', 'latin1');
  const line = Buffer.concat([header, salt, limits, keynumSk]).toString('base64');
  return {
    keyId: keyIdOf(keyNum),
    publicKeyFile: publicKeyFile(keyNum, publicKey),
    secretKeyFile: `${UNTRUSTED_PREFIX}${SECRET_KEY_COMMENT}\n${line}\n`,
  };
}

/** A secret key file (ours or minisign's), decrypted with `password` when it is encrypted. */
export async function parseSecretKey(text: string, password: string): Promise<MinisignSecretKey> {
  const [comment, line] = text.split('\n').map((l) => l.trim());
  if (!comment?.startsWith(UNTRUSTED_PREFIX.trim()) || !line) {
    throw new MinisignKeyError('not a minisign secret key file (an untrusted comment line, then the key)');
  }
  const raw = decodeBase64(line, SECRET_KEY_BYTES, 'a minisign secret key');
  const algorithms = raw.subarray(0, 6).toString('latin1');
  if (algorithms.slice(0, 2) !== 'Ed' || algorithms.slice(4) !== 'B2') {
    throw new MinisignKeyError('unsupported minisign secret key algorithm');
  }
  const kdf = algorithms.slice(2, 4);
  if (kdf !== 'Sc' && kdf !== '\0\0') throw new MinisignKeyError('unsupported minisign key derivation function');
  const keynumSk = raw.subarray(6 + SALT_BYTES + 16);
  if (kdf === 'Sc') {
    const salt = raw.subarray(6, 6 + SALT_BYTES);
    const opslimit = raw.readBigUInt64LE(6 + SALT_BYTES);
    const memlimit = raw.readBigUInt64LE(6 + SALT_BYTES + 8);
    xorInPlace(keynumSk, await keystream(password, salt, opslimit, memlimit));
  }
  const keyNum = Buffer.from(keynumSk.subarray(0, KEYNUM_BYTES));
  const secret = keynumSk.subarray(KEYNUM_BYTES, KEYNUM_BYTES + 64);
  if (kdf === 'Sc' && !checksum(keyNum, secret).equals(keynumSk.subarray(KEYNUM_BYTES + 64))) {
    throw new MinisignKeyError(
      password === ''
        ? 'this secret key is encrypted: set its password in LAUNCHER_SIGN_PASSWORD'
        : 'wrong password for this secret key (LAUNCHER_SIGN_PASSWORD)',
    );
  }
  const seed = secret.subarray(0, 32);
  const storedPublic = secret.subarray(32);
  const privateKey = createPrivateKey({
    key: { kty: 'OKP', crv: 'Ed25519', d: seed.toString('base64url'), x: storedPublic.toString('base64url') },
    format: 'jwk',
  });
  // The public half derived from the seed must be the one stored beside it (an unencrypted key has no checksum).
  const derived = createPublicKey(privateKey).export({ format: 'jwk' }).x;
  if (derived !== storedPublic.toString('base64url')) throw new MinisignKeyError('the secret key is damaged');
  return { keyId: keyIdOf(keyNum), keyNum, privateKey, publicKey: parsePublicKey(publicKeyFile(keyNum, storedPublic)) };
}

/** A `.minisig` text over a file's prehash (BLAKE2b-512), with the given one-line trusted comment. */
export function signPrehash(key: MinisignSecretKey, filePrehash: Uint8Array, trustedComment: string): string {
  if (/[\r\n]/.test(trustedComment)) throw new MinisignKeyError('a trusted comment is one line');
  const signature = sign(null, filePrehash, key.privateKey);
  const global = sign(null, Buffer.concat([signature, Buffer.from(trustedComment, 'utf8')]), key.privateKey);
  const signatureLine = Buffer.concat([Buffer.from('ED'), key.keyNum, signature]).toString('base64');
  return [
    `${UNTRUSTED_PREFIX}${SIGNATURE_COMMENT}`,
    signatureLine,
    `trusted comment: ${trustedComment}`,
    global.toString('base64'),
    '',
  ].join('\n');
}

/** Signs a file as `minisign -S -t trustedComment -m path` would. */
export async function signFile(key: MinisignSecretKey, path: string, trustedComment: string): Promise<string> {
  return signPrehash(key, await prehashFile(path), trustedComment);
}
