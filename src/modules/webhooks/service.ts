import { randomBytes } from 'node:crypto';
import type { Static } from 'typebox';
import type { Db } from '../../db/index.js';
import type { WebhookDeliveryRow, WebhookRow } from '../../db/schema.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import { notFound } from '../../http/errors.js';
import type { WebhookCreateBody, WebhookUpdateBody } from './schemas.js';
import type { WebhookWorker } from './worker.js';

export interface Webhook {
  id: string;
  url: string;
  format: 'json' | 'discord';
  events: string[];
  enabled: boolean;
  /** The last four characters of the secret (the secret itself is shown once, when made). */
  secretHint: string;
  createdAt: string;
  updatedAt: string;
}

export interface Delivery {
  id: string;
  eventId: string;
  event: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  lastStatus: number | null;
  lastError: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
  deliveredAt: string | null;
  log: { attempt: number; at: string; statusCode: number | null; error: string | null; durationMs: number }[];
}

/** Deliveries listed per webhook: the newest. */
const DELIVERY_PAGE = 50;

const newSecret = () => `whsec_${randomBytes(24).toString('base64url')}`;

function toWebhook(row: WebhookRow): Webhook {
  return {
    id: row.id,
    url: row.url,
    format: row.format,
    events: JSON.parse(row.events) as string[],
    enabled: row.enabled === 1,
    secretHint: `…${row.secret.slice(-4)}`,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/** Webhooks as owners manage them: registration, a test delivery, and the delivery log. */
export class WebhookService {
  constructor(
    private readonly db: Db,
    private readonly worker: WebhookWorker,
  ) {}

  async list(): Promise<Webhook[]> {
    const rows = await this.db.selectFrom('webhooks').selectAll().orderBy('createdAt').execute();
    return rows.map(toWebhook);
  }

  private async row(id: string): Promise<WebhookRow> {
    const row = await this.db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw notFound(`webhook not found: ${id}`);
    return row;
  }

  async get(id: string): Promise<Webhook> {
    return toWebhook(await this.row(id));
  }

  /** A new webhook and its signing secret (shown this once). */
  async create(body: Static<typeof WebhookCreateBody>): Promise<Webhook & { secret: string }> {
    const at = nowIso();
    const row: WebhookRow = {
      id: newId(),
      url: body.url,
      format: body.format ?? 'json',
      events: JSON.stringify([...new Set(body.events)]),
      secret: newSecret(),
      enabled: body.enabled === false ? 0 : 1,
      createdAt: at,
      updatedAt: at,
    };
    await this.db.insertInto('webhooks').values(row).execute();
    return { ...toWebhook(row), secret: row.secret };
  }

  /** Changes a webhook; `rotateSecret` makes a new secret, answered this once. */
  async update(id: string, body: Static<typeof WebhookUpdateBody>): Promise<Webhook & { secret?: string }> {
    await this.row(id);
    const secret = body.rotateSecret === true ? newSecret() : undefined;
    await this.db
      .updateTable('webhooks')
      .set({
        ...(body.url !== undefined ? { url: body.url } : {}),
        ...(body.format !== undefined ? { format: body.format } : {}),
        ...(body.events !== undefined ? { events: JSON.stringify([...new Set(body.events)]) } : {}),
        ...(body.enabled !== undefined ? { enabled: body.enabled ? 1 : 0 } : {}),
        ...(secret !== undefined ? { secret } : {}),
        updatedAt: nowIso(),
      })
      .where('id', '=', id)
      .execute();
    return { ...(await this.get(id)), ...(secret !== undefined ? { secret } : {}) };
  }

  async remove(id: string): Promise<void> {
    const result = await this.db.deleteFrom('webhooks').where('id', '=', id).executeTakeFirst();
    if (result.numDeletedRows === 0n) throw notFound(`webhook not found: ${id}`);
  }

  /**
   * Sends a `webhook.test` event to this webhook now (one attempt, answered with its outcome); a
   * failed test is retried like any delivery.
   */
  async test(id: string): Promise<Delivery> {
    const webhook = await this.row(id);
    const eventId = newId();
    const deliveryId = newId();
    const at = now();
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('webhookEvents')
        .values({
          id: eventId,
          event: 'webhook.test',
          subjectId: webhook.id,
          data: JSON.stringify({ title: 'Test delivery', text: `A test of the webhook to ${webhook.url}.` }),
          occurredAt: nowIso(),
          dueMs: at,
          scheduledFor: null,
          fannedOut: 1,
          webhookId: webhook.id,
        })
        .execute();
      await trx
        .insertInto('webhookDeliveries')
        .values({
          id: deliveryId,
          webhookId: webhook.id,
          eventId,
          status: 'pending',
          nextAttemptMs: at,
          createdAt: nowIso(),
          lastStatus: null,
          lastError: null,
          deliveredAt: null,
        })
        .execute();
    });
    await this.worker.attempt(deliveryId);
    const [delivery] = await this.deliveriesWhere(id, deliveryId);
    if (!delivery) throw notFound(`delivery not found: ${deliveryId}`);
    return delivery;
  }

  /** The newest deliveries of a webhook, each with its attempts. */
  async deliveries(id: string): Promise<Delivery[]> {
    await this.row(id);
    return this.deliveriesWhere(id, null);
  }

  private async deliveriesWhere(webhookId: string, deliveryId: string | null): Promise<Delivery[]> {
    let query = this.db
      .selectFrom('webhookDeliveries')
      .innerJoin('webhookEvents', 'webhookEvents.id', 'webhookDeliveries.eventId')
      .selectAll('webhookDeliveries')
      .select('webhookEvents.event')
      .where('webhookDeliveries.webhookId', '=', webhookId);
    if (deliveryId !== null) query = query.where('webhookDeliveries.id', '=', deliveryId);
    const rows = await query
      .orderBy('webhookDeliveries.createdAt', 'desc')
      .orderBy('webhookDeliveries.id', 'desc')
      .limit(DELIVERY_PAGE)
      .execute();
    const attempts =
      rows.length === 0
        ? []
        : await this.db
            .selectFrom('webhookAttempts')
            .selectAll()
            .where(
              'deliveryId',
              'in',
              rows.map((r) => r.id),
            )
            .orderBy('attempt')
            .execute();
    return rows.map((row: WebhookDeliveryRow & { event: string }) => ({
      id: row.id,
      eventId: row.eventId,
      event: row.event,
      status: row.status,
      attempts: row.attempts,
      lastStatus: row.lastStatus,
      lastError: row.lastError,
      nextAttemptAt: row.status === 'pending' ? new Date(Number(row.nextAttemptMs)).toISOString() : null,
      createdAt: row.createdAt,
      deliveredAt: row.deliveredAt,
      log: attempts
        .filter((a) => a.deliveryId === row.id)
        .map((a) => ({
          attempt: a.attempt,
          at: a.at,
          statusCode: a.statusCode,
          error: a.error,
          durationMs: a.durationMs,
        })),
    }));
  }
}
