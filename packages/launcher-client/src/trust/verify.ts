/**
 * Verification, in one place and one order: an answer's digest, then its signature over the base
 * built from the request the client sent, then its time; a file's size, then its hash, then any
 * further checks. Every answer the client uses and every file it keeps passes through here first.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import { ClockError, DigestError, IntegrityError, SignatureError, StaleAnswerError } from '../errors.js';
import { integerParam, signatureBase, signatureCandidates, stringParam, verifyEd25519 } from './http-signature.js';
import type { StateFolder } from '../disk/state.js';
import { isInnerList, parseDictionary, StructuredFieldError } from './structured-fields.js';
import type { KeyRing } from './keys.js';

/** A request as the client sent it: what a signed answer to it must cover. */
export interface SentRequest {
  readonly url: URL;
  /** RFC 9530 `Content-Digest` of the body sent (a POST: covered instead of the query), else null. */
  readonly contentDigest: string | null;
  /** The query parameters covered one by one (check-update: slug, versionCode); null: the whole query. */
  readonly coveredParams: readonly string[] | null;
}

/** An answer as received: its request, its headers and the exact bytes of its body (no content coding undone). */
export interface ReceivedAnswer {
  readonly request: SentRequest;
  readonly headers: Headers;
  readonly body: Buffer;
}

export interface AnswerPolicy {
  readonly keys: KeyRing;
  readonly replay: ReplayMemory;
  /** Fetches the service's key list and adopts endorsed keys (called once when no signer is trusted). */
  readonly refreshKeys: () => Promise<void>;
  /** This computer's clock, in epoch ms. */
  readonly now: () => number;
}

/** What a verified answer was signed with. */
export interface AnswerSignature {
  readonly keyId: string;
  /** Unix seconds. */
  readonly created: number;
  readonly expires: number;
}

/** How far the launcher's clock may be from the service's: `created` this far ahead, `expires` this far past. */
export const CLOCK_SKEW_SECONDS = 300;

