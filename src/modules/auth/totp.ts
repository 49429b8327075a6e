import { createHash, randomBytes } from 'node:crypto';
import { Secret, TOTP } from 'otpauth';
import { now } from '../../domain/clock.js';

/*
 * The second factor: RFC 6238 TOTP (SHA-1, 6 digits, 30 s, what every authenticator app takes) with
 * the `otpauth` library, one step of clock drift either way, each step accepted at most once; and
 * one-time recovery codes, stored as SHA-256 hashes.
 */

const PERIOD_S = 30;
const RECOVERY_CODES = 10;

function totp(secret: string, label: string, issuer: string): TOTP {
  return new TOTP({ issuer, label, secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: PERIOD_S });
}

/** A new secret and the `otpauth://` URL an authenticator app scans (as a QR code). */
export function newTotpSecret(label: string, issuer: string): { secret: string; otpauthUrl: string } {
  const secret = new Secret({ size: 20 }).base32;
  return { secret, otpauthUrl: totp(secret, label, issuer).toString() };
}

/**
 * The time step a 6-digit code is valid for now (±1 step), or null. Steps at or before `lastStep`
 * were used already: a code seen once is refused after that (replay).
 */
export function acceptedStep(secret: string, code: string, lastStep: number | null): number | null {
  if (!/^\d{6}$/.test(code)) return null;
  const at = now();
  const delta = totp(secret, '', '').validate({ token: code, timestamp: at, window: 1 });
  if (delta === null) return null;
  const step = Math.floor(at / 1000 / PERIOD_S) + delta;
  return lastStep !== null && step <= lastStep ? null : step;
}

/** The code an authenticator shows at `at` (tests, and nothing else, need this). */
export function totpCode(secret: string, at = now()): string {
  return totp(secret, '', '').generate({ timestamp: at });
}

export const hashRecoveryCode = (code: string) =>
  createHash('sha256').update(code.replace(/[\s-]/g, '').toLowerCase()).digest('hex');

/** Fresh recovery codes (`xxxxx-xxxxx`, shown once) and their hashes (stored). */
export function newRecoveryCodes(): { codes: string[]; hashes: string[] } {
  const codes = Array.from({ length: RECOVERY_CODES }, () => {
    const raw = randomBytes(8).toString('hex').slice(0, 10);
    return `${raw.slice(0, 5)}-${raw.slice(5)}`;
  });
  return { codes, hashes: codes.map(hashRecoveryCode) };
}
