import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';

export function systemRoutes(): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.get(
      '/api/server-time',
      {
        // Machine endpoints for launchers: browser security headers would only cost time here.
        securityHeaders: false,
        schema: {
          tags: ['system'],
          summary: 'Server clock, for client clock synchronisation',
          response: { 200: Type.Object({ serverTime: Type.String(), epochMs: Type.Integer() }) },
        },
      },
      async (_request, reply) => {
        const now = Date.now();
        reply.header('Cache-Control', 'no-store');
        return { serverTime: new Date(now).toISOString(), epochMs: now };
      },
    );
  };
}
