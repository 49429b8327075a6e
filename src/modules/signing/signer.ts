import { createHash, sign, timingSafeEqual } from 'node:crypto';
import { Transform } from 'node:stream';
import { setImmediate } from 'node:timers/promises';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { isInnerList, type Item, parseDictionary, serializeItem } from 'structured-headers';
import { type ContentCache, MAX_ENTRY_AGE_MS } from '../../db/content-writes.js';
import { isUniqueViolation } from '../../db/errors.js';
import type { Db } from '../../db/index.js';
import { now } from '../../domain/clock.js';
import { badRequest, conflict } from '../../http/errors.js';
import { streamedParts } from '../../http/rendered.js';
import { fromRow, type KeySet, newKeyRow, readKeyFile, type SigningKeyEntry } from './keys.js';

export type { SigningKeyEntry } from './keys.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** `true`: a successful JSON answer to a method other than GET is signed too (GETs always are). */
    signed?: true;
    /**
     * The query parameters a signed answer covers (`"@query-param";name=…;req`), for an answer shared
     * by requests whose other parameters differ (check-update); without it the whole `"@query";req`.
     */
    signedQueryParams?: readonly string[];
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

/** An RFC 9421 component identifier of the related request (§2.4: `;req`), serialized. */
function requestComponent(name: string, queryParam?: string): string {
  const params = new Map<string, string | boolean>(queryParam === undefined ? [] : [['name', queryParam]]);
  params.set('req', true);
  return serializeItem([name, params] satisfies Item);
}

const PATH = requestComponent('@path');
const QUERY = requestComponent('@query');
const REQUEST_DIGEST = requestComponent('content-digest');
/** `"@query-param";name="<name>";req` per parameter name (the routes name a few, made once each). */
const queryParamComponents = new Map<string, string>();

/**
 * RFC 9421 §2.2.8: a query parameter's value decoded (form-urlencoded), then percent-encoded with
 * the form-urlencoded percent-encode set (`encodeURIComponent` leaves `!'()~` as they are).
 */
