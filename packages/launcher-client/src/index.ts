/**
 * launcher-client: the launcher's half of the distribution service. Start with `UpdateManager`.
 */
export {
  type AddonDependency,
  AddonManager,
  type AddonManagerOptions,
  type AddonManifest,
  type AddonOperationOptions,
  type AddonProgress,
  type AddonRelease,
  compareVersions,
  type InstalledSummary,
  type ListedAddon,
  type OutdatedAddon,
  type ScanReport,
  type UpdateReport,
} from './addons/manager.js';
export {
  type ArchiveLimits,
  DEFAULT_ARCHIVE_LIMITS,
  type ExtractedArchive,
  extractArchive,
  type HashedFile,
} from './disk/archive.js';
export {
  type AutomaticReason,
  type BackupReason,
  type BackupSummary,
  createSnapshot,
  DEFAULT_KEEP,
  listSnapshots,
  recoverRestore,
  removeSnapshot,
  restoreSnapshot,
  snapshotBeforeChange,
  type SnapshotOptions,
} from './backups/snapshots.js';
export {
  type AddonAnswer,
  type AddonReleaseFile,
  type AddonUpdatesAnswer,
  type CheckUpdateAnswer,
  DEFAULT_IN_PROCESS_DELTA_MAX_BYTES,
  type DownloadedUpdate,
  type DownloadOptions,
  type FolderMatchesAnswer,
  type InstalledAddon,
  type ReleaseByHashAnswer,
  type StartupResult,
  type UpdateCheck,
  type UpdateInfo,
  UpdateManager,
  type UpdateManagerEvents,
  type UpdateManagerOptions,
} from './update/manager.js';
export type { DeltaEngine, DeltaOffer } from './update/delta.js';
export type { Progress } from './net/download.js';
export {
  AbortedError,
  AnswerTooLargeError,
  ArchiveError,
  BlockedError,
  BusyError,
  ClockError,
  ConflictError,
  DigestError,
  DiskSpaceError,
  type ErrorKind,
  HttpError,
  InUseError,
  IntegrityError,
  LauncherClientError,
  type LockHolder,
  ManifestError,
  NetworkError,
  NotFoundError,
  PublisherSignatureError,
  RollbackError,
  SignatureError,
  StaleAnswerError,
  StateError,
  UnsafePathError,
  UsageError,
} from './errors.js';
export { archiveFingerprints, type FolderFingerprint, folderFingerprint } from './addons/fingerprint.js';
export {
  type GameBuild,
  type GameCheckAnswer,
  GameManager,
  type GameManagerEvents,
  type GameManagerOptions,
  type GameOperationOptions,
  type GameProgress,
  type GameRepairResult,
  type GameStatus,
  type GameUpdateResult,
  type GameVerifyResult,
  type MirrorReport,
} from './game/manager.js';
export { checkManifest, type GameManifest, type ManifestFile } from './game/manifest.js';
export { Heartbeat, type HeartbeatBody, type HeartbeatOptions } from './update/heartbeat.js';
export type { RetryOptions } from './net/http.js';
export {
  type LifecycleRecord,
  PACKAGE_EXTENSIONS,
  type PackageFile,
  type PendingInstall,
  type PendingPatch,
} from './update/install.js';
export type { SigningKeyEntry, TrustedKey } from './trust/keys.js';
export type { CheckedFile, ExpectedFile, FileCheck } from './trust/verify.js';
