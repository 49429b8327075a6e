import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import fs from 'node:fs';
import { ConfigError } from '../../config.js';
import type { SigningKeyRow } from '../../db/schema.js';
import { nowIso } from '../../domain/clock.js';

/** A key as `GET /api/signing-keys` lists it. */
export interface SigningKeyEntry {
  keyId: string;
  algorithm: 'ed25519';
  /** Base64 of the raw 32-byte Ed25519 public key. */
  publicKey: string;
  createdAt: string;
  status: 'active' | 'retired';
  /** The previous key's signature over this key's raw public key bytes (a rotation), else null. */
  endorsement: { keyId: string; signature: string } | null;
}

export interface LoadedKey {
  readonly entry: SigningKeyEntry;
  readonly privateKey: KeyObject;
}

/** The keys of one content version: every listed key, and those that sign (active first). */
export interface KeySet {
  readonly entries: readonly SigningKeyEntry[];
  readonly signing: readonly LoadedKey[];
}

function rawPublicKey(privateKey: KeyObject): Buffer {
  const jwk = createPublicKey(privateKey).export({ format: 'jwk' });
  return Buffer.from(jwk.x ?? '', 'base64url');
}

/**
 * A key's id: the first 16 hex digits of SHA-256 over its raw public key, the same wherever it is
 * listed (and, being hex, a structured-field string as it is: see `signatureInput`).
 */
function keyIdOf(rawPublic: Buffer): string {
  return createHash('sha256').update(rawPublic).digest('hex').slice(0, 16);
}

export function fromRow(row: SigningKeyRow): LoadedKey {
  return {
    privateKey: createPrivateKey(row.privateKey),
    entry: {
      keyId: row.id,
      algorithm: 'ed25519',
      publicKey: row.publicKey,
      createdAt: row.createdAt,
      status: row.retiredAt === null ? 'active' : 'retired',
      endorsement:
        row.endorsedBy !== null && row.endorsement !== null
          ? { keyId: row.endorsedBy, signature: row.endorsement }
          : null,
    },
  };
}

/** A new key, endorsed by `endorser` (its signature over the new raw public key) when there is one. */
export function newKeyRow(endorser: LoadedKey | null): SigningKeyRow {
  const { privateKey } = generateKeyPairSync('ed25519');
  const raw = rawPublicKey(privateKey);
  return {
    id: keyIdOf(raw),
    publicKey: raw.toString('base64'),
    privateKey: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    createdAt: nowIso(),
    retiredAt: null,
    endorsedBy: endorser?.entry.keyId ?? null,
    endorsement: endorser ? sign(null, raw, endorser.privateKey).toString('base64') : null,
  };
}

/** The key of `SIGNING_KEY_FILE` (a PKCS#8 PEM Ed25519 private key), always active. */
export function readKeyFile(file: string): LoadedKey {
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(fs.readFileSync(file));
  } catch (err) {
    throw new ConfigError(`SIGNING_KEY_FILE ${file} is not a readable PKCS#8 PEM key: ${(err as Error).message}`);
  }
  if (privateKey.asymmetricKeyType !== 'ed25519') {
    throw new ConfigError(`SIGNING_KEY_FILE ${file} is not an Ed25519 key`);
  }
  const raw = rawPublicKey(privateKey);
  return {
    privateKey,
    entry: {
      keyId: keyIdOf(raw),
      algorithm: 'ed25519',
      publicKey: raw.toString('base64'),
      createdAt: fs.statSync(file).mtime.toISOString(),
      status: 'active',
      endorsement: null,
    },
  };
}
