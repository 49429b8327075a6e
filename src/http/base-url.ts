import type { FastifyRequest } from 'fastify';

/** The absolute origin clients reach this service at: `PUBLIC_BASE_URL`, else the request's own. */
export function baseUrl(request: FastifyRequest, configured: string | null): string {
  if (configured !== null) return configured;
  return `${request.protocol}://${request.host}`;
}