function queryParamValue(decoded: string): string {
  return encodeURIComponent(decoded).replace(/[!'()~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** A request's `Content-Digest` as RFC 9421 §2.1 reads a field: its lines joined by ", ", trimmed. */
function requestDigestHeader(request: FastifyRequest): string | undefined {
  const header = request.headers['content-digest'];
  return header === undefined ? undefined : (Array.isArray(header) ? header.join(', ') : header).trim();
}

/**
 * The lines of the signature base (RFC 9421 §2.5) for the related request's components a member
 * covers (see "Signed answers": `@path`, then a GET's `@query` or the route's named query
 * parameters, or a POST's own `Content-Digest`), as `[identifier, value]` pairs. `prefix`: `PUBLIC_BASE_URL`'s path.
 */
function coveredOf(request: FastifyRequest, prefix: string): [string, string][] {
  const { url } = request;
  const at = url.indexOf('?');
  const rawPath = at === -1 ? url : url.slice(0, at);
  const rawQuery = at === -1 ? '' : url.slice(at + 1);
  const covered: [string, string][] = [[PATH, prefix + rawPath]];
  const names = request.routeOptions.config.signedQueryParams;
  if (request.method !== 'GET') {
    // A signed POST: its own Content-Digest (below), not its query.
  } else if (names === undefined) {
    covered.push([QUERY, `?${rawQuery}`]);
  } else {
    // The query as the route parsed it (decoded), not parsed again on this hot path.
    const query = request.query as Record<string, unknown>;
    for (const name of names) {
      const value = query[name];
      // §2.2.8: a parameter given more than once is not covered (such a request is refused anyway).
      if (typeof value !== 'string') continue;
      let component = queryParamComponents.get(name);
      if (component === undefined) {
        component = requestComponent('@query-param', name);
        queryParamComponents.set(name, component);
      }
      covered.push([component, queryParamValue(value)]);
    }
  }
  const digest = requestDigestHeader(request);
  if (request.method !== 'GET' && digest !== undefined) covered.push([REQUEST_DIGEST, digest]);
  return covered;
}

/** The covered values' lines of the signature base: what a kept signature is kept by. */
function linesOf(covered: readonly [string, string][]): string {
  return covered.map(([id, value]) => `${id}: ${value}`).join('\n');
}

/** How long a signature is valid (`expires` − `created`, as the specification says). */
const SIGNATURE_LIFETIME_S = 3600;

/** The headers of an answer of digest `digest` to a request of `covered` values: one member per signing key (sig1 the active one). */
function signatureHeaders(
  digest: string,
  covered: readonly [string, string][],
  keys: KeySet,
  created: number,
): SignatureHeaders {
  const components = `("content-digest" ${covered.map(([id]) => id).join(' ')})`;
  // RFC 9421 §2.5: one line per covered component, then the parameters; no trailing newline.
  const lines = `"content-digest": ${digest}\n${linesOf(covered)}`;
  const members = keys.signing.map((key, i) => {
    // RFC 8941 inner list with its parameters, in the specification's order (a key id is hex).
    const input = `${components};created=${created};expires=${created + SIGNATURE_LIFETIME_S};keyid="${key.entry.keyId}";alg="ed25519"`;
    const base = `${lines}\n"@signature-params": ${input}`;
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
 * Signatures kept per answer, one per set of covered request values (check-update: per slug and
 * versionCode; other answers: per path and query): an answer asked for with endless distinct
 * queries keeps only the newest this many, and signs anew for an evicted one.
 */
const KEPT_PER_ANSWER = 128;

/**
 * The SHA-256 a request's `Content-Digest` (RFC 9530) names; a malformed header, or one without
 * sha-256, is a 400.
 */
function requestDigest(header: string): Buffer {
  let dictionary;
  try {
    dictionary = parseDictionary(header);
  } catch {
    throw badRequest('headers.content-digest: must be an RFC 9530 Content-Digest');
  }
  const member = dictionary.get('sha-256');
  if (member === undefined || isInnerList(member) || !(member[0] instanceof ArrayBuffer)) {
    throw badRequest('headers.content-digest: must carry a sha-256 byte sequence');
  }
  return Buffer.from(member[0]);
}

/**
 * The request body passed through as received, hashed on the way: at its end, a SHA-256 that is
 * not `expected` fails the body with a 400.
 */
function digestChecked(expected: Buffer): Transform {
  const hash = createHash('sha256');
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      hash.update(chunk);
      callback(null, chunk);
    },
    flush(callback) {
      const actual = hash.digest();
      const matches = actual.length === expected.length && timingSafeEqual(actual, expected);
      callback(matches ? null : badRequest('headers.content-digest: is not the SHA-256 of the body received'));
    },
  });
}

/**
 * Signed answers (RFC 9530 `Content-Digest`, RFC 9421 `Signature-Input` and `Signature`, Ed25519),
 * each member covering the answer and the request it answers (see `coveredOf`). Keys live in the
 * database (created at first start, rotated through the admin API, seen by every instance through
 * the content cache), or come from one PKCS#8 PEM file (`SIGNING_KEY_FILE`). The bytes of a rendered
 * answer, each of its encodings, are digested once, and signed once per key set and set of covered
 * request values (and again when the signature gets old), the headers kept with them: never per device.
 */
export class Signer {
  /** The keys of `SIGNING_KEY_FILE`, made once (signatures are kept per key set, compared by identity). */
  private readonly fileKeys: KeySet | null;
  /** `PUBLIC_BASE_URL`'s path ('' without one): `@path` is the path the launcher requested. */
  private readonly pathPrefix: string;
  private readonly digests = new WeakMap<Sent, Promise<string>>();
  /** Per answer sent: its kept signatures by the base lines of the request values they cover. */
  private readonly signed = new WeakMap<Sent, Map<string, Kept>>();

  constructor(
    private readonly db: Db,
    private readonly cache: ContentCache,
    private readonly options: { keyFile: string | null; overlapDays: number; publicBaseUrl: string | null },
  ) {
    const fileKey = options.keyFile === null ? null : readKeyFile(options.keyFile);
    this.fileKeys = fileKey === null ? null : { entries: [fileKey.entry], signing: [fileKey] };
    this.pathPrefix = options.publicBaseUrl === null ? '' : new URL(options.publicBaseUrl).pathname.replace(/\/+$/, '');
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

  /** The kept headers of `sent` for the request values `lines` when they were made under `keys` and are not old. */
  private kept(sent: Sent, lines: string, keys: KeySet | undefined): SignatureHeaders | undefined {
    const kept = this.signed.get(sent)?.get(lines);
    return kept !== undefined && kept.keys === keys && now() - kept.at < KEPT_SIGNATURE_MS ? kept.headers : undefined;
  }

  /** The headers of an answer sent as `sent` to a request of `covered` values (kept while they are valid). */
  async headers(sent: Sent, covered: readonly [string, string][]): Promise<SignatureHeaders> {
    const keys = await this.keys();
    const lines = linesOf(covered);
    const known = this.kept(sent, lines, keys);
    if (known !== undefined) return known;
    let digest = this.digests.get(sent);
    if (digest === undefined) {
      digest = contentDigest(sent);
      this.digests.set(sent, digest);
    }
    const at = now();
    const headers = signatureHeaders(await digest, covered, keys, Math.floor(at / 1000));
    let kept = this.signed.get(sent);
    if (kept === undefined) {
      kept = new Map();
      this.signed.set(sent, kept);
    }
    kept.delete(lines);
    kept.set(lines, { keys, at, headers });
    // The oldest made first goes first (a Map iterates in insertion order).
    if (kept.size > KEPT_PER_ANSWER) kept.delete(kept.keys().next().value as string);
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
   * the bytes as sent, compressed or not, and the request they answer; not HEAD answers, 304s or
   * errors. Install it after `installConditionalGet`, so that it sees the 304s. A request to a route
   * configured `signed: true` that carries a `Content-Digest` is answered 400 when its body is not
   * what the digest says (the answer's members cover that digest).
   */
  install(app: FastifyInstance): void {
    app.addHook('preParsing', (request, _reply, payload, done) => {
      const header = requestDigestHeader(request);
      if (request.routeOptions.config.signed !== true || header === undefined) return done(null, payload);
      try {
        done(null, payload.pipe(digestChecked(requestDigest(header))));
      } catch (err) {
        done(err as Error);
      }
    });
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
      const covered = coveredOf(request, this.pathPrefix);
      const known = this.kept(sent, linesOf(covered), this.fileKeys ?? this.cache.peek<KeySet>(KEYS_CACHE_KEY));
      if (known !== undefined) {
        reply.headers(known);
        return done(null, body);
      }
      this.headers(sent, covered).then(
        (headers) => {
          reply.headers(headers);
          done(null, body);
        },
        (err: Error) => done(err),
      );
    });
  }
}
