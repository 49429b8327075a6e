import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import helmet, { type HelmetOptions } from 'helmet';
import { addRouteHooks } from './route-hooks.js';

declare module 'fastify' {
  interface RouteShorthandOptions {
    /** `false`: no browser security headers (machine endpoints for launchers, probes, scrapers). */
    securityHeaders?: false;
  }
}

/**
 * The headers helmet sets for `options`, asked of helmet once: with a static policy (no CSP nonces)
 * they are the same on every answer.
 */
export function helmetHeaders(options: HelmetOptions): Record<string, string> {
  const headers: Record<string, string> = {};
  const response = {
    setHeader: (name: string, value: unknown) => (headers[name.toLowerCase()] = String(value)),
    removeHeader: (name: string) => delete headers[name.toLowerCase()],
  };
  helmet(options)({} as IncomingMessage, response as unknown as ServerResponse, () => undefined);
  return headers;
}

/**
 * A hook setting helmet's headers for `options`. `@fastify/helmet` builds helmet's
 * middleware anew for each request (about a quarter of a check-update's CPU); here helmet's own
 * policy is computed once.
 */
export function securityHeadersHook(options: HelmetOptions): onRequestHookHandler {
  const headers = helmetHeaders(options);
  return (_request, reply, done) => {
    reply.headers(headers);
    done();
  };
}

/**
 * Attaches `hook` to every route declared from now on, but those declared `securityHeaders: false`,
 * and runs it for unmatched paths. Per route: the launchers' hot paths do not run it to skip it.
 */
export function installSecurityHeaders(app: FastifyInstance, hook: onRequestHookHandler): void {
  addRouteHooks(app, (route) => (route.securityHeaders === false ? null : { onRequest: hook }));
  app.addHook('onRequest', function unmatched(request, reply, done) {
    if (request.is404) return hook.call(this, request, reply, done);
    done();
  });
}
