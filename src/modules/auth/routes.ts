import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import rateLimit from '@fastify/rate-limit';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, currentAdmin, scoped, SESSION_COOKIE, sessionToken } from '../../http/auth.js';
import { badRequest } from '../../http/errors.js';
import { ErrorResponse, NullableString, OkResponse } from '../../http/schemas.js';
import { SESSION_IDLE_MS } from './service.js';

const User = Type.Object({ id: Type.String(), username: Type.String() });
const TokenInfo = Type.Object({
  id: Type.String(),
  name: Type.String(),
  createdAt: Type.String(),
  lastUsedAt: NullableString(),
});
const MIN_PASSWORD = 6;

export function authRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const { auth } = ctx;
  return async (app) => {
    await app.register(
      scoped(async (open) => {
        await open.register(rateLimit, {
          max: ctx.config.loginRateLimit,
          timeWindow: '1 minute',
        });
        open.post(
          '/api/admin/login',
          {
            schema: {
              tags: ['admin'],
              summary: 'Log in as an administrator; sets the session cookie',
              body: Type.Object({ username: Type.String({ minLength: 1 }), password: Type.String({ minLength: 1 }) }),
              response: { 200: Type.Object({ ok: Type.Literal(true), user: User }), 401: ErrorResponse },
            },
          },
          async (request, reply) => {
            const { user, token } = await auth.login(request.body.username, request.body.password);
            reply.setCookie(SESSION_COOKIE, token, {
              httpOnly: true,
              sameSite: 'lax',
              path: '/',
              secure: request.protocol === 'https',
              maxAge: SESSION_IDLE_MS / 1000,
            });
            return { ok: true as const, user };
          },
        );
      }),
    );

    app.post(
      '/api/admin/logout',
      { schema: { tags: ['admin'], summary: 'Revoke the current session', response: { 200: OkResponse } } },
      async (request, reply) => {
        const token = sessionToken(request);
        if (token !== null) await auth.logout(token);
        reply.clearCookie(SESSION_COOKIE, { path: '/' });
        return { ok: true as const };
      },
    );

    await app.register(
      adminScope(auth, async (admin) => {
        admin.get(
          '/api/admin/me',
          { schema: { tags: ['admin'], response: { 200: Type.Object({ user: User }), 401: ErrorResponse } } },
          async (request) => ({ user: currentAdmin(request) }),
        );

        admin.post(
          '/api/admin/change-password',
          {
            schema: {
              tags: ['admin'],
              summary: 'Change the password; revokes the other sessions of the user',
              body: Type.Object({ currentPassword: Type.String(), newPassword: Type.String() }),
              response: { 200: OkResponse, 400: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            const { currentPassword, newPassword } = request.body;
            if (currentPassword === '') throw badRequest('body.currentPassword: is required');
            if ([...newPassword].length < MIN_PASSWORD) {
              throw badRequest(`body.newPassword: must be at least ${MIN_PASSWORD} characters`);
            }
            await auth.changePassword(currentAdmin(request).id, currentPassword, newPassword, sessionToken(request));
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/admin/tokens',
          {
            schema: {
              tags: ['admin'],
              summary: 'Create an API token for automation; the token is shown only in this answer',
              body: Type.Object({ name: Type.String({ minLength: 1, maxLength: 100 }) }),
              response: { 201: Type.Intersect([TokenInfo, Type.Object({ token: Type.String() })]) },
            },
          },
          async (request, reply) => {
            const created = await auth.createApiToken(currentAdmin(request).id, request.body.name);
            return reply.code(201).send(created);
          },
        );

        admin.get(
          '/api/admin/tokens',
          { schema: { tags: ['admin'], response: { 200: Type.Array(TokenInfo) } } },
          async () => auth.listApiTokens(),
        );

        admin.delete(
          '/api/admin/tokens/:id',
          { schema: { tags: ['admin'], params: Type.Object({ id: Type.String() }), response: { 200: OkResponse } } },
          async (request) => {
            await auth.deleteApiToken(request.params.id);
            return { ok: true as const };
          },
        );
      }),
    );
  };
}
