import { createHash, createPublicKey } from 'node:crypto';
import { createVerifier, httpbis } from 'http-message-signatures';
import type { IncomingHttpHeaders } from 'node:http';
import { type SentRequest, type SigningKey, verifyAnswer } from '../../docs/examples/verify.js';
import { now } from '../../src/domain/clock.js';

/** The part of an answer a launcher reads: its status, its headers and its bytes as received, and its request. */
export interface Answer {
  statusCode: number;
  headers: Record<string, string | string[] | number | undefined>;
  rawPayload: Buffer;
  /** The request the answer answers (light-my-request keeps it). */
  raw: { req: { url?: string; method?: string; headers: IncomingHttpHeaders } };
}

/**
 * The request an injected answer answers, as a launcher that sent it knows it: `base` is the URL
 * it reaches the service at (`PUBLIC_BASE_URL`, whose path a proxy removes before the service).
 */
export function requestOf(answer: Pick<Answer, 'raw'>, base = 'http://localhost'): SentRequest {
  const { url = '/', method, headers } = answer.raw.req;
  const digest = headers['content-digest'];
  return {
    method: method === 'POST' ? 'POST' : 'GET',
    url: new URL(`${base.replace(/\/+$/, '')}${url}`),
    ...(typeof digest === 'string' ? { contentDigest: digest } : {}),
  };
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
export function verified(answer: Answer, pinned: readonly SigningKey[], base?: string): boolean {
  return verifyAnswer(answer.rawPayload, headersOf(answer), requestOf(answer, base), pinned, now());
}

/** `sha-256=:…:` of bytes (RFC 9530), computed here without the service's code. */
export function digestHeaderOf(bytes: Buffer): string {
  return `sha-256=:${createHash('sha256').update(bytes).digest('base64')}:`;
}

/**
 * Whether an independent RFC 9421 implementation (the `http-message-signatures` package) verifies
 * the answer's member signed by `key` over the base it builds from the answer and its request
 * (`;req` components: RFC 9421 §2.4): covering content-digest and the request's `@path`, with
 * created, expires, keyid and alg, less than an hour old and not expired. The library checks the
 * signature over the `Content-Digest` header; the digest itself is checked against the bytes by the
 * callers (`digestHeaderOf`).
 */
export async function libraryVerifies(answer: Answer, key: SigningKey, base?: string): Promise<boolean> {
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
      requiredFields: ['content-digest', '@path'],
      requiredParams: ['created', 'expires', 'keyid', 'alg'],
      maxAge: 3600,
      notAfter: Math.floor(now() / 1000),
    },
    { status: answer.statusCode, headers },
    {
      method: answer.raw.req.method ?? 'GET',
      url: requestOf(answer, base).url.toString(),
      headers: Object.fromEntries(Object.entries(answer.raw.req.headers).map(([n, v]) => [n, String(v)])),
    },
  );
  return result === true;
}
