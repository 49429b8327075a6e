import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import fs from 'node:fs';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import type { ContentCache } from './cache.js';
import { ConfigError } from './config.js';
import { isUniqueViolation } from './db/errors.js';
import type { Db } from './db/index.js';
import type { SigningKeyRow } from './db/schema.js';
import { now, nowIso } from './domain/clock.js';
import { conflict } from './http/errors.js';
import { identityBody } from './http/rendered.js';
import { signParts } from './sign-parts.js';

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

interface LoadedKey {
  readonly entry: SigningKeyEntry;
  readonly privateKey: KeyObject;
}

/** The keys of one content version: every listed key, and those that sign (active first). */
interface KeySet {
  readonly entries: readonly SigningKeyEntry[];
  readonly signing: readonly LoadedKey[];
}

const DAY_MS = 24 * 60 * 60 * 1000;
const KEYS_CACHE_KEY = 'signing:keys';

/**
 * Bodies at least this large are signed in libuv's thread pool: Ed25519 hashes the whole body
 * twice, which would hold the event loop for milliseconds (large answers in parts: `signParts`).
 */
const SIGN_OFF_LOOP_BYTES = 1024 * 1024;
const signAsync = promisify(sign);

function rawPublicKey(privateKey: KeyObject): Buffer {
  const jwk = createPublicKey(privateKey).export({ format: 'jwk' });
  return Buffer.from(jwk.x ?? '', 'base64url');
}

/** A key's id: the first 16 hex digits of SHA-256 over its raw public key, the same wherever it is listed. */
export function keyIdOf(rawPublic: Buffer): string {
  return createHash('sha256').update(rawPublic).digest('hex').slice(0, 16);
}

function fromRow(row: SigningKeyRow): LoadedKey {
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

function newKeyRow(endorser: LoadedKey | null): SigningKeyRow {
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

/**
 * Ed25519 signatures of public answers (`X-Signature`). Keys live in the database (created at first
 * start, rotated through the admin API, seen by every instance through the content cache), or come
 * from one PKCS#8 PEM file (`SIGNING_KEY_FILE`). A rendered answer shared as a Buffer is signed once.
 */
export class Signer {
  /** The keys of `SIGNING_KEY_FILE`, made once (signatures are kept per key set, compared by identity). */
  private readonly fileKeys: KeySet | null;
  private readonly signed = new WeakMap<Buffer, { keys: KeySet; header: string }>();

  constructor(
    private readonly db: Db,
    private readonly cache: ContentCache,
    private readonly options: { keyFile: string | null; overlapDays: number },
  ) {
    const fileKey = options.keyFile === null ? null : Signer.readKeyFile(options.keyFile);
    this.fileKeys = fileKey === null ? null : { entries: [fileKey.entry], signing: [fileKey] };
  }

  private static readKeyFile(file: string): LoadedKey {
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

  /** The keys when known without waiting (the file's key, or the cached set while fresh). */
  private keysNow(): KeySet | undefined {
    return this.fileKeys ?? this.cache.peek<KeySet>(KEYS_CACHE_KEY);
  }

  async list(): Promise<SigningKeyEntry[]> {
    return [...(await this.keys()).entries];
  }

  /** The header of a rendered answer already signed under the current keys, found without waiting. */
  private signedNow(body: string | Buffer): string | undefined {
    if (!Buffer.isBuffer(body)) return undefined;
    const kept = this.signed.get(body);
    return kept !== undefined && kept.keys === this.keysNow() ? kept.header : undefined;
  }

  /** `keyId=<id>;sig=<base64>` per signing key, active first, joined by `, `. */
  async header(body: string | Buffer): Promise<string> {
    const keys = await this.keys();
    if (Buffer.isBuffer(body)) {
      const kept = this.signed.get(body);
      if (kept?.keys === keys) return kept.header;
    }
    const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body);
    const header = await Signer.headerOf(keys, (k) =>
      bytes.length >= SIGN_OFF_LOOP_BYTES ? signAsync(null, bytes, k) : sign(null, bytes, k),
    );
    if (Buffer.isBuffer(body)) this.signed.set(body, { keys, header });
    return header;
  }

  /** `header` of the concatenation of `parts`, without joining them (see `signParts`). */
  async headerOfParts(parts: readonly Buffer[]): Promise<string> {
    return Signer.headerOf(await this.keys(), (k) => signParts(k, parts));
  }

  private static async headerOf(keys: KeySet, signWith: (key: KeyObject) => Buffer | Promise<Buffer>): Promise<string> {
    const signatures = await Promise.all(keys.signing.map((k) => signWith(k.privateKey)));
    return keys.signing
      .map((k, i) => `keyId=${k.entry.keyId};sig=${(signatures[i] as Buffer).toString('base64')}`)
      .join(', ');
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
   * Adds `X-Signature` to the scope's successful JSON GET answers (not to HEAD, 304s or errors).
   * Install it after `installConditionalGet`, so that it sees the 304s.
   */
  install(app: FastifyInstance): void {
    // A callback hook: a cached answer's signature is added without a promise.
    app.addHook('onSend', (request, reply, payload, done) => {
      if (request.method !== 'GET' || reply.statusCode !== 200) return done(null, payload);
      if (typeof payload !== 'string' && !Buffer.isBuffer(payload)) return done(null, payload);
      const type = reply.getHeader('content-type');
      if (typeof type !== 'string' || !type.startsWith('application/json')) return done(null, payload);
      // A compressed answer is signed as its client reads it: decoded (a large one, streamed, was signed when rendered).
      const body = Buffer.isBuffer(payload) ? (identityBody(payload) ?? payload) : payload;
      const known = this.signedNow(body);
      if (known !== undefined) {
        reply.header('X-Signature', known);
        return done(null, payload);
      }
      this.header(body).then(
        (signature) => {
          reply.header('X-Signature', signature);
          done(null, payload);
        },
        (err: Error) => done(err),
      );
    });
  }
}
