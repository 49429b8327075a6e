import { createHash, timingSafeEqual } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { Type } from 'typebox';
import { unauthorized } from '../http/errors.js';
import { addRouteHooks } from '../http/route-hooks.js';
import { ErrorResponse } from '../http/schemas.js';
import type { Metrics, ServedKind } from './metrics.js';

/** The routes that send files, and the kind their bytes count under. */
const SERVING_ROUTES: Readonly<Record<string, ServedKind>> = {
  '/api/software/download/:versionId': 'software',
  '/api/software/latest': 'software',
  '/download/launcher': 'software',
  '/api/download/:releaseId': 'addon',
  '/uploads/*': 'file',
  '/api/game/chunks/:sha256': 'game',
};

/** The label of requests that matched no route: one value, whatever URLs clients try. */
export const UNMATCHED_ROUTE = 'unmatched';

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * Counts every answer by route pattern and status with its latency (one `onResponse` hook),
 * the bytes of files sent (a `data` listener on the piped file stream, added only to the routes
 * that serve files), and answers `GET /metrics`, behind `Authorization: Bearer <token>` when set.
 */
export function metricsPlugin(metrics: Metrics, token: string | null) {
  const plugin: FastifyPluginAsyncTypebox = async (app) => {
    // A callback hook: no promise per answer.
    app.addHook('onResponse', (request, reply, done) => {
      metrics.answered(
        request.method,
        request.routeOptions.url ?? UNMATCHED_ROUTE,
        reply.statusCode,
        reply.elapsedTime / 1000,
      );
      done();
    });

    addRouteHooks(app, (route) => {
      const kind = SERVING_ROUTES[route.url];
      if (kind === undefined) return null;
      const bytes = metrics.bytesOf(kind);
      // Fastify pipes a stream payload into the response: the listener joins once the pipe exists.
      const countPiped: onRequestHookHandler = (_request, reply, done) => {
        reply.raw.once('pipe', (source: Readable) => source.on('data', (chunk: Buffer) => bytes.inc(chunk.length)));
        done();
      };
      return { onRequest: countPiped };
    });

    const expected = token === null ? null : digest(`Bearer ${token}`);
    app.get(
      '/metrics',
      {
        securityHeaders: false,
        schema: {
          tags: ['system'],
          summary: 'Prometheus metrics (text format); needs `Authorization: Bearer <METRICS_TOKEN>` when that is set',
          security: token === null ? [] : [{ bearer: [] }],
          response: { 200: Type.String({ description: 'Prometheus text exposition format' }), 401: ErrorResponse },
        },
      },
      async (request, reply) => {
        if (expected !== null && !timingSafeEqual(digest(request.headers.authorization ?? ''), expected)) {
          throw unauthorized('metrics need Authorization: Bearer <METRICS_TOKEN>');
        }
        const body = await metrics.registry.metrics();
        return reply.header('Cache-Control', 'no-store').type(metrics.registry.contentType).send(body);
      },
    );
  };
  return fp(plugin, { name: 'metrics' });
}
