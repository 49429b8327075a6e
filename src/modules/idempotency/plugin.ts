import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify';
import type { Db } from '../../db/index.js';
import { now } from '../../domain/clock.js';
import { AppError, badRequest, conflict } from '../../http/errors.js';
import { addRouteHooks } from '../../http/route-hooks.js';

/** How long a key is kept: a retry within this time gets the first answer again. */
export const IDEMPOTENCY_KEY_HOURS = 24;
/** A request still marked running after this long died with its instance: its key may be used again. */
const ABANDONED_MS = 10 * 60 * 1000;
const HEADER = 'idempotency-key';

declare module 'fastify' {
  interface FastifyRequest {
    /** The stored key this request answers for (set when it carried an `Idempotency-Key`). */
    idempotencyKey: string | null;
  }
}

/**
 * The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header): an sf-string
 * (`"…"`), or the bare token many clients send; 1–255 printable characters.
 */
function keyOf(request: FastifyRequest): string | null {
  const header = request.headers[HEADER];
  if (header === undefined) return null;
  const value = (Array.isArray(header) ? header.join(',') : header).trim();
  const key = /^"(.*)"$/.exec(value)?.[1] ?? value;
  if (key === '' || key.length > 255 || !/^[\x20-\x7e]+$/.test(key)) {
    throw badRequest('Idempotency-Key: must be 1 to 255 printable ASCII characters');
  }
  return key;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** The stored form of a key: hashed with the caller's user id and the route's URL pattern. */
export const storedKey = (userId: string, route: string, key: string): string =>
  sha256(JSON.stringify([userId, route, key]));

/**
 * Makes the POST routes `urls` idempotent under the `Idempotency-Key` header, across instances (the
 * keys live in the database): the same key with the same body answers the first success again; with
 * another body 422; while the first request with it still runs 409 (whatever the body). Only successes are kept: a
 * refused or failed request may be retried with its key. Keys are the caller's (per user) and route's,
 * kept `IDEMPOTENCY_KEY_HOURS`.
 */
export function installIdempotency(app: FastifyInstance, db: Db, urls: readonly string[]): void {
  app.decorateRequest('idempotencyKey', null);
  const expiryMs = IDEMPOTENCY_KEY_HOURS * 3600 * 1000;

  async function begin(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const given = keyOf(request);
    if (given === null) return;
    const key = storedKey(request.admin?.id ?? '', request.routeOptions.url ?? '', given);
    const fingerprint = sha256(JSON.stringify([request.url, request.body]));
    const at = now();
    await db
      .deleteFrom('idempotencyKeys')
      .where('createdAt', '<', new Date(at - expiryMs).toISOString())
      .execute();
    const claim = () =>
      db
        .insertInto('idempotencyKeys')
        .values({ key, fingerprint, statusCode: null, response: null, createdAt: new Date(at).toISOString() })
        .onConflict((oc) => oc.column('key').doNothing())
        .executeTakeFirst();
    if (Number((await claim()).numInsertedOrUpdatedRows ?? 0) === 1) {
      request.idempotencyKey = key;
      return;
    }
    const row = await db.selectFrom('idempotencyKeys').selectAll().where('key', '=', key).executeTakeFirst();
    if (row === undefined) return begin(request, reply);
    // Still running: 409 whatever the body, since its outcome (and so whether the key stays used) is unknown.
    if (row.statusCode === null || row.response === null) {
      if (Date.parse(row.createdAt) + ABANDONED_MS > at) {
        reply.header('Retry-After', '1');
        throw conflict('Idempotency-Key: a request with this key is still being answered; try again');
      }
      await db.deleteFrom('idempotencyKeys').where('key', '=', key).where('createdAt', '=', row.createdAt).execute();
      return begin(request, reply);
    }
    if (row.fingerprint !== fingerprint) {
      throw new AppError(422, 'Idempotency-Key: already used for a request with another body');
    }
    return reply
      .code(row.statusCode)
      .header('content-type', 'application/json; charset=utf-8')
      .header('idempotent-replayed', 'true')
      .send(row.response);
  }

  const finish: onSendHookHandler = (request, reply, payload, done) => {
    const key = request.idempotencyKey;
    if (key === null) return done(null, payload);
    request.idempotencyKey = null;
    const kept = reply.statusCode >= 200 && reply.statusCode < 300 && typeof payload === 'string';
    const write = kept
      ? db
          .updateTable('idempotencyKeys')
          .set({ statusCode: reply.statusCode, response: payload })
          .where('key', '=', key)
          .execute()
      : db.deleteFrom('idempotencyKeys').where('key', '=', key).execute();
    write.then(
      () => done(null, payload),
      (err: Error) => done(err),
    );
  };

  const wanted = new Set(urls);
  addRouteHooks(app, (route) =>
    ([] as string[]).concat(route.method).includes('POST') && wanted.has(route.url)
      ? { preHandler: begin, onSend: finish }
      : null,
  );
}
