import { randomUUID } from 'node:crypto';

let source: () => number = Date.now;
let last = 0;

/**
 * The service's notion of "now" (epoch milliseconds): scheduled publishing, rollout health and
 * heartbeat times read it here, so tests can run them on a controlled clock instead of sleeping.
 */
export function now(): number {
  return source();
}

/** Runs the service's clock from `clock` (tests), or from the system clock again with `null`. */
export function setClock(clock: (() => number) | null): void {
  source = clock ?? Date.now;
}

/**
 * The current time as an ISO 8601 UTC string, strictly increasing within this process, so that rows
 * created in the same millisecond still order by creation.
 */
export function nowIso(): string {
  const at = Math.max(now(), last + 1);
  last = at;
  return new Date(at).toISOString();
}

/** Opaque ids for every resource. */
export function newId(): string {
  return randomUUID();
}
