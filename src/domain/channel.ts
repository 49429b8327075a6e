/** The only client channel offered; every `wow` / `wowVersion` value resolves to it. */
export const CHANNEL = '1.18';

/** The spec's channel rule: omitted, historical or unknown values (and cookies) all give `1.18`. */
export function resolveChannel(_requested?: unknown): typeof CHANNEL {
  return CHANNEL;
}
