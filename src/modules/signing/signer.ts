import { createHash, sign } from 'node:crypto';
import { setImmediate } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { type ContentCache, MAX_ENTRY_AGE_MS } from '../../db/content-writes.js';
import { isUniqueViolation } from '../../db/errors.js';
import type { Db } from '../../db/index.js';
import { now } from '../../domain/clock.js';
import { conflict } from '../../http/errors.js';
import { streamedParts } from '../../http/rendered.js';
import { fromRow, type KeySet, type LoadedKey, newKeyRow, readKeyFile, type SigningKeyEntry } from './keys.js';

export type { SigningKeyEntry } from './keys.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** `true`: a successful JSON answer to a method other than GET is signed too (GETs always are). */
    signed?: true;
  }
}

/** The headers of a signed answer: RFC 9530's digest of the bytes sent and RFC 9421's signatures of it. */
export type SignatureHeaders = Readonly<Record<'Content-Digest' | 'Signature-Input' | 'Signature', string>>;

/** The bytes of an answer as sent: one buffer, or parts streamed in order (a large answer). */
type Sent = Buffer | readonly Buffer[];

const DAY_MS = 24 * 60 * 60 * 1000;
const KEYS_CACHE_KEY = 'signing:keys';
/** Bytes hashed between two turns of the event loop (a large answer's digest lets other requests in). */
const DIGEST_RUN_BYTES = 4 * 1024 * 1024;
/**
 * A kept signature is made anew once this old, like the cached answers themselves (whose `signedAt`
 * renews at the same age), so that `created` is never more than an hour old when sent.
 */
const KEPT_SIGNATURE_MS = MAX_ENTRY_AGE_MS;

/** RFC 9530 `Content-Digest` (sha-256) of `sent`, hashed part by part, never joined. */
async function contentDigest(sent: Sent): Promise<string> {
  const hash = createHash('sha256');
  let run = 0;
  for (const part of Buffer.isBuffer(sent) ? [sent] : sent) {
    for (let at = 0; at < part.length; at += DIGEST_RUN_BYTES) {
      const piece = part.subarray(at, at + DIGEST_RUN_BYTES);
      hash.update(piece);
      run += piece.length;
      if (run >= DIGEST_RUN_BYTES) {
        run = 0;
        await setImmediate();
      }
    }
  }
  return `sha-256=:${hash.digest('base64')}:`;
}

/**
 * The RFC 9421 signature parameters of one key's signature, as `Signature-Input` lists them and
 * `@signature-params` repeats them (RFC 8941 inner list; a key id is hex, a string as it is).
 */
function signatureInput(key: LoadedKey, created: number): string {
  return `("content-digest");created=${created};keyid="${key.entry.keyId}";alg="ed25519"`;
}

/** The headers of an answer of digest `digest`: one signature per signing key (sig1 the active one). */
function signatureHeaders(digest: string, keys: KeySet, created: number): SignatureHeaders {
  const members = keys.signing.map((key, i) => {
    const input = signatureInput(key, created);
    // RFC 9421 §2.5: one line per covered component, then the parameters; no trailing newline.
    const base = `"content-digest": ${digest}\n"@signature-params": ${input}`;
    return { label: `sig${i + 1}`, input, signature: sign(null, Buffer.from(base), key.privateKey) };
  });
  return {
    'Content-Digest': digest,
    'Signature-Input': members.map((m) => `${m.label}=${m.input}`).join(', '),
    Signature: members.map((m) => `${m.label}=:${m.signature.toString('base64')}:`).join(', '),
  };
}

interface Kept {
  readonly keys: KeySet;
  /** Clock time (see domain/clock) of `created`. */
  readonly at: number;
  readonly headers: SignatureHeaders;
}

/**
 * Signed answers (RFC 9530 `Content-Digest`, RFC 9421 `Signature-Input` and `Signature`, Ed25519).
 * Keys live in the database (created at first start, rotated through the admin API, seen by every
 * instance through the content cache), or come from one PKCS#8 PEM file (`SIGNING_KEY_FILE`). The
 * bytes of a rendered answer, each of its encodings, are digested once and signed once per key set
 * (and again when the signature gets old), and the headers kept with them.
 */
export class Signer {
  /** The keys of `SIGNING_KEY_FILE`, made once (signatures are kept per key set, compared by identity). */
  private readonly fileKeys: KeySet | null;
  private readonly digests = new WeakMap<Sent, Promise<string>>();
  private readonly signed = new WeakMap<Sent, Kept>();

