import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { sql } from 'kysely';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { ErrorResponse } from '../../http/schemas.js';

/** How long `/readyz` waits for the database and the store before calling the instance not ready. */
const PROBE_TIMEOUT_MS = 2000;

/** A key no upload can have (uploads live under `YYYY-MM/`): stat answers "absent" when the store works. */
const STORE_PROBE_KEY = 'readyz-probe';

/** Whether the instance should be sent traffic; false from the start of a graceful shutdown. */
export class Readiness {
  private stopping = false;

  get shuttingDown(): boolean {
    return this.stopping;
  }

  beginShutdown(): void {
    this.stopping = true;
  }
}

function within<T>(work: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not answer within ${PROBE_TIMEOUT_MS} ms`)),
      PROBE_TIMEOUT_MS,
    );
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

const Healthy = Type.Object({ ok: Type.Literal(true), database: Type.String(), storage: Type.String() });

/**
 * `/healthz`: the process is alive (no dependency is asked, so a database outage does not get
 * every instance restarted). `/readyz`: the database and the store answer and the instance is not
 * shutting down; 503 `{error}` otherwise, so a load balancer stops sending it traffic.
 */
export function healthRoutes(ctx: AppContext, readiness: Readiness): FastifyPluginAsyncTypebox {
  const healthy = { ok: true as const, database: ctx.engine, storage: ctx.storage.kind };
  return async (app) => {
    app.get(
      '/healthz',
      {
        securityHeaders: false,
        schema: {
          tags: ['system'],
          summary: 'Liveness: 200 while the process runs (the database is not asked; see /readyz)',
          response: { 200: Healthy },
        },
      },
      async (_request, reply) => {
        reply.header('Cache-Control', 'no-store');
        return healthy;
      },
    );

    app.get(
      '/readyz',
      {
        securityHeaders: false,
        schema: {
          tags: ['system'],
          summary:
            'Readiness: the database, the store (and Redis, when used) answer and the instance is not shutting down (else 503)',
          response: { 200: Healthy, 503: ErrorResponse },
        },
      },
      async (request, reply) => {
        reply.header('Cache-Control', 'no-store');
        if (readiness.shuttingDown) return reply.code(503).send({ error: 'shutting down' });
        try {
          await within(sql`select 1`.execute(ctx.db), 'the database');
        } catch (err) {
          request.log.warn({ err }, 'readiness: database not answering');
          return reply.code(503).send({ error: 'the database does not answer' });
        }
        try {
          await within(ctx.limits.ping(), 'Redis');
        } catch (err) {
          request.log.warn({ err }, 'readiness: Redis not answering');
          return reply.code(503).send({ error: 'Redis does not answer' });
        }
        try {
          await within(ctx.storage.stat(STORE_PROBE_KEY), 'the file store');
        } catch (err) {
          request.log.warn({ err }, 'readiness: file store not answering');
          return reply.code(503).send({ error: 'the file store does not answer' });
        }
        return healthy;
      },
    );
  };
}
