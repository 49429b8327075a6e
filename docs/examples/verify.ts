import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto';

/** A key as `GET /api/signing-keys` lists it (only the fields a launcher needs). */
export interface SigningKey {
  keyId: string;
  publicKey: string; // base64 of the raw 32-byte Ed25519 public key
  endorsement: { keyId: string; signature: string } | null;
}

function ed25519(rawBase64: string): KeyObject {
  const x = Buffer.from(rawBase64, 'base64').toString('base64url');
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' });
}

/** True when one entry of `X-Signature` is a valid signature of the exact body bytes by a pinned key. */
export function verifyAnswer(body: Uint8Array, header: string | null, pinned: readonly SigningKey[]): boolean {
  for (const entry of (header ?? '').split(', ')) {
    const match = /^keyId=([^;]+);sig=(.+)$/.exec(entry.trim());
    const key = pinned.find((k) => k.keyId === match?.[1]);
    if (match && key && verify(null, body, ed25519(key.publicKey), Buffer.from(match[2]!, 'base64'))) return true;
  }
  return false;
}

/** True when a downloaded file has the `sha256` that the verified answer named. */
export function fileMatches(file: Uint8Array, sha256: string): boolean {
  return createHash('sha256').update(file).digest('hex') === sha256.toLowerCase();
}

/** After a rotation: the pinned keys plus every listed key endorsed by one of them. */
export function followRotation(pinned: readonly SigningKey[], listed: readonly SigningKey[]): SigningKey[] {
  const trusted = [...pinned];
  for (const key of [...listed].reverse()) {
    const endorser = trusted.find((k) => k.keyId === key.endorsement?.keyId);
    const raw = Buffer.from(key.publicKey, 'base64');
    const signature = Buffer.from(key.endorsement?.signature ?? '', 'base64');
    const endorsed = endorser !== undefined && verify(null, raw, ed25519(endorser.publicKey), signature);
    if (endorsed && !trusted.some((k) => k.keyId === key.keyId)) trusted.push(key);
  }
  return trusted;
}
