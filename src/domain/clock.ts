import { randomUUID } from 'node:crypto';

let last = 0;

/**
 * The current time as an ISO 8601 UTC string, strictly increasing within this process, so that rows
 * created in the same millisecond still order by creation.
 */
export function nowIso(): string {
  const now = Math.max(Date.now(), last + 1);
  last = now;
  return new Date(now).toISOString();
}

/** Opaque ids for every resource. */
export function newId(): string {
  return randomUUID();
}
