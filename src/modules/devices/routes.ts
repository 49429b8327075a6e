import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, scoped } from '../../http/auth.js';
import { AppError, badRequest } from '../../http/errors.js';
import { jsonBodyParser } from '../../http/input.js';
import { RenderedJson, sendRendered } from '../../http/rendered.js';
import { integerQuery } from '../../http/query.js';
import { ErrorResponse, NullableString } from '../../http/schemas.js';

const PRINTABLE = '^(?=.*\\S)[^\\u0000-\\u001f\\u007f]+$';
const OptionalField = Type.Optional(Type.String({ maxLength: 128 }));

const HeartbeatBody = Type.Object({
  deviceId: Type.String({ minLength: 1, maxLength: 128, pattern: PRINTABLE, description: 'stable machine id or UUID' }),
  os: OptionalField,
  osVersion: OptionalField,
  appVersion: OptionalField,
});

const Device = Type.Object({
  deviceId: Type.String(),
  os: NullableString(),
  osVersion: NullableString(),
  appVersion: NullableString(),
  ip: NullableString(),
  firstSeenAt: Type.String(),
  lastSeenAt: Type.String(),
  heartbeatCount: Type.Integer(),
  online: Type.Boolean(),
});

const Stats = Type.Object({
  online: Type.Integer(),
  total: Type.Integer(),
  onlineByAppVersion: Type.Array(Type.Object({ appVersion: Type.String(), count: Type.Integer() })),
  onlineByOs: Type.Array(Type.Object({ os: Type.String(), count: Type.Integer() })),
});

const OnlineHistory = Type.Object({
  points: Type.Array(
    Type.Object({
      at: Type.String(),
      online: Type.Integer(),
      byAppVersion: Type.Record(Type.String(), Type.Integer()),
    }),
  ),
  peak: Type.Integer(),
  average: Type.Number(),
});

export function deviceRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const { devices } = ctx;
  return async (app) => {
    await app.register(
      scoped(async (beat) => {
        // navigator.sendBeacon and some HTTP clients send JSON as text/plain: take it as JSON too.
        beat.addContentTypeParser('text/plain', { parseAs: 'string' }, jsonBodyParser(beat));
        beat.post(
          '/api/launcher/heartbeat',
          {
            // Machine endpoints for launchers: browser security headers would only cost time here.
            securityHeaders: false,
            schema: {
              tags: ['launcher'],
              summary: 'Launcher heartbeat: send at start, then every 60 s; silent for over 3 minutes means offline',
              body: HeartbeatBody,
              response: { 200: Type.Object({ ok: Type.Literal(true) }), 400: ErrorResponse, 429: ErrorResponse },
            },
          },
          // Not async: a device admitted this hour is answered without a promise (the most frequent request).
          (request, reply) => {
            const beat = { ...request.body, ip: request.ip };
            const accept = () => {
              devices.record(beat);
              reply.header('Cache-Control', 'no-store');
              return { ok: true as const };
            };
            const admitted = devices.admits(beat);
            if (admitted === true) return void reply.send(accept());
            return Promise.resolve(admitted).then((ok) => {
              if (!ok) {
                throw new AppError(429, 'too many new devices from this address this hour; known devices keep beating');
              }
              return accept();
            });
          },
        );
      }),
    );

    await app.register(
      adminScope(ctx.auth, async (admin) => {
        admin.get(
          '/api/admin/devices/stats',
          {
            schema: {
              tags: ['devices (admin)'],
              summary: 'Launchers online now and in total',
              response: { 200: Stats },
            },
          },
          async () => devices.stats(),
        );
        admin.get(
          '/api/admin/devices/online-history',
          {
            schema: {
              tags: ['devices (admin)'],
              summary:
                'Launchers online over the last `hours` (5-minute samples, by app version), with peak and average',
              querystring: Type.Object({
                hours: Type.Optional(Type.String({ description: `integer 1..${24 * 366}, default 24` })),
              }),
              response: { 200: OnlineHistory, 400: ErrorResponse },
            },
          },
          async (request) => {
            const hours = integerQuery(request.query.hours, 'hours', 24, 1);
            if (hours > 24 * 366) throw badRequest(`querystring.hours: must be an integer from 1 to ${24 * 366}`);
            return ctx.housekeeping.history(hours);
          },
        );
        admin.get(
          '/api/admin/devices',
          {
            schema: {
              tags: ['devices (admin)'],
              summary: 'Devices, most recently seen first',
              querystring: Type.Object({ online: Type.Optional(Type.String()), limit: Type.Optional(Type.String()) }),
              response: { 200: Type.Array(Device), 400: ErrorResponse },
            },
          },
          async (request, reply) => {
            const json = await devices.listJson({
              onlineOnly: request.query.online === '1' || request.query.online === 'true',
              limit: Math.min(integerQuery(request.query.limit, 'limit', 100, 1), 10_000),
            });
            // Already JSON of the schema's shape, rendered page by page (see `listJson`).
            return sendRendered(request, reply, RenderedJson.of(Buffer.from(json)));
          },
        );
      }),
    );
  };
}
