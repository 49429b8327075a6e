import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, ownerOnly } from '../../http/auth.js';
import { ErrorResponse, IdParams, OkResponse } from '../../http/schemas.js';
import { DeliverySchema, WebhookCreateBody, WebhookSchema, WebhookUpdateBody } from './schemas.js';
import { WebhookService } from './service.js';

/** `/api/admin/webhooks`: an owner's business, reads included (URLs and deliveries tell of the setup). */
export function webhookRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const webhooks = new WebhookService(ctx.db, ctx.webhooks);
  const tags = ['webhooks (owner)'];
  return adminScope(ctx.auth, async (owner) => {
    owner.addHook('onRequest', ownerOnly);
    owner.get(
      '/api/admin/webhooks',
      {
        schema: {
          tags,
          summary: 'Registered webhooks',
          response: { 200: Type.Array(WebhookSchema), 403: ErrorResponse },
        },
      },
      async () => webhooks.list(),
    );
    owner.post(
      '/api/admin/webhooks',
      {
        schema: {
          tags,
          summary: 'Register a webhook; the answer carries its signing secret, this once',
          body: WebhookCreateBody,
          response: { 201: WebhookSchema, 400: ErrorResponse, 403: ErrorResponse },
        },
      },
      async (request, reply) => reply.code(201).send(await webhooks.create(request.body)),
    );
    owner.get(
      '/api/admin/webhooks/:id',
      {
        schema: {
          tags,
          summary: 'One webhook',
          params: IdParams,
          response: { 200: WebhookSchema, 404: ErrorResponse },
        },
      },
      async (request) => webhooks.get(request.params.id),
    );
    owner.put(
      '/api/admin/webhooks/:id',
      {
        schema: {
          tags,
          summary: 'Change a webhook (URL, format, events, enabled) or rotate its secret',
          params: IdParams,
          body: WebhookUpdateBody,
          response: { 200: WebhookSchema, 400: ErrorResponse, 404: ErrorResponse },
        },
      },
      async (request) => webhooks.update(request.params.id, request.body),
    );
    owner.delete(
      '/api/admin/webhooks/:id',
      {
        schema: {
          tags,
          summary: 'Remove a webhook and its deliveries',
          params: IdParams,
          response: { 200: OkResponse, 404: ErrorResponse },
        },
      },
      async (request) => {
        await webhooks.remove(request.params.id);
        return { ok: true as const };
      },
    );
    owner.post(
      '/api/admin/webhooks/:id/test',
      {
        schema: {
          tags,
          summary: 'Send a test event now; answers the delivery after its first attempt',
          params: IdParams,
          response: { 200: DeliverySchema, 404: ErrorResponse },
        },
      },
      async (request) => webhooks.test(request.params.id),
    );
    owner.get(
      '/api/admin/webhooks/:id/deliveries',
      {
        schema: {
          tags,
          summary: 'The newest 50 deliveries of a webhook, each with its attempts',
          params: IdParams,
          response: { 200: Type.Array(DeliverySchema), 404: ErrorResponse },
        },
      },
      async (request) => webhooks.deliveries(request.params.id),
    );
  });
}
