import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

/** What a client (or the load balancer before us) may name a request: short, and safe in logs and headers. */
const SANE_ID = /^[\w.:+/=-]{1,128}$/;

export const REQUEST_ID_HEADER = 'x-request-id';

/** The request's own `X-Request-Id` when it is sane, else a fresh UUID (Fastify's `genReqId`). */
export function requestId(req: IncomingMessage): string {
  const sent = req.headers[REQUEST_ID_HEADER];
  return typeof sent === 'string' && SANE_ID.test(sent) ? sent : randomUUID();
}

/** Every answer carries the id its log lines carry, errors and 404s included. */
export function installRequestIdHeader(app: FastifyInstance): void {
  app.addHook('onRequest', (request, reply, done) => {
    reply.header(REQUEST_ID_HEADER, request.id);
    done();
  });
}
