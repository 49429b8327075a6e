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

/** The members of a Signature-Input or Signature header (this service's: no commas inside one). */
function members(header: string | null): Map<string, string> {
  const pairs = (header ?? '').split(',').map((m) => /^\s*([^=\s]+)=(.*?)\s*$/.exec(m));
  return new Map(pairs.flatMap((m) => (m ? [[m[1]!, m[2]!] as const] : [])));
}

/** The component identifiers a Signature-Input member covers, as written (`"@path";req`, …). */
export function coveredComponents(input: string): string[] {
  return (/^\(([^)]*)\)/.exec(input)?.[1] ?? '').match(/"[^"]+"(?:;[a-z]+(?:="[^"]*")?)*/g) ?? [];
}

/** RFC 9421 §2.5: a line per covered component (its value from `valueOf`), then the parameters. */
export function signatureBase(input: string, valueOf: (component: string) => string): string {
  return [...coveredComponents(input).map((c) => `${c}: ${valueOf(c)}`), `"@signature-params": ${input}`].join('\n');
}

/** The Signature-Input members (parameters) whose Ed25519 signature a pinned key verifies. */
export function verifiedInputs(headers: Headers, valueOf: (c: string) => string, pinned: readonly SigningKey[]) {
  const signatures = members(headers.get('signature'));
  return [...members(headers.get('signature-input'))].flatMap(([label, input]) => {
    const key = pinned.find((k) => input.includes(`;keyid="${k.keyId}"`));
    const signature = Buffer.from(/^:(.*):$/.exec(signatures.get(label) ?? '')?.[1] ?? '', 'base64');
    const base = Buffer.from(signatureBase(input, valueOf));
    return key && verify(null, base, ed25519(key.publicKey), signature) ? [input] : [];
  });
}

/** The request a launcher sent: its method (GET by default), URL, and a POST body's `Content-Digest`. */
export interface SentRequest {
  method?: 'GET' | 'POST';
  url: URL;
  contentDigest?: string;
}

/** The components an answer to `request` must cover (the table of "Signed answers"), with their values. */
export function requestComponents(request: SentRequest): Map<string, string> {
  const { pathname, search, searchParams } = request.url;
  // RFC 9421 §2.2.8: the decoded value percent-encoded again (form-urlencoded set, space as %20).
  const param = (name: string) =>
    encodeURIComponent(searchParams.get(name) ?? '').replace(
      /[!'()~]/g,
      (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
    );
  const covered = new Map([['"@path";req', pathname]]);
  if (request.method === 'POST') {
    if (request.contentDigest !== undefined) covered.set('"content-digest";req', request.contentDigest);
  } else if (pathname.endsWith('/api/software/check-update')) {
    covered.set('"@query-param";name="slug";req', param('slug'));
    covered.set('"@query-param";name="versionCode";req', param('versionCode'));
  } else covered.set('"@query";req', search || '?');
  return covered;
}

/**
 * True when `body` (the bytes as received, before any decoding) is the answer to `request`: its
 * digest, and a member by a pinned key that covers every component of `request`, not expired.
 */
export function verifyAnswer(
  body: Uint8Array,
  headers: Headers,
  request: SentRequest,
  pinned: readonly SigningKey[],
  now = Date.now(),
) {
  const digest = `sha-256=:${createHash('sha256').update(body).digest('base64')}:`;
  if (headers.get('content-digest') !== digest) return false;
  const values = new Map([['"content-digest"', digest], ...requestComponents(request)]);
  return verifiedInputs(headers, (c) => values.get(c) ?? '', pinned).some((input) => {
    const covered = coveredComponents(input);
    const created = Number(/;created=(\d+)/.exec(input)?.[1]);
    const expires = Number(/;expires=(\d+)/.exec(input)?.[1]);
    return [...values.keys()].every((c) => covered.includes(c)) && created <= now / 1000 + 60 && now / 1000 < expires;
  });
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
