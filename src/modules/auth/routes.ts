import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import rateLimit from '@fastify/rate-limit';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { ROLES } from '../../domain/roles.js';
import { adminScope, currentAdmin, ownerOnly, scoped, SESSION_COOKIE, sessionToken } from '../../http/auth.js';
import { badRequest } from '../../http/errors.js';
import { ErrorResponse, IdParams, NullableString, OkResponse, StringEnum } from '../../http/schemas.js';
import { SESSION_IDLE_MS } from './service.js';

const RoleSchema = StringEnum(ROLES, {
  description: 'owner: everything; publisher: software and addons; editor: articles, banners, gallery',
});
// The contract's login answer names the user only; `me` adds the role (the console reads it there).
const User = Type.Object({ id: Type.String(), username: Type.String() });
const Me = Type.Object({ id: Type.String(), username: Type.String(), role: RoleSchema, totpEnabled: Type.Boolean() });
const TokenInfo = Type.Object({
  id: Type.String(),
  name: Type.String(),
  role: RoleSchema,
  createdAt: Type.String(),
  lastUsedAt: NullableString(),
});
const Account = Type.Object({
  id: Type.String(),
  username: Type.String(),
  role: RoleSchema,
  disabled: Type.Boolean(),
  totpEnabled: Type.Boolean(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const MIN_PASSWORD = 6;
const Password = Type.String({
  minLength: MIN_PASSWORD,
  maxLength: 1024,
  description: `at least ${MIN_PASSWORD} characters`,
});
const LoginFailure = Type.Object({ error: Type.String(), totpRequired: Type.Optional(Type.Boolean()) });

export function authRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const { auth } = ctx;
  return async (app) => {
    await app.register(
      scoped(async (open) => {
        await open.register(rateLimit, {
          max: ctx.config.loginRateLimit,
          timeWindow: '1 minute',
          // Counted in the shared database: N instances do not multiply the bound by N.
          store: ctx.limits.rateLimitStore('login'),
        });
        open.post(
          '/api/admin/login',
          {
            schema: {
              tags: ['admin'],
              summary: 'Log in as an administrator; sets the session cookie',
              body: Type.Object({
                username: Type.String({ minLength: 1 }),
                password: Type.String({ minLength: 1 }),
                totp: Type.Optional(
                  Type.String({ maxLength: 64, description: 'a code of the authenticator app, or a recovery code' }),
                ),
              }),
              response: { 200: Type.Object({ ok: Type.Literal(true), user: User }), 401: LoginFailure },
            },
          },
          async (request, reply) => {
            const { user, token } = await auth.login(request.body.username, request.body.password, request.body.totp);
            reply.setCookie(SESSION_COOKIE, token, {
              httpOnly: true,
              sameSite: 'lax',
              path: '/',
              secure: request.protocol === 'https',
              maxAge: SESSION_IDLE_MS / 1000,
            });
            return { ok: true as const, user: { id: user.id, username: user.username } };
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
          {
            schema: {
              tags: ['admin'],
              response: {
                200: Type.Object({
                  user: Me,
                  appName: Type.String({
                    description: "the service's APP_NAME: the app a game client build's manifest must name",
                  }),
                }),
                401: ErrorResponse,
              },
            },
          },
          async (request) => ({ user: await auth.me(currentAdmin(request)), appName: ctx.config.appName }),
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
              body: Type.Object({
                name: Type.String({ minLength: 1, maxLength: 100 }),
                role: Type.Optional(RoleSchema),
              }),
              response: { 201: Type.Intersect([TokenInfo, Type.Object({ token: Type.String() })]), 403: ErrorResponse },
            },
          },
          async (request, reply) => {
            const created = await auth.createApiToken(currentAdmin(request), request.body.name, request.body.role);
            return reply.code(201).send(created);
          },
        );

        admin.get(
          '/api/admin/tokens',
          { schema: { tags: ['admin'], response: { 200: Type.Array(TokenInfo) } } },
          async (request) => auth.listApiTokens(currentAdmin(request)),
        );

        admin.delete(
          '/api/admin/tokens/:id',
          { schema: { tags: ['admin'], params: Type.Object({ id: Type.String() }), response: { 200: OkResponse } } },
          async (request) => {
            await auth.deleteApiToken(currentAdmin(request), request.params.id);
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/admin/totp/enroll',
          {
            schema: {
              tags: ['admin'],
              summary: 'Start enrolling in a second factor: a secret and the otpauth:// URL to scan',
              response: { 200: Type.Object({ secret: Type.String(), otpauthUrl: Type.String() }), 409: ErrorResponse },
            },
          },
          async (request) => auth.enrollTotp(currentAdmin(request)),
        );
        admin.post(
          '/api/admin/totp/confirm',
          {
            schema: {
              tags: ['admin'],
              summary: 'Turn the second factor on with a current code; the recovery codes are shown only here',
              body: Type.Object({ code: Type.String({ minLength: 1, maxLength: 16 }) }),
              response: {
                200: Type.Object({ recoveryCodes: Type.Array(Type.String()) }),
                400: ErrorResponse,
                409: ErrorResponse,
              },
            },
          },
          async (request) => ({ recoveryCodes: await auth.confirmTotp(currentAdmin(request), request.body.code) }),
        );
        admin.post(
          '/api/admin/totp/disable',
          {
            schema: {
              tags: ['admin'],
              summary: 'Turn the second factor off (needs the password)',
              body: Type.Object({ password: Type.String({ minLength: 1, maxLength: 1024 }) }),
              response: { 200: OkResponse, 403: ErrorResponse },
            },
          },
          async (request) => {
            await auth.disableTotp(currentAdmin(request), request.body.password);
            return { ok: true as const };
          },
        );
      }),
    );

    // Accounts: an owner's business, reads included.
    await app.register(
      adminScope(auth, async (owner) => {
        owner.addHook('onRequest', ownerOnly);
        owner.get(
          '/api/admin/users',
          {
            schema: {
              tags: ['admin'],
              summary: 'Administrator accounts (owner)',
              response: { 200: Type.Array(Account), 403: ErrorResponse },
            },
          },
          async () => auth.listAccounts(),
        );
        owner.post(
          '/api/admin/users',
          {
            schema: {
              tags: ['admin'],
              summary: 'Create an administrator account (owner)',
              body: Type.Object(
                {
                  username: Type.String({ minLength: 1, maxLength: 64, pattern: '^[^\\u0000-\\u001f\\u007f\\s]+$' }),
                  password: Password,
                  role: RoleSchema,
                },
                { additionalProperties: false },
              ),
              response: { 201: Account, 400: ErrorResponse, 403: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request, reply) => {
            const { username, password, role } = request.body;
            return reply.code(201).send(await auth.createAccount(username, password, role));
          },
        );
        owner.put(
          '/api/admin/users/:id',
          {
            schema: {
              tags: ['admin'],
              summary:
                'Change an account: role, disabled, password reset (owner); its sessions end when disabled or reset',
              params: IdParams,
              body: Type.Object(
                {
                  role: Type.Optional(RoleSchema),
                  disabled: Type.Optional(Type.Boolean()),
                  password: Type.Optional(Password),
                },
                { additionalProperties: false },
              ),
              response: {
                200: Account,
                400: ErrorResponse,
                403: ErrorResponse,
                404: ErrorResponse,
                409: ErrorResponse,
              },
            },
          },
          async (request) => auth.updateAccount(request.params.id, request.body),
        );
      }),
    );
  };
}
