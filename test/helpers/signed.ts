import { createHash, createPublicKey } from 'node:crypto';
import { createVerifier, httpbis } from 'http-message-signatures';
import { type SigningKey, verifyAnswer } from '../../docs/examples/verify.js';
import { now } from '../../src/domain/clock.js';

/** The part of an answer a launcher reads: its status, its headers and its bytes as received. */
export interface Answer {
  statusCode: number;
  headers: Record<string, string | string[] | number | undefined>;
  rawPayload: Buffer;
}

/** The three headers of a signed answer, by their lower-case names. */
export const SIGNATURE_HEADERS = ['content-digest', 'signature-input', 'signature'] as const;

/** An answer's headers as fetch's `Headers`, what docs/examples/verify.ts reads. */
export function headersOf(answer: Pick<Answer, 'headers'>): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(answer.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : String(value));
  }
  return headers;
}

/** docs/examples/verify.ts on an answer's bytes as received, at the service's clock time. */
export function verified(answer: Answer, pinned: readonly SigningKey[]): boolean {
  return verifyAnswer(answer.rawPayload, headersOf(answer), pinned, now());
}

/** `sha-256=:…:` of bytes (RFC 9530), computed here without the service's code. */
export function digestHeaderOf(bytes: Buffer): string {
  return `sha-256=:${createHash('sha256').update(bytes).digest('base64')}:`;
}

/**
 * Whether an independent RFC 9421 implementation (the `http-message-signatures` package) verifies
 * the answer's member signed by `key`: covering content-digest, with created, keyid and alg, less
 * than an hour old. The library checks the signature over the `Content-Digest` header; the digest
 * itself is checked against the bytes by the callers (`digestHeaderOf`).
 */
export async function libraryVerifies(answer: Answer, key: SigningKey): Promise<boolean> {
  const publicKey = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey, 'base64').toString('base64url') },
    format: 'jwk',
  });
  const headers = Object.fromEntries(Object.entries(answer.headers).map(([n, v]) => [n, String(v)]));
  const result = await httpbis.verifyMessage(
    {
      // Only this key is known: the result is that of its member (members of unknown keys are skipped).
      keyLookup: async ({ keyid }) =>
        keyid === key.keyId ? { id: key.keyId, algs: ['ed25519'], verify: createVerifier(publicKey, 'ed25519') } : null,
      requiredFields: ['content-digest'],
      requiredParams: ['created', 'keyid', 'alg'],
      maxAge: 3600,
      notAfter: Math.floor(now() / 1000),
    },
    { status: answer.statusCode, headers },
  );
  return result === true;
}
