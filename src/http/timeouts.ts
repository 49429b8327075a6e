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

/**
 * A JSON or text body must arrive within `ms` of its headers; one that drips or never ends is cut
 * off (its connection closed). Multipart uploads may take long: the idle and request timeouts bound them.
 */
export function installBodyDeadline(app: FastifyInstance, ms: number): void {
  app.addHook('preParsing', (request, _reply, payload, done) => {
    const type = request.headers['content-type'];
    const hasBody = request.headers['transfer-encoding'] !== undefined || Number(request.headers['content-length']) > 0;
    if (!hasBody || (typeof type === 'string' && type.startsWith('multipart/'))) return done(null, payload);
    const timer = setTimeout(() => {
      payload.destroy(new AppError(408, `request body not received within ${ms} ms`));
    }, ms);
    const settle = () => clearTimeout(timer);
    payload.once('end', settle);
    payload.once('close', settle);
    done(null, payload);
  });
}
