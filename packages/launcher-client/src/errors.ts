/**
 * Every failure the library reports is one of these, with a `kind` a program can switch on (the CLI
 * prints it). Verification failures (`signature`, `digest`, `stale`, `integrity`) mean the answer or
 * file was refused and nothing from it was used or kept.
 */
export type ErrorKind =
  'signature' | 'digest' | 'stale' | 'integrity' | 'http' | 'network' | 'aborted' | 'state' | 'usage';

export abstract class LauncherClientError extends Error {
  abstract readonly kind: ErrorKind;
  /** True for a refused answer or file (a possible attack), false for an ordinary failure. */
  get verification(): boolean {
    return VERIFICATION_KINDS.has(this.kind);
  }
}

const VERIFICATION_KINDS: ReadonlySet<ErrorKind> = new Set(['signature', 'digest', 'stale', 'integrity']);

/** The answer has no valid RFC 9421 signature by a trusted key (missing, malformed, untrusted, wrong). */
export class SignatureError extends LauncherClientError {
  override readonly name = 'SignatureError';
  readonly kind = 'signature';
}

/** The answer's `Content-Digest` is missing, malformed, or not the SHA-256 of the bytes received. */
export class DigestError extends LauncherClientError {
  override readonly name = 'DigestError';
  readonly kind = 'digest';
}

/** The answer was signed too long ago, or before an answer of the same URL already accepted (a replay). */
export class StaleAnswerError extends LauncherClientError {
  override readonly name = 'StaleAnswerError';
  readonly kind = 'stale';
}

/** A downloaded file's size or SHA-256 is not what the verified answer said (the file is deleted). */
export class IntegrityError extends LauncherClientError {
  override readonly name = 'IntegrityError';
  readonly kind = 'integrity';
}

/** The service answered with an unexpected status. */
export class HttpError extends LauncherClientError {
  override readonly name = 'HttpError';
  readonly kind = 'http';
  constructor(
    readonly status: number,
    readonly url: string,
    /** The answer's `{error}` text, when it had one. */
    readonly serverMessage: string | null,
    /** The answer's `Retry-After` in ms, when it had one. */
    readonly retryAfterMs: number | null = null,
  ) {
    super(`${url} answered ${status}${serverMessage ? `: ${serverMessage}` : ''}`);
  }
}

/** The request did not get an answer (refused, reset, timed out, cut off). */
export class NetworkError extends LauncherClientError {
  override readonly name = 'NetworkError';
  readonly kind = 'network';
}

/** The caller's `AbortSignal` fired. */
export class AbortedError extends LauncherClientError {
  override readonly name = 'AbortedError';
  readonly kind = 'aborted';
}

/** The state folder could not be read or written, or holds something unreadable. */
export class StateError extends LauncherClientError {
  override readonly name = 'StateError';
  readonly kind = 'state';
}
