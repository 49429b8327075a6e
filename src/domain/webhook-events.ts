/** The events a webhook may subscribe to (shared with the admin console, which offers them). */
export const WEBHOOK_EVENTS = [
  'version.published',
  'version.rollout_changed',
  'version.revoked',
  'release.published',
  'article.published',
  'addon.created',
  'game.build.published',
  'game.build.revoked',
] as const;

export type WebhookEventName = (typeof WEBHOOK_EVENTS)[number];
