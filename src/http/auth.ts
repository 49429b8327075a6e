import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AdminUser, AuthService } from '../modules/auth/service.js';
import { unauthorized } from './errors.js';

export const SESSION_COOKIE = 'sid';

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated administrator; set by the admin guard. */
    admin: AdminUser | null;
  }
}

function bearerToken(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1] ?? null;
}

export function sessionToken(request: FastifyRequest): string | null {
  const value = request.cookies[SESSION_COOKIE];
  return typeof value === 'string' && value !== '' ? value : null;
}

/** preHandler for every administrator endpoint: a valid session cookie or API token, else 401. */
export function adminGuard(auth: AuthService) {
  return async function requireAdmin(request: FastifyRequest, _reply: FastifyReply): Promise<void> {
    const bearer = bearerToken(request);
    const cookie = sessionToken(request);
    const user =
      (bearer !== null ? await auth.userForApiToken(bearer) : null) ??
      (cookie !== null ? await auth.userForSession(cookie) : null);
    if (user === null) throw unauthorized('administrator session or API token required');
    request.admin = user;
  };
}

/** The administrator a guarded handler runs for. */
export function currentAdmin(request: FastifyRequest): AdminUser {
  if (request.admin === null) throw unauthorized();
  return request.admin;
}

/** A scope whose every route needs an administrator; the guard runs before body parsing and validation. */
export function adminScope(auth: AuthService, routes: FastifyPluginAsyncTypebox): FastifyPluginAsyncTypebox {
  return async (scope, options) => {
    scope.addHook('onRequest', adminGuard(auth));
    await routes(scope, options);
  };
}

/** An encapsulated child scope that keeps the TypeBox type provider (for scope-local plugins and parsers). */
export function scoped(routes: FastifyPluginAsyncTypebox): FastifyPluginAsyncTypebox {
  return routes;
}
