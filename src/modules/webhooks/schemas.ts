import { Type } from 'typebox';
import { StringEnum } from '../../http/schemas.js';
import { MAX_URL } from '../../http/urls.js';
import { WEBHOOK_EVENTS } from '../../domain/webhook-events.js';

const Url = Type.String({
  minLength: 1,
  maxLength: MAX_URL,
  format: 'http-url',
  description: 'http(s) URL the events are POSTed to',
});
const Format = StringEnum(['json', 'discord'], {
  description:
    '`json`: `{id, event, occurredAt, data}` signed with HMAC-SHA256 (`X-Webhook-Signature`); `discord`: an embed for a Discord webhook URL',
});
const Events = Type.Array(StringEnum([...WEBHOOK_EVENTS]), { minItems: 1, maxItems: WEBHOOK_EVENTS.length * 2 });

export const WebhookCreateBody = Type.Object(
  { url: Url, format: Type.Optional(Format), events: Events, enabled: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);

export const WebhookUpdateBody = Type.Object(
  {
    url: Type.Optional(Url),
    format: Type.Optional(Format),
    events: Type.Optional(Events),
    enabled: Type.Optional(Type.Boolean()),
    rotateSecret: Type.Optional(Type.Boolean({ description: 'true: a new secret, answered this once' })),
  },
  { additionalProperties: false },
);

export const WebhookSchema = Type.Object({
  id: Type.String(),
  url: Type.String(),
  format: Format,
  events: Type.Array(Type.String()),
  enabled: Type.Boolean(),
  secretHint: Type.String(),
  secret: Type.Optional(Type.String({ description: 'only when created or rotated' })),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

const Nullable = <T extends ReturnType<typeof Type.String> | ReturnType<typeof Type.Integer>>(t: T) =>
  Type.Union([t, Type.Null()]);

export const DeliverySchema = Type.Object({
  id: Type.String(),
  eventId: Type.String(),
  event: Type.String(),
  status: StringEnum(['pending', 'delivered', 'failed']),
  attempts: Type.Integer(),
  lastStatus: Nullable(Type.Integer()),
  lastError: Nullable(Type.String()),
  nextAttemptAt: Nullable(Type.String()),
  createdAt: Type.String(),
  deliveredAt: Nullable(Type.String()),
  log: Type.Array(
    Type.Object({
      attempt: Type.Integer(),
      at: Type.String(),
      statusCode: Nullable(Type.Integer()),
      error: Nullable(Type.String()),
      durationMs: Type.Integer(),
    }),
  ),
});
