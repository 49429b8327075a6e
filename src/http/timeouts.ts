import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Timeouts } from '../config.js';
import { AppError } from './errors.js';

/**
 * Node's HTTP server options for the deliberate timeouts: headers (slowloris), whole requests
 * (the longest upload) and idle connections, checked every second so slow clients go on time.
 */
export function serverTimeouts(timeouts: Timeouts) {
  return {
    // Node answers a request without Host itself, in plain text; `installInputChecks` answers {error}.
    http: { headersTimeout: timeouts.headers, connectionsCheckingInterval: 1000, requireHostHeader: false },
    requestTimeout: timeouts.request,
    connectionTimeout: timeouts.idle,
    keepAliveTimeout: timeouts.idle,
  };
}

/** The body type of a tus `PATCH` (a chunk of a resumable upload). */
export const OFFSET_STREAM = 'application/offset+octet-stream';

const kBody = Symbol('body being read');
const kDeadline = Symbol('body deadline');

/** A connection, with the last request whose body it read under a deadline. */
interface Connection extends Socket {
  [kBody]?: IncomingMessage;
  [kDeadline]?: number;
}

/**
 * A JSON or text body must arrive within `ms` of its headers; one that drips or never ends is cut
 * off (its connection closed), checked every second like Node's own headers timeout. Multipart
 * uploads may take long: the idle and request timeouts bound them.
 *
 * Each connection remembers the body it is reading and its deadline, and one sweep a second over
 * the open connections cuts off the late ones. (A timer per request, armed and cleared, cost a
 * heartbeat a tenth of its CPU on SQLite: with no other timer of its length, each one made Node set
 * up and tear down a timer list and the loop's libuv timer.)
 */
export function installBodyDeadline(app: FastifyInstance, ms: number): void {
  const connections = new Set<Connection>();
  function forget(this: Connection) {
    connections.delete(this);
  }
  app.server.on('connection', (socket: Connection) => {
    connections.add(socket);
    socket.once('close', forget);
  });
  const sweep = setInterval(() => {
    const now = performance.now();
    for (const socket of connections) {
      const body = socket[kBody];
      if (body === undefined) continue;
      // Read in full (most are, within a millisecond): nothing to watch, and no request to keep alive.
      if (body.complete) socket[kBody] = undefined;
      else if (now >= (socket[kDeadline] ?? Infinity))
        body.destroy(new AppError(408, `request body not received within ${ms} ms`));
    }
  }, 1000);
  sweep.unref();
  app.addHook('onClose', (_app, done) => {
    clearInterval(sweep);
    done();
  });
  app.addHook('preParsing', (request, _reply, payload, done) => {
    const type = request.headers['content-type'];
    const hasBody = request.headers['transfer-encoding'] !== undefined || Number(request.headers['content-length']) > 0;
    // Uploads (multipart, and tus chunks of any size) may take long: the idle and request timeouts bound them.
    const upload = typeof type === 'string' && (type.startsWith('multipart/') || type === OFFSET_STREAM);
    if (!hasBody || upload) return done(null, payload);
    const socket: Connection = request.raw.socket;
    socket[kDeadline] = performance.now() + ms;
    socket[kBody] = request.raw;
    done(null, payload);
  });
}
