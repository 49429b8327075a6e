import { createHmac } from 'node:crypto';
import type { Db } from '../../db/index.js';
import type { WebhookEventRow, WebhookRow } from '../../db/schema.js';
import { newId, now as clockNow, nowIso } from '../../domain/clock.js';
import type { WebhookEventName } from '../../domain/webhook-events.js';
import { attemptOutcome, claimJob, dueJobs, Poller } from '../../db/jobs.js';

export interface DeliveryOptions {
  /** How often each instance looks for due events and deliveries. */
  pollMs: number;
  /** A receiver that has not answered by then counts as failed (and is tried again). */
  timeoutMs: number;
  /** Attempts before a delivery is given up as failed. */
  maxAttempts: number;
  /** The wait after the first failure; it doubles with each (with jitter), up to an hour. */
  backoffMs: number;
  /** The application's name, shown as the sender in Discord. */
  appName: string;
}

/** A claimed delivery is this instance's for this long; a crashed holder's claim lapses. */
const LEASE_SLACK_MS = 30_000;
const BATCH = 20;
/** Events (and their deliveries and attempts) are kept this long after they went out. */
const KEEP_MS = 30 * 24 * 60 * 60 * 1000;
const PRUNE_EVERY_MS = 60 * 60 * 1000;

/** The body and headers a receiver gets for one delivery. */
export function requestOf(
  webhook: Pick<WebhookRow, 'format' | 'secret'>,
  event: Pick<WebhookEventRow, 'id' | 'event' | 'data' | 'occurredAt'>,
  deliveryId: string,
  appName: string,
  at: number,
): { body: string; headers: Record<string, string> } {
  const data = JSON.parse(event.data) as Record<string, unknown> & { title?: string; text?: string };
  if (webhook.format === 'discord') {
    const body = JSON.stringify({
      username: appName,
      embeds: [
        {
          title: `${event.event}: ${data.title ?? ''}`.slice(0, 256),
          description: (data.text ?? '').slice(0, 4096),
          timestamp: event.occurredAt,
          footer: { text: appName },
        },
      ],
    });
    return { body, headers: { 'content-type': 'application/json' } };
  }
  const body = JSON.stringify({ id: event.id, event: event.event, occurredAt: event.occurredAt, data });
  const timestamp = String(Math.floor(at / 1000));
  const signature = createHmac('sha256', webhook.secret).update(`${timestamp}.${body}`).digest('hex');
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'user-agent': `${appName}-webhooks`,
      'x-webhook-id': deliveryId,
      'x-webhook-event': event.event,
      'x-webhook-timestamp': timestamp,
      'x-webhook-signature': `sha256=${signature}`,
    },
  };
}

/** Whether a scheduled publication is still what was scheduled when its event falls due. */
async function stillScheduled(db: Db, event: WebhookEventRow): Promise<boolean> {
  const name = event.event as WebhookEventName;
  const at = event.scheduledFor;
  if (at === null) return true;
  if (name === 'release.published') {
    const row = await db
      .selectFrom('releases')
      .select('publishAt')
      .where('id', '=', event.subjectId)
      .executeTakeFirst();
    return row?.publishAt === at;
  }
  if (name === 'article.published') {
    const row = await db
      .selectFrom('articles')
      .select(['publishAt', 'published'])
      .where('id', '=', event.subjectId)
      .executeTakeFirst();
    return row?.publishAt === at && row.published === 1;
  }
  if (name === 'game.build.published') {
    const build = await db
      .selectFrom('gameBuilds')
      .select(['publishAt', 'revokedAt'])
      .where('buildCode', '=', Number(event.subjectId))
      .executeTakeFirst();
    return build?.publishAt === at && build.revokedAt === null;
  }
  const row = await db
    .selectFrom('softwareVersions')
    .select(['publishAt', 'revokedAt'])
    .where('id', '=', event.subjectId)
    .executeTakeFirst();
  return row?.publishAt === at && row.revokedAt === null;
}

/**
 * Sends the outbox's events to the webhooks that take them. Every instance runs one: an event due
 * is fanned out to one delivery per matching webhook by whichever instance first marks it (a
 * conditional update), and a delivery due is sent by whichever instance claims it (a lease, by a
 * conditional update), so each goes out once however many instances run. A failed or timed-out
 * attempt is tried again with exponential backoff; every attempt is logged.
 */
export class WebhookWorker extends Poller {
  private prunedAt = 0;

  constructor(
    private readonly db: Db,
    private readonly options: DeliveryOptions,
  ) {
    super(options.pollMs);
  }

  /** One pass: fans out the events due, sends the deliveries due, and (hourly) forgets old events. */
  async tick(at = clockNow()): Promise<void> {
    await this.fanOut(at);
    await this.deliverDue(at);
    if (at - this.prunedAt >= PRUNE_EVERY_MS) {
      this.prunedAt = at;
      await this.prune(at);
    }
  }

