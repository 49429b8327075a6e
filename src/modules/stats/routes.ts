import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope } from '../../http/auth.js';
import { badRequest } from '../../http/errors.js';
import { integerQuery } from '../../http/query.js';
import { ErrorResponse } from '../../http/schemas.js';
import { StatsService } from './service.js';

export const MAX_DAYS = 366;

const Counts = {
  installer: Type.Integer({ description: 'full-package downloads (installer, website)' }),
  launcher: Type.Integer({ description: 'launcher self-update downloads (`source=launcher`)' }),
  addon: Type.Integer({ description: 'addon release downloads' }),
  total: Type.Integer(),
};

const DownloadStatsResponse = Type.Object({
  days: Type.Integer(),
  from: Type.String({ description: 'first day (UTC, YYYY-MM-DD)' }),
  to: Type.String({ description: 'last day (UTC, today)' }),
  series: Type.Array(Type.Object({ day: Type.String(), ...Counts }), {
    description: 'every day in range, oldest first',
  }),
  totals: Type.Object(Counts),
});

export function statsRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const stats = new StatsService(ctx.db);
  return adminScope(ctx.auth, async (admin) => {
    admin.get(
      '/api/admin/stats/downloads',
      {
        schema: {
          tags: ['stats (admin)'],
          summary: 'Counted downloads per UTC day and kind over the last `days` days (default 30, 1..366)',
          querystring: Type.Object({ days: Type.Optional(Type.String({ description: 'integer 1..366, default 30' })) }),
          response: { 200: DownloadStatsResponse, 400: ErrorResponse, 401: ErrorResponse },
        },
      },
      async (request, reply) => {
        const days = integerQuery(request.query.days, 'days', 30, 1);
        if (days > MAX_DAYS) throw badRequest(`querystring.days: must be an integer from 1 to ${MAX_DAYS}`);
        reply.header('Cache-Control', 'no-store');
        return stats.downloads(days);
      },
    );
  });
}
