import type { FastifyBodyParser, FastifyInstance } from 'fastify';
import { badRequest } from './errors.js';

/**
 * How deep arrays and objects may nest in a JSON body: far beyond any body of the API, and short of
 * what code that follows a value recursively (the audit record's `JSON.stringify`, a validator) can
 * take without running out of stack.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Why a parsed JSON value cannot be taken, or null: a NUL character (in `body.name`, `body.items.2`),
 * or arrays and objects nested deeper than MAX_JSON_DEPTH. `depth`: the arrays and objects around
 * `value`. One walk over the value, which never goes deeper than the bound.
 */
function refusal(value: unknown, where: string, depth: number): string | null {
  if (typeof value === 'string')
    return value.includes('\u0000') ? `${where}: must not contain NUL characters (\\u0000)` : null;
  if (typeof value !== 'object' || value === null) return null;
  if (depth === MAX_JSON_DEPTH) return `${where}: must not nest arrays and objects more than ${MAX_JSON_DEPTH} deep`;
  for (const [key, item] of Object.entries(value)) {
    const found = key.includes('\u0000')
      ? `${where}: must not contain NUL characters (\\u0000)`
      : refusal(item, `${where}.${key}`, depth + 1);
    if (found !== null) return found;
  }
  return null;
}

/**
 * The JSON body parser of every route: Fastify's own (prototype-poisoning keys refused); no NUL
 * characters, which PostgreSQL cannot store in text (SQLite would: the engines would disagree, and a
 * heartbeat carrying one would fail its whole batch); and no nesting deeper than MAX_JSON_DEPTH
 * (V8's `JSON.parse` reads any depth, but a recursive reader after it would overflow the stack: a 500).
 */
export function jsonBodyParser(app: FastifyInstance): FastifyBodyParser<string> {
  const parse = app.getDefaultJsonParser('error', 'error');
  return (request, body, done) => {
    parse(request, body, (err, value) => {
      if (err) return done(err, undefined);
      const refused = refusal(value, 'body', 0);
      if (refused !== null) return done(badRequest(refused), undefined);
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