  /**
   * Deletes events sent out more than `KEEP_MS` ago, with their deliveries and attempts (foreign
   * keys cascade): the delivery log covers the last 30 days.
   */
  async prune(at = clockNow()): Promise<void> {
    await this.db
      .deleteFrom('webhookEvents')
      .where('fannedOut', '=', 1)
      .where('dueMs', '<', at - KEEP_MS)
      .where((eb) =>
        eb.not(
          eb.exists(
            eb
              .selectFrom('webhookDeliveries')
              .select('webhookDeliveries.id')
              .whereRef('webhookDeliveries.eventId', '=', 'webhookEvents.id')
              .where('webhookDeliveries.status', '=', 'pending'),
          ),
        ),
      )
      .execute();
  }

  private async fanOut(at: number): Promise<void> {
    const due = await this.db
      .selectFrom('webhookEvents')
      .selectAll()
      .where('fannedOut', '=', 0)
      .where('dueMs', '<=', at)
      .orderBy('dueMs')
      .limit(100)
      .execute();
    if (due.length === 0) return;
    const webhooks = await this.db.selectFrom('webhooks').selectAll().where('enabled', '=', 1).execute();
    for (const event of due) {
      await this.db.transaction().execute(async (trx) => {
        const taken = await trx
          .updateTable('webhookEvents')
          .set({ fannedOut: 1 })
          .where('id', '=', event.id)
          .where('fannedOut', '=', 0)
          .executeTakeFirst();
        if (taken.numUpdatedRows === 0n || !(await stillScheduled(trx, event))) return;
        const targets =
          event.webhookId !== null
            ? webhooks.filter((w) => w.id === event.webhookId)
            : webhooks.filter((w) => (JSON.parse(w.events) as string[]).includes(event.event));
        if (targets.length === 0) return;
        await trx
          .insertInto('webhookDeliveries')
          .values(
            targets.map((w) => ({
              id: newId(),
              webhookId: w.id,
              eventId: event.id,
              status: 'pending' as const,
              nextAttemptMs: at,
              createdAt: nowIso(),
              lastStatus: null,
              lastError: null,
              deliveredAt: null,
            })),
          )
          .execute();
      });
    }
  }

  private async deliverDue(at: number): Promise<void> {
    const due = await dueJobs(this.db, 'webhookDeliveries', at, BATCH);
    // Each attempt has its own timeout: a receiver that hangs does not hold up the others.
    await Promise.all(due.map((id) => this.attempt(id, at)));
  }

  /** Claims a delivery and, when this instance got it, makes one attempt; answers whether it did. */
  async attempt(deliveryId: string, at = clockNow()): Promise<boolean> {
    const until = at + this.options.timeoutMs + LEASE_SLACK_MS;
    if (!(await claimJob(this.db, 'webhookDeliveries', deliveryId, at, until))) return false;
    const row = await this.db
      .selectFrom('webhookDeliveries')
      .innerJoin('webhooks', 'webhooks.id', 'webhookDeliveries.webhookId')
      .innerJoin('webhookEvents', 'webhookEvents.id', 'webhookDeliveries.eventId')
      .select([
        'webhookDeliveries.attempts',
        'webhooks.url',
        'webhooks.format',
        'webhooks.secret',
        'webhooks.enabled',
        'webhookEvents.id as eventId',
        'webhookEvents.event',
        'webhookEvents.data',
        'webhookEvents.occurredAt',
      ])
      .where('webhookDeliveries.id', '=', deliveryId)
      .executeTakeFirst();
    if (row === undefined) return false;
    const attempt = row.attempts + 1;
    let status: number | null = null;
    let error: string | null = null;
    const started = performance.now();
    if (row.enabled !== 1) {
      error = 'the webhook is disabled';
    } else {
      const request = requestOf(row, { ...row, id: row.eventId }, deliveryId, this.options.appName, clockNow());
      try {
        const res = await fetch(row.url, {
          method: 'POST',
          headers: request.headers,
          body: request.body,
          redirect: 'manual',
          signal: AbortSignal.timeout(this.options.timeoutMs),
        });
        status = res.status;
        await res.body?.cancel();
        if (res.status < 200 || res.status > 299) error = `the receiver answered ${res.status}`;
      } catch (err) {
        error =
          err instanceof Error && err.name === 'TimeoutError'
            ? `no answer within ${this.options.timeoutMs} ms`
            : String(err instanceof Error ? (err.cause ?? err.message) : err);
      }
    }
    const durationMs = Math.round(performance.now() - started);
    const delivered = error === null;
    const giveUp = !delivered && (attempt >= this.options.maxAttempts || row.enabled !== 1);
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('webhookAttempts')
        .values({ id: newId(), deliveryId, attempt, at: nowIso(), statusCode: status, error, durationMs })
        .execute();
      await trx
        .updateTable('webhookDeliveries')
        .set({
          ...attemptOutcome(delivered ? 'delivered' : null, attempt, giveUp, this.options.backoffMs, clockNow()),
          lastStatus: status,
          lastError: error,
          ...(delivered ? { deliveredAt: nowIso() } : {}),
        })
        .where('id', '=', deliveryId)
        .execute();
    });
    return true;
  }
}
