import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { mayWrite, type Role } from '../domain/roles.js';
import type { AdminUser, AuthService } from '../modules/auth/service.js';
import { type AppError, forbidden, unauthorized } from './errors.js';
import { SAFE_METHODS } from './route-hooks.js';

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

/** onRequest hook of every administrator endpoint: a valid session cookie or API token, else 401. */
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

/**
 * onRequest hook of an admin scope whose changes (any method but GET/HEAD/OPTIONS) need one of
 * `roles` or an owner: `admin.addHook('onRequest', changesBy('publisher'))`. Anyone else gets 403.
 */
export function changesBy(...roles: Role[]) {
  return async function requireRole(request: FastifyRequest): Promise<void> {
    const role = currentAdmin(request).role;
    if (!SAFE_METHODS.has(request.method) && !mayWrite(role, roles)) {
      throw forbidden(`the ${role} role may not make this change`);
    }
  };
}

/** onRequest hook of endpoints only an owner may use, reads included (accounts, audit). */
export async function ownerOnly(request: FastifyRequest): Promise<void> {
  if (currentAdmin(request).role !== 'owner') throw forbidden('only an owner may do this');
}

const withoutDefaultPort = (host: string) => host.replace(/:(80|443)$/, '');

/** Whether an `Origin` names the host the request was sent to (default ports aside). */
function isOwnHost(origin: string, requestHost: string): boolean {
  try {
    return withoutDefaultPort(new URL(origin).host) === withoutDefaultPort(requestHost);
  } catch {
    return false;
  }
}

/**
 * onRequest hook refusing cookie-authenticated writes that a page of another origin made the
 * browser send (CSRF, including from sibling subdomains, which `SameSite=Lax` lets through): a
 * write carrying the session cookie must come from this origin or one of `trustedOrigins`, as the
 * browser tells by `Sec-Fetch-Site` and `Origin`. Requests without the cookie (API tokens,
 * launchers) and clients that are not browsers (neither header) are unaffected.
 */
export function originGuard(trustedOrigins: readonly string[]) {
  const trusted = new Set(trustedOrigins);
  const refused = (request: FastifyRequest): AppError | null => {
    if (SAFE_METHODS.has(request.method) || sessionToken(request) === null) return null;
    const site = request.headers['sec-fetch-site'];
    if (site === 'same-origin' || site === 'none') return null;
    const origin = request.headers.origin;
    if (origin === undefined) {
      if (site === undefined) return null;
    } else if (trusted.has(origin) || isOwnHost(origin, request.host)) {
      // The host alone decides "this origin": behind a TLS proxy without TRUST_PROXY the scheme differs.
      return null;
    }
    return forbidden(
      `cross-origin write refused: ${origin ?? 'a page of another site'} may not use the administrator session`,
    );
  };
  // A callback hook: no promise per request.
  return function refuseCrossOriginWrites(request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) {
    done(refused(request) ?? undefined);
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