  constructor(
    private readonly db: Db,
    private readonly cache: ContentCache,
    private readonly options: { keyFile: string | null; overlapDays: number },
  ) {
    const fileKey = options.keyFile === null ? null : readKeyFile(options.keyFile);
    this.fileKeys = fileKey === null ? null : { entries: [fileKey.entry], signing: [fileKey] };
  }

  /** Creates the first key when the database has none (a twin starting at the same time may win). */
  async init(): Promise<void> {
    if (this.fileKeys) return;
    const active = await this.db
      .selectFrom('signingKeys')
      .select('id')
      .where('retiredAt', 'is', null)
      .executeTakeFirst();
    if (active) return;
    try {
      await this.db.insertInto('signingKeys').values(newKeyRow(null)).execute();
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
    }
  }

  private keys(): Promise<KeySet> {
    if (this.fileKeys) return Promise.resolve(this.fileKeys);
    return this.cache.get(KEYS_CACHE_KEY, async () => {
      const rows = await this.db.selectFrom('signingKeys').selectAll().orderBy('createdAt', 'desc').execute();
      const overlapFrom = new Date(now() - this.options.overlapDays * DAY_MS).toISOString();
      const signing = rows.filter((r) => r.retiredAt === null || r.retiredAt > overlapFrom).map(fromRow);
      return { entries: rows.map((r) => fromRow(r).entry), signing };
    });
  }

  async list(): Promise<SigningKeyEntry[]> {
    return [...(await this.keys()).entries];
  }

  /** The kept headers of `sent` when they were made under `keys` and are not old. */
  private kept(sent: Sent, keys: KeySet | undefined): SignatureHeaders | undefined {
    const kept = this.signed.get(sent);
    return kept !== undefined && kept.keys === keys && now() - kept.at < KEPT_SIGNATURE_MS ? kept.headers : undefined;
  }

  /** The headers of an answer sent as `sent` (kept with it while they are valid). */
  async headers(sent: Sent): Promise<SignatureHeaders> {
    const keys = await this.keys();
    const known = this.kept(sent, keys);
    if (known !== undefined) return known;
    let digest = this.digests.get(sent);
    if (digest === undefined) {
      digest = contentDigest(sent);
      this.digests.set(sent, digest);
    }
    const at = now();
    const headers = signatureHeaders(await digest, keys, Math.floor(at / 1000));
    this.signed.set(sent, { keys, at, headers });
    return headers;
  }

  /** A new active key endorsed by the current one, which retires and keeps signing for the overlap. */
  async rotate(): Promise<SigningKeyEntry> {
    if (this.fileKeys) throw conflict('the signing key comes from SIGNING_KEY_FILE: rotate by replacing the file');
    const row = await this.cache.commit(async (trx) => {
      const current = await trx.selectFrom('signingKeys').selectAll().where('retiredAt', 'is', null).executeTakeFirst();
      const next = newKeyRow(current ? fromRow(current) : null);
      if (current) {
        const retired = await trx
          .updateTable('signingKeys')
          .set({ retiredAt: next.createdAt })
          .where('id', '=', current.id)
          .where('retiredAt', 'is', null)
          .executeTakeFirst();
        // A concurrent rotation retired it first: this one loses rather than endorse with a stale key.
        if (retired.numUpdatedRows === 0n) throw conflict('a concurrent rotation is in progress, try again');
      }
      await trx.insertInto('signingKeys').values(next).execute();
      return next;
    });
    return fromRow(row).entry;
  }

  /**
   * Signs the scope's successful JSON answers to GET (and to routes configured `signed: true`) over
   * the bytes as sent, compressed or not; not HEAD answers, 304s or errors. Install it after
   * `installConditionalGet`, so that it sees the 304s.
   */
  install(app: FastifyInstance): void {
    // A callback hook: a kept answer's headers are added without a promise.
    app.addHook('onSend', (request, reply, payload, done) => {
      if (reply.statusCode !== 200) return done(null, payload);
      // (A HEAD request runs its GET route, which is never configured `signed`.)
      if (request.method !== 'GET' && request.routeOptions.config.signed !== true) return done(null, payload);
      const type = reply.getHeader('content-type');
      if (typeof type !== 'string' || !type.startsWith('application/json')) return done(null, payload);
      // A string is sent as its UTF-8 bytes: those are what is signed, and sent.
      const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
      const sent = Buffer.isBuffer(body) ? body : streamedParts(body);
      if (sent === undefined) return done(null, payload);
      const known = this.kept(sent, this.fileKeys ?? this.cache.peek<KeySet>(KEYS_CACHE_KEY));
      if (known !== undefined) {
        reply.headers(known);
        return done(null, body);
      }
      this.headers(sent).then(
        (headers) => {
          reply.headers(headers);
          done(null, body);
        },
        (err: Error) => done(err),
      );
    });
  }
}
