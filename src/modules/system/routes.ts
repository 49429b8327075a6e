import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { sql } from 'kysely';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';

export function systemRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.get(
      '/api/server-time',
      {
        // Machine endpoints for launchers: browser security headers would only cost time here.
        helmet: false,
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

    app.get(
      '/healthz',
      {
        schema: {
          tags: ['system'],
          summary: 'Liveness and database reachability, for load balancers',
          response: { 200: Type.Object({ ok: Type.Literal(true), database: Type.String(), storage: Type.String() }) },
        },
      },
      async (_request, reply) => {
        await sql`select 1`.execute(ctx.db);
        reply.header('Cache-Control', 'no-store');
        return { ok: true as const, database: ctx.engine, storage: ctx.storage.kind };
      },
    );
  };
}
