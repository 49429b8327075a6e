import type { FastifyReply } from 'fastify';

/**
 * Sends an answer already rendered to JSON (a cached string or buffer), bypassing the route's
 * serializer. The route keeps its response schema for validation of its shape in tests and for
 * the OpenAPI document; the renderer is what must follow it.
 */
export function sendRenderedJson(reply: FastifyReply, json: string | Buffer): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(json);
}
