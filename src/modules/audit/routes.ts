import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, ownerOnly } from '../../http/auth.js';
import { baseUrl } from '../../http/base-url.js';
import { badRequest } from '../../http/errors.js';
import { nextPageLink, sharedCursors } from '../../http/paging.js';
import { integerQuery } from '../../http/query.js';
import { ErrorResponse, NullableString } from '../../http/schemas.js';
import { readAudit } from './log.js';

const AuditRecord = Type.Object({
  id: Type.String(),
  at: Type.String(),
  actor: Type.String(),
  tokenName: NullableString(),
  ip: Type.String(),
  action: Type.String(),
  targetType: Type.String(),
  targetId: NullableString(),
  changes: Type.Record(Type.String(), Type.Unknown()),
});

/** Records on an audit page unless `limit` says otherwise. */
const AUDIT_PAGE = 50;

/** `/api/admin/audit`: an owner's read of the audit log. */
export function auditRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const auditCursors = sharedCursors(ctx.db, 'audit-cursor');
  return adminScope(ctx.auth, async (owner) => {
    owner.addHook('onRequest', ownerOnly);
    owner.get(
      '/api/admin/audit',
      {
        schema: {
          tags: ['admin'],
          summary: 'Audit log, newest first (owner): every administrator change, login and logout',
          querystring: Type.Object({
            limit: Type.Optional(Type.String({ description: `integer 1..500, default ${AUDIT_PAGE}` })),
            cursor: Type.Optional(
              Type.String({
                maxLength: 1000,
                description:
                  'opaque: the next page, from the `Link: <…>; rel="next"` header of the page before (answered while more records follow); exact, even among records of the same millisecond',
              }),
            ),
            before: Type.Optional(Type.String({ description: 'ISO 8601: records before this time (paging)' })),
            actor: Type.Optional(Type.String({ maxLength: 200, description: 'account name' })),
            target: Type.Optional(Type.String({ maxLength: 200, description: 'target id or type' })),
          }),
          response: { 200: Type.Array(AuditRecord), 400: ErrorResponse, 403: ErrorResponse },
        },
      },
      async (request, reply) => {
        const { before, actor, target, cursor } = request.query;
        const limit =
          request.query.limit === undefined ? undefined : integerQuery(request.query.limit, 'limit', AUDIT_PAGE, 1);
        if (limit !== undefined && limit > 500) {
          throw badRequest('querystring.limit: must be an integer from 1 to 500');
        }
        if (before !== undefined && Number.isNaN(Date.parse(before))) {
          throw badRequest('querystring.before: must be an ISO 8601 time');
        }
        const query = {
          before: before === undefined ? null : new Date(before).toISOString(),
          actor: actor ?? null,
          target: target ?? null,
        };
        // A cursor belongs to its filters: used with others it would skip or repeat records.
        const scope = JSON.stringify(['audit', query.before, query.actor, query.target]);
        const cursors = await auditCursors();
        const page = cursors.request(scope, cursor, limit, AUDIT_PAGE);
        const { records, next } = await readAudit(ctx.db, { ...page, ...query });
        if (next !== null) {
          const base = baseUrl(request, ctx.config.publicBaseUrl);
          reply.header('Link', nextPageLink(base, request.url, cursors.encode(scope, next, page.limit)));
        }
        return records;
      },
    );
  });
}
