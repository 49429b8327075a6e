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
  type StartupResult,
  type UpdateCheck,
  type UpdateInfo,
  UpdateManager,
  type UpdateManagerEvents,
  type UpdateManagerOptions,
} from './client.js';
export type { DeltaEngine, DeltaOffer } from './delta.js';
export type { Progress } from './download.js';
export {
  AbortedError,
  DigestError,
  type ErrorKind,
  HttpError,
  IntegrityError,
  LauncherClientError,
  NetworkError,
  PublisherSignatureError,
  SignatureError,
  StaleAnswerError,
  StateError,
} from './errors.js';
export { Heartbeat, type HeartbeatBody, type HeartbeatOptions } from './heartbeat.js';
export type { RetryOptions } from './http.js';
export type { LifecycleRecord, PackageFile, PendingInstall, PendingPatch } from './install.js';
export type { SigningKeyEntry, TrustedKey } from './trust.js';
export type { CheckedFile, ExpectedFile, FileCheck } from './verify.js';
