/**
 * launcher-client: the launcher's half of the distribution service. Start with `UpdateManager`.
 */
export {
  type AddonUpdatesAnswer,
  type CheckUpdateAnswer,
  type DownloadedUpdate,
  type DownloadOptions,
  type InstalledAddon,
  type ReleaseByHashAnswer,
  type UpdateCheck,
  type UpdateInfo,
  UpdateManager,
  type UpdateManagerOptions,
} from './client.js';
export type { DeltaOffer } from './delta.js';
export type { Progress } from './download.js';
export {
  AbortedError,
  AnswerTooLargeError,
  DigestError,
  type ErrorKind,
  HttpError,
  IntegrityError,
  LauncherClientError,
  NetworkError,
  PublisherSignatureError,
  RollbackError,
  SignatureError,
  StaleAnswerError,
  StateError,
} from './errors.js';
export { Heartbeat, type HeartbeatBody, type HeartbeatOptions } from './heartbeat.js';
export type { RetryOptions } from './http.js';
export type { SigningKeyEntry, TrustedKey } from './trust.js';
export type { CheckedFile, ExpectedFile, FileCheck } from './verify.js';
