import type { Db } from '../../db/index.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import type { WebhookEventName } from '../../domain/webhook-events.js';

/** What an event is about: a software version, a release, an article or an addon. */
export interface EventSubject {
  readonly id: string;
  /** Title and text for people (Discord's embed); `url` where it can be seen, when there is one. */
  readonly title: string;
  readonly text?: string;
}

/**
 * Writes an event to the webhook outbox, in the transaction of the change it tells of (`trx`), so
 * that a change committed always has its event and a change rolled back never does. A publication
 * scheduled for later (`publishAt` in the future) is due then, and is checked again when due: if
 * the item was deleted or rescheduled meanwhile, it is dropped.
 */
export async function recordEvent(
  trx: Db,
  event: WebhookEventName,
  subject: EventSubject,
  data: Record<string, unknown>,
  publishAt: string | null = null,
): Promise<void> {
  const scheduled = publishAt !== null && Date.parse(publishAt) > now();
  await trx
    .insertInto('webhookEvents')
    .values({
      id: newId(),
      event,
      subjectId: subject.id,
      data: JSON.stringify({ ...data, title: subject.title, ...(subject.text ? { text: subject.text } : {}) }),
      occurredAt: scheduled ? publishAt : nowIso(),
      dueMs: scheduled ? Date.parse(publishAt) : now(),
      scheduledFor: scheduled ? publishAt : null,
      webhookId: null,
    })
    .execute();
}

/** Whether a write's new `publishAt` publishes the item now or later where it was not so before. */
export function newlyPublished(before: string | null, after: string | null, at = now()): boolean {
  const wasOut = before === null || Date.parse(before) <= at;
  const isOut = after === null || Date.parse(after) <= at;
  // Out now after being scheduled, or (re)scheduled for a new future time.
  return (isOut && !wasOut) || (!isOut && after !== before);
}
