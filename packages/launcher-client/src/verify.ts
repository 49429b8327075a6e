/**
 * Verification, in one place and one order: an answer's digest, then its signature, then its age and
 * replay; a file's size, then its hash, then any further checks. Every answer the client uses and
 * every file it keeps passes through here first.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import { DigestError, IntegrityError, SignatureError, StaleAnswerError } from './errors.js';
import { integerParam, signatureBase, signatureCandidates, stringParam, verifyEd25519 } from './http-signature.js';
import type { StateFolder } from './state.js';
import { isInnerList, parseDictionary, StructuredFieldError } from './structured-fields.js';
import type { KeyRing } from './trust.js';

/** An answer as received: its headers and the exact bytes of its body (no content coding undone). */
export interface ReceivedAnswer {
  readonly url: string;
  readonly headers: Headers;
  readonly body: Buffer;
}

export interface AnswerPolicy {
  readonly keys: KeyRing;
  readonly replay: ReplayMemory;
  /** Oldest acceptable `created`, in seconds before now (the service signs within the hour). */
  readonly maxAgeSeconds: number;
  /** Fetches the service's key list and adopts endorsed keys (called once when no signer is trusted). */
  readonly refreshKeys: () => Promise<void>;
}

/** What a verified answer was signed with. */
export interface AnswerSignature {
  readonly keyId: string;
  /** Unix seconds. */
  readonly created: number;
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

/** 2. An RFC 9421 Ed25519 signature by a trusted key over exactly `("content-digest")`. */
async function checkSignature(answer: ReceivedAnswer, policy: AnswerPolicy): Promise<AnswerSignature> {
  const candidates = signatureCandidates(answer.headers.get('signature-input'), answer.headers.get('signature'))
    .filter((c) => c.components.length === 1 && c.components[0] === 'content-digest')
    .filter((c) => stringParam(c.params, 'alg') === 'ed25519')
    .flatMap((c) => {
      const keyId = stringParam(c.params, 'keyid');
      const created = integerParam(c.params, 'created');
      return keyId === undefined || created === undefined ? [] : [{ ...c, keyId, created }];
    });
  if (candidates.length === 0) throw new SignatureError('no ed25519 signature over content-digest');
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
  const valueOf = (name: string) => (name === 'content-digest' ? answer.headers.get('content-digest') : null);
  for (const c of usable) {
    if (verifyEd25519(c.key, signatureBase(c.components, valueOf, c.signatureParams), c.signature)) {
      return { keyId: c.keyId, created: c.created };
    }
  }
  throw new SignatureError(`the signature by ${usable.map((c) => c.keyId).join(', ')} does not verify`);
}

/** 3. Signed within `maxAgeSeconds`, and not before the newest answer of the same URL accepted. */
async function checkFreshness(answer: ReceivedAnswer, signed: AnswerSignature, policy: AnswerPolicy): Promise<void> {
  const nowSeconds = Math.floor(Date.now() / 1000);
  if (Math.abs(nowSeconds - signed.created) > policy.maxAgeSeconds) {
    throw new StaleAnswerError(
      `the answer was signed at ${signed.created}, more than ${policy.maxAgeSeconds} s from now`,
    );
  }
  await policy.replay.accept(answer.url, signed.created);
}

/** Verifies an answer before anything in it is used; a failure is a typed error. */
export async function verifyAnswer(answer: ReceivedAnswer, policy: AnswerPolicy): Promise<AnswerSignature> {
  checkDigest(answer);
  const signed = await checkSignature(answer, policy);
  await checkFreshness(answer, signed, policy);
  return signed;
}

/**
 * The newest `created` accepted per URL, kept in the state folder's `answers.json`; an answer signed
 * before it is a replay. Entries older than the age limit are dropped (the age check refuses those).
 */
export class ReplayMemory {
  private newest: Promise<Record<string, number>> | null = null;

  constructor(
    private readonly state: StateFolder,
    private readonly maxAgeSeconds: number,
  ) {}

  async accept(url: string, created: number): Promise<void> {
    this.newest ??= this.state.readJson<Record<string, number>>('answers.json', {});
    const newest = await this.newest;
    const seen = newest[url];
    if (seen !== undefined && created < seen) {
      throw new StaleAnswerError(`replayed answer: signed at ${created}, before the accepted one of ${seen}`);
    }
    if (seen === created) return;
    newest[url] = created;
    const horizon = Math.floor(Date.now() / 1000) - this.maxAgeSeconds;
    for (const [key, at] of Object.entries(newest)) if (at < horizon) delete newest[key];
    await this.state.writeJson('answers.json', newest);
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
