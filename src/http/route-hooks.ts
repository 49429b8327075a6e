import type {
  FastifyInstance,
  onRequestHookHandler,
  onSendHookHandler,
  preHandlerHookHandler,
  RouteOptions,
} from 'fastify';

/** Methods that change nothing (RFC 9110 §9.2.1, less the ones no route here declares). */
export const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

export interface RouteHooks {
  onRequest?: onRequestHookHandler;
  preHandler?: preHandlerHookHandler;
  onSend?: onSendHookHandler;
}

function listOf<T>(items: T | readonly T[] | undefined): T[] {
  return items === undefined ? [] : ([] as T[]).concat(items);
}

/** Whether a route may change something: one of its methods is not safe. */
export const changesState = (route: RouteOptions): boolean => listOf(route.method).some((m) => !SAFE_METHODS.has(m));

/**
 * Puts the hooks `hooksFor` gives a route first in that route's own lists, for every route declared
 * from now on. A global hook takes its turn on every request; one put on the routes that need it
 * costs the others nothing (the launchers' reads run none of the write-side hooks).
 */
export function addRouteHooks(app: FastifyInstance, hooksFor: (route: RouteOptions) => RouteHooks | null): void {
  app.addHook('onRoute', (route) => {
    const hooks = hooksFor(route);
    if (hooks === null) return;
    if (hooks.onRequest) route.onRequest = [hooks.onRequest, ...listOf(route.onRequest)];
    if (hooks.preHandler) route.preHandler = [hooks.preHandler, ...listOf(route.preHandler)];
    if (hooks.onSend) route.onSend = [hooks.onSend, ...listOf(route.onSend)];
  });
}
