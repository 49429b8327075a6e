/** The fixed windows the service's bounds count in (src/http/shared-limits.ts). */
export const MINUTE_MS = 60_000;
export const HOUR_MS = 3_600_000;

/**
 * Waits, when the current fixed window of `windowMs` has less than `needMs` left, until the next one
 * begins, so that all of a test's hits fall in one window: a test that crossed a boundary would see
 * its count start again (CI once saw a login throttle test do so). Waits at most `needMs`.
 */
export async function inOneWindow(windowMs: number, needMs = 5000): Promise<void> {
  const left = windowMs - (Date.now() % windowMs);
  if (left < needMs) await new Promise((resolve) => setTimeout(resolve, left + 50));
}