/** The RFC 9421 §2.2.8 value of a query parameter: decoded, then percent-encoded (form set, space as %20). */
function queryParamValue(decoded: string): string {
  return encodeURIComponent(decoded).replace(/[!'()~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * The components of the request a member must cover (the specification's "Signed answers" table),
 * by serialized identifier, with their values as the client sent them (RFC 9421 §2.2, §2.4).
 */
export function requestComponents(request: SentRequest): Map<string, string> {
  const { url } = request;
  const covered = new Map([['"@path";req', url.pathname]]);
  if (request.contentDigest !== null) covered.set('"content-digest";req', request.contentDigest);
  else if (request.coveredParams === null) covered.set('"@query";req', url.search === '' ? '?' : url.search);
  for (const name of request.coveredParams ?? []) {
    const value = url.searchParams.get(name);
    if (value !== null) covered.set(`"@query-param";name="${name}";req`, queryParamValue(value));
  }
  return covered;
}

/** 1. `Content-Digest` (RFC 9530) is the SHA-256 of the bytes received. */
function checkDigest(answer: ReceivedAnswer): void {
  const encoding = answer.headers.get('content-encoding');
  if (encoding !== null && encoding.trim().toLowerCase() !== 'identity') {
    throw new DigestError(`the answer came ${encoding}-encoded: its digest cannot be checked on the decoded bytes`);
  }
  const header = answer.headers.get('content-digest');
  if (header === null) throw new DigestError('the answer carries no Content-Digest');
  let digest;
  try {
    digest = parseDictionary(header).get('sha-256');
  } catch (err) {
    if (err instanceof StructuredFieldError) throw new DigestError(`malformed Content-Digest: ${err.message}`);
    throw err;
  }
  if (digest === undefined || isInnerList(digest) || digest.value.type !== 'bytes') {
    throw new DigestError('Content-Digest has no sha-256 byte sequence');
  }
  const actual = createHash('sha256').update(answer.body).digest();
  const expected = digest.value.value;
  if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) {
    throw new DigestError('Content-Digest is not the SHA-256 of the body');
  }
}

/**
 * 2. An RFC 9421 Ed25519 signature by a trusted key over the answer's `content-digest` and every
 * component of the request the client sent; a member that covers less is no member.
 */
async function checkSignature(answer: ReceivedAnswer, policy: AnswerPolicy): Promise<AnswerSignature> {
  const values = new Map([
    ['"content-digest"', answer.headers.get('content-digest')],
    ...requestComponents(answer.request),
  ]);
  const candidates = signatureCandidates(answer.headers.get('signature-input'), answer.headers.get('signature'))
    .filter((c) => [...values.keys()].every((component) => c.components.includes(component)))
    .filter((c) => stringParam(c.params, 'alg') === 'ed25519')
    .flatMap((c) => {
      const keyId = stringParam(c.params, 'keyid');
      const created = integerParam(c.params, 'created');
      const expires = integerParam(c.params, 'expires');
      return keyId === undefined || created === undefined || expires === undefined
        ? []
        : [{ ...c, keyId, created, expires }];
    });
  if (candidates.length === 0) {
    throw new SignatureError(`no ed25519 signature with created and expires covering ${[...values.keys()].join(' ')}`);
  }
  const trusted = async () => {
    const found = [];
    for (const c of candidates) {
      const key = await policy.keys.get(c.keyId);
      if (key !== undefined) found.push({ ...c, key });
    }
    return found;
  };
  let usable = await trusted();
  if (usable.length === 0) {
    await policy.refreshKeys();
    usable = await trusted();
  }
  if (usable.length === 0) {
    throw new SignatureError(`signed by no trusted key (${candidates.map((c) => c.keyId).join(', ')})`);
  }
  for (const c of usable) {
    const base = signatureBase(c.components, (component) => values.get(component) ?? null, c.signatureParams);
    if (verifyEd25519(c.key, base, c.signature)) return { keyId: c.keyId, created: c.created, expires: c.expires };
  }
  throw new SignatureError(
    `the signature by ${usable.map((c) => c.keyId).join(', ')} does not verify as the answer to ${answer.request.url.pathname}`,
  );
}

/**
 * 3. Not expired, not made in the future (within the clock skew), and not expired before an answer
 * already accepted was signed. An answer refused for the first two alone whose own `Date` falls
 * between its `created` and `expires`, within the same skew (the server holds it fresh), is a
 * `ClockError`: this computer's clock is off by the offset measured against that `Date`.
 */
async function checkTime(answer: ReceivedAnswer, signed: AnswerSignature, policy: AnswerPolicy): Promise<void> {
  const now = policy.now();
  const nowSeconds = Math.floor(now / 1000);
  const refusal =
    signed.expires + CLOCK_SKEW_SECONDS <= nowSeconds
      ? `the answer's signature expired at ${signed.expires}`
      : signed.created - CLOCK_SKEW_SECONDS > nowSeconds
        ? `the answer was signed at ${signed.created}, in the future`
        : null;
  if (refusal === null) return policy.replay.accept(signed);
  await policy.replay.check(signed);
  // The Date is whole seconds and a busy server's lags its clock by a moment (Node renews it once a
  // second on its event loop): compared with the signature's times within the same skew allowance.
  const served = Date.parse(answer.headers.get('date') ?? '');
  const skewMs = CLOCK_SKEW_SECONDS * 1000;
  if (served >= signed.created * 1000 - skewMs && served <= signed.expires * 1000 + skewMs) {
    throw new ClockError(now - served, { cause: new StaleAnswerError(refusal) });
  }
  throw new StaleAnswerError(refusal);
}

/** Verifies an answer before anything in it is used; a failure is a typed error. */
export async function verifyAnswer(answer: ReceivedAnswer, policy: AnswerPolicy): Promise<AnswerSignature> {
  checkDigest(answer);
  const signed = await checkSignature(answer, policy);
  await checkTime(answer, signed, policy);
  return signed;
}

/**
 * The newest `created` of any answer accepted, kept in the state folder's `answers.json`: a lower
 * bound on the time that a device clock set back cannot move. An answer whose signature expired
 * before it is refused even when the device's clock says it has not. It never refuses a genuine
 * answer from another instance: every genuine answer expires at least an hour after it was signed,
 * later than anything signed before it was sent. (Older answers to the same request are not
 * refused: several instances sign independently, and the binding to the request and `expires`
 * already bound what a replay can do; see "What a launcher checks".)
 */
export class ReplayMemory {
  private newest: Promise<number> | null = null;

  constructor(private readonly state: StateFolder) {}

  /**
   * Refuses (`StaleAnswerError`) an answer whose signature expired before an accepted answer was
   * signed; else answers the newest `created` kept.
   */
  async check(signed: AnswerSignature): Promise<number> {
    // (An earlier version kept the newest per URL: the largest of those is the same bound.)
    this.newest ??= this.state
      .readJson<Record<string, number>>('answers.json', {})
      .then((kept) => Math.max(0, ...Object.values(kept).filter(Number.isFinite)));
    const newest = await this.newest;
    if (signed.expires <= newest) {
      throw new StaleAnswerError(
        `replayed answer: its signature expired at ${signed.expires}, before an accepted answer was signed (${newest})`,
      );
    }
    return newest;
  }

  /** `check`, then the answer's `created` kept when it is the newest. */
  async accept(signed: AnswerSignature): Promise<void> {
    const newest = await this.check(signed);
    if (signed.created <= newest) return;
    this.newest = Promise.resolve(signed.created);
    await this.state.writeJson('answers.json', { newestCreated: signed.created });
  }
}

/** What a downloaded file must be, from a verified answer. */
export interface ExpectedFile {
  readonly fileSize: number;
  readonly sha256: string;
}

/** A file that passed the size and hash checks, handed to further checks. */
export interface CheckedFile {
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
}

/** A further check of a downloaded file (a publisher signature, …): throws to refuse it. */
export type FileCheck = (file: CheckedFile) => Promise<void>;

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** 4. The file's size, then its SHA-256, then each further check. */
export async function verifyFile(
  file: string,
  expected: ExpectedFile,
  checks: readonly FileCheck[] = [],
): Promise<void> {
  const size = (await fs.promises.stat(file)).size;
  if (size !== expected.fileSize) {
    throw new IntegrityError(`the download is ${size} bytes, the answer says ${expected.fileSize}`);
  }
  const sha256 = await sha256Of(file);
  if (sha256 !== expected.sha256.toLowerCase()) {
    throw new IntegrityError(`the download's SHA-256 is ${sha256}, the answer says ${expected.sha256}`);
  }
  for (const check of checks) await check({ path: file, size, sha256 });
}
