import type { FastifyBodyParser, FastifyInstance } from 'fastify';
import { badRequest } from './errors.js';

/** Where a parsed JSON value holds a NUL character (`body.name`, `body.items.2`), or null. */
function nulAt(value: unknown, where: string): string | null {
  if (typeof value === 'string') return value.includes('\u0000') ? where : null;
  if (typeof value !== 'object' || value === null) return null;
  for (const [key, item] of Object.entries(value)) {
    const found = key.includes('\u0000') ? where : nulAt(item, `${where}.${key}`);
    if (found !== null) return found;
  }
  return null;
}

/**
 * The JSON body parser of every route: Fastify's own (prototype-poisoning keys refused), and no
 * NUL characters, which PostgreSQL cannot store in text (SQLite would: the engines would disagree,
 * and a heartbeat carrying one would fail its whole batch).
 */
export function jsonBodyParser(app: FastifyInstance): FastifyBodyParser<string> {
  const parse = app.getDefaultJsonParser('error', 'error');
  return (request, body, done) => {
    parse(request, body, (err, value) => {
      if (err) return done(err, undefined);
      const nul = nulAt(value, 'body');
      if (nul !== null) return done(badRequest(`${nul}: must not contain NUL characters (\\u0000)`), undefined);
      done(null, value);
    });
  };
}

/**
 * What every request must be before any route sees it: HTTP/1.1 with a Host header (RFC 9112 §3.2;
 * Node's own refusal would be plain text), no NUL in the URL, and JSON bodies read by `jsonBodyParser`.
 */
export function installInputChecks(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, jsonBodyParser(app));
  // A callback hook: no promise per request.
  app.addHook('onRequest', (request, _reply, done) => {
    if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
      return done(badRequest('headers.host: is required'));
    }
    if (request.url.includes('%00')) return done(badRequest('url: must not contain NUL characters (%00)'));
    done();
  });
}
