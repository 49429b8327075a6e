import type { Generated, Insertable, Selectable, Updateable } from 'kysely';

/** Flags are stored as 0/1 integers on both engines so one schema and one set of queries serve both. */
export type Flag = number;

export interface UsersTable {
  id: string;
  username: string;
  passwordHash: string;
  /** `owner`, `publisher` or `editor` (domain/roles). */
  role: string;
  /** 0/1: a disabled account can neither log in nor use its sessions and tokens. */
  disabled: number;
  /** Base32 TOTP secret: pending while `totpEnabled` is 0, in force once confirmed. */
  totpSecret: string | null;
  totpEnabled: number;
  /** The last TOTP time step accepted: a code is never accepted twice. */
  totpLastStep: number | null;
  /** JSON array of SHA-256 hashes of the unused recovery codes. */
  recoveryCodes: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface SessionsTable {
  id: string;
  userId: string;
  tokenHash: string;
  createdAt: string;
  lastSeenAt: string;
}

export interface ApiTokensTable {
  id: string;
  userId: string;
  name: string;
  /** The role the token acts with, never above its creator's (domain/roles `tokenRole`). */
  role: string;
  tokenHash: string;
  createdAt: string;
  lastUsedAt: string | null;
}

export interface FilesTable {
  key: string;
  originalName: string;
  size: number;
  sha256: string;
  contentType: string;
  createdAt: string;
}

export interface SoftwarePackagesTable {
  id: string;
  slug: string;
  nameZh: string;
  nameEn: string;
  descriptionZh: string;
  descriptionEn: string;
  createdAt: string;
  updatedAt: string;
}

export interface SoftwareVersionsTable {
  id: string;
  packageId: string;
  version: string;
  versionCode: number;
  changelogZh: string;
  changelogEn: string;
  downloadType: 'local' | 'url';
  filePath: string;
  externalUrl: string | null;
  fileSize: number;
  sha256: string | null;
  forceUpdate: Flag;
  minVersion: string | null;
  isLatest: Flag;
  wowVersion: string;
  downloadCount: Generated<number>;
  launcherDownloadCount: Generated<number>;
  createdAt: string;
  publishAt: Generated<string | null>;
  rolloutPercent: Generated<number>;
  revokedAt: Generated<string | null>;
  /** JSON `{maxQuietRate, minDevices}`. */
  autoHalt: Generated<string | null>;
  haltedAt: Generated<string | null>;
  haltReason: Generated<string | null>;
  /** The publisher's minisign signature of the file, `.minisig` text (migration 010). */
  fileSignature: Generated<string | null>;
}

export interface AddonsTable {
  id: string;
  slug: string;
  nameZh: string;
  nameEn: string;
  summaryZh: string;
  summaryEn: string;
  descriptionZh: string;
  descriptionEn: string;
  iconUrl: string | null;
  category: string;
  published: Flag;
  totalDownloads: Generated<number>;
  createdAt: string;
  updatedAt: string;
  /** The counter version of the addon's last counted download (migration 007). */
  counterSeq: Generated<number>;
}

export interface ReleasesTable {
  id: string;
  addonId: string;
  version: string;
  changelogZh: string;
  changelogEn: string;
  downloadType: 'local' | 'url';
  filePath: string;
  externalUrl: string | null;
  fileSize: number;
  sha256: string | null;
  gameVersion: string;
  downloadCount: Generated<number>;
  isLatest: Flag;
  wowVersion: string;
  createdAt: string;
  publishAt: Generated<string | null>;
  /** JSON text of `ReleaseDependency[]` (migration 006). */
  dependencies: Generated<string>;
  /** The counter version of the row's last counted download (migration 007). */
  counterSeq: Generated<number>;
  /** The publisher's minisign signature of the file, `.minisig` text (migration 010). */
  fileSignature: Generated<string | null>;
}

export interface ScreenshotsTable {
  id: string;
  addonId: string;
  imageUrl: string;
  sortOrder: number;
  createdAt: string;
}

export interface ArticlesTable {
  id: string;
  slug: string;
  titleZh: string;
  titleEn: string;
  summaryZh: string;
  summaryEn: string;
  contentZh: string;
  contentEn: string;
  coverImage: string;
  published: Flag;
  createdAt: string;
  updatedAt: string;
  publishAt: Generated<string | null>;
}

export interface BannersTable {
  id: string;
  imageUrl: string;
  sortOrder: number;
  enabled: Flag;
  createdAt: string;
}

export interface GalleryImagesTable {
  id: string;
  imageUrl: string;
  titleZh: string;
  titleEn: string;
  sortOrder: number;
  enabled: Flag;
  createdAt: string;
}

export interface DevicesTable {
  deviceId: string;
  os: string | null;
  osVersion: string | null;
  appVersion: string | null;
  ip: string | null;
  firstSeenAt: string;
  lastSeenAt: string;
  heartbeatCount: number;
}

/** Per device and reported app version: when heartbeats on it were first and last seen (epoch ms). */
export interface DeviceVersionsTable {
  deviceId: string;
  appVersion: string;
  firstSeenMs: number;
  lastSeenMs: number;
  quietFromMs: number | null;
}

/** Ed25519 keys; `publicKey` is base64 of the raw 32 bytes, `privateKey` PKCS#8 PEM. */
export interface SigningKeysTable {
  id: string;
  publicKey: string;
  privateKey: string;
  createdAt: string;
  retiredAt: string | null;
  endorsedBy: string | null;
  endorsement: string | null;
}

/** Daily roll-up of counted downloads, by kind (`installer`, `launcher`, `addon`). */
export interface DownloadDailyTable {
  day: string;
  kind: string;
  count: number;
}

/**
 * Row `id = 1`: its `version` every content write bumps, so each instance can tell its caches are stale.
 * Row `id = 2` (migration 002): bumped by every counted release download (addon download counters).
 */
export interface ContentStateTable {
  id: number;
  version: number;
}

/** One fixed window of a per-client counter shared by every instance (src/http/shared-limits.ts). */
export interface RateCountersTable {
  key: string;
  windowStart: number;
  windowEnd: number;
  count: number;
}

/** Members of a per-client set for one clock hour, shared by every instance (src/http/shared-limits.ts). */
export interface HourlyMembersTable {
  key: string;
  hourStart: number;
  member: string;
}

/** Online launchers by app version, one row per 5-minute slot and version (devices/housekeeping). */
export interface DeviceSamplesTable {
  at: string;
  appVersion: string;
  online: number;
}

/** A job that one instance at a time runs: whoever holds an unexpired lease. */
export interface JobLeasesTable {
  name: string;
  holder: string;
  expiresMs: number;
}

/** One administrator change, login or logout (src/modules/audit/log.ts). */
export interface AuditLogTable {
  id: string;
  at: string;
  /** The account (or, for a login, the name tried). */
  actor: string;
  /** The API token the account acted through, if any. */
  tokenName: string | null;
  ip: string;
  action: string;
  targetType: string;
  targetId: string | null;
  /** JSON of the fields sent, secrets replaced. */
  changes: string;
}

/** A random key shared by every instance, created on first use (src/db/secrets.ts). */
export interface ServerSecretsTable {
  name: string;
  /** Base64 of 32 random bytes. */
  value: string;
  createdAt: string;
}

/** A receiver of webhook events (migration 008). */
export interface WebhooksTable {
  id: string;
  url: string;
  format: 'json' | 'discord';
  /** JSON text of the event names it receives. */
  events: string;
  secret: string;
  enabled: Flag;
  createdAt: string;
  updatedAt: string;
}

/** The webhook outbox: one row per event, written in the change's transaction. */
export interface WebhookEventsTable {
  id: string;
  event: string;
  subjectId: string;
  /** JSON text of the event's data. */
  data: string;
  occurredAt: string;
  dueMs: number;
  scheduledFor: string | null;
  fannedOut: Generated<Flag>;
  webhookId: string | null;
}

export interface WebhookDeliveriesTable {
  id: string;
  webhookId: string;
  eventId: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: Generated<number>;
  nextAttemptMs: number;
  leaseUntilMs: Generated<number>;
  lastStatus: number | null;
  lastError: string | null;
  createdAt: string;
  deliveredAt: string | null;
}

export interface WebhookAttemptsTable {
  id: string;
  deliveryId: string;
  attempt: number;
  at: string;
  statusCode: number | null;
  error: string | null;
  durationMs: number;
}

/** A delta of one software version's file from an earlier version's (migration 009), and the job that makes it. */
export interface SoftwareDeltasTable {
  id: string;
  sourceVersionId: string;
  targetVersionId: string;
  /** The files the delta is made from and rebuilds: a version whose file changed since offers none. */
  sourceSha256: string;
  targetSha256: string;
  status: 'pending' | 'ready' | 'skipped' | 'failed';
  attempts: Generated<number>;
  nextAttemptMs: number;
  leaseUntilMs: Generated<number>;
  /** Store key of the delta file (ready only). */
  fileKey: string | null;
  fileSize: number | null;
  sha256: string | null;
  error: string | null;
  createdAt: string;
  updatedAt: string;
}

/** A request's `Idempotency-Key` (hashed with its user and route) and, once it succeeded, its answer. */
export interface IdempotencyKeysTable {
  key: string;
  /** SHA-256 of the request's URL and body. */
  fingerprint: string;
  /** Null while the first request with the key is running. */
  statusCode: number | null;
  response: string | null;
  createdAt: string;
}

/** A top-level folder of a release's stored zip and its fingerprint (migration 013). */
export interface ReleaseFoldersTable {
  releaseId: string;
  folder: string;
  fingerprint: string;
}

/** The stored file a release's folders were fingerprinted from (migration 013): none when not a zip. */
export interface ReleaseFingerprintsTable {
  releaseId: string;
  filePath: string;
  sha256: string | null;
  createdAt: string;
}

export interface GameBuildsTable {
  buildCode: number;
  version: string;
  changelogZh: string;
  changelogEn: string;
  forceUpdate: Flag;
  publishAt: string | null;
  revokedAt: string | null;
  /** The manifest's exact text, served as its UTF-8 bytes. */
  manifest: string;
  manifestSha256: string;
  manifestSize: number;
  manifestSignature: string | null;
  totalSize: number;
  fileCount: number;
  chunkCount: number;
  /** Bytes of chunks that no earlier build named when this one was created. */
  newBytes: number;
  downloadCount: number;
  createdAt: string;
  updatedAt: string;
  /**
   * The first player-safety rule (game-files.md, 2026-12-05) the manifest breaks: a build stored
   * before the rules, kept and listed but never offered. Null for every build created since.
   */
  broken: string | null;
}

export interface GameBuildChunksTable {
  buildCode: number;
  sha256: string;
}

export interface GameChunksTable {
  sha256: string;
  size: number;
  createdAt: string;
  /** Renewed by each upload, missing-query and build naming it; the sweep keys on it. */
  touchedAt: string;
}

export interface Database {
  users: UsersTable;
  sessions: SessionsTable;
  apiTokens: ApiTokensTable;
  rateCounters: RateCountersTable;
  hourlyMembers: HourlyMembersTable;
  deviceSamples: DeviceSamplesTable;
  jobLeases: JobLeasesTable;
  auditLog: AuditLogTable;
  files: FilesTable;
  softwarePackages: SoftwarePackagesTable;
  softwareVersions: SoftwareVersionsTable;
  gameBuilds: GameBuildsTable;
  gameBuildChunks: GameBuildChunksTable;
  gameChunks: GameChunksTable;
  addons: AddonsTable;
  releases: ReleasesTable;
  screenshots: ScreenshotsTable;
  articles: ArticlesTable;
  banners: BannersTable;
  galleryImages: GalleryImagesTable;
  devices: DevicesTable;
  deviceVersions: DeviceVersionsTable;
  signingKeys: SigningKeysTable;
  downloadDaily: DownloadDailyTable;
  contentState: ContentStateTable;
  serverSecrets: ServerSecretsTable;
  webhooks: WebhooksTable;
  webhookEvents: WebhookEventsTable;
  webhookDeliveries: WebhookDeliveriesTable;
  webhookAttempts: WebhookAttemptsTable;
  softwareDeltas: SoftwareDeltasTable;
  idempotencyKeys: IdempotencyKeysTable;
  releaseFolders: ReleaseFoldersTable;
  releaseFingerprints: ReleaseFingerprintsTable;
}

export type UserRow = Selectable<UsersTable>;
export type FileRow = Selectable<FilesTable>;
export type PackageRow = Selectable<SoftwarePackagesTable>;
export type VersionRow = Selectable<SoftwareVersionsTable>;
export type GameBuildRow = Selectable<GameBuildsTable>;
export type NewVersion = Insertable<SoftwareVersionsTable>;
export type VersionUpdate = Updateable<SoftwareVersionsTable>;
export type AddonRow = Selectable<AddonsTable>;
export type ReleaseRow = Selectable<ReleasesTable>;
export type ScreenshotRow = Selectable<ScreenshotsTable>;
export type ArticleRow = Selectable<ArticlesTable>;
export type BannerRow = Selectable<BannersTable>;
export type GalleryRow = Selectable<GalleryImagesTable>;
export type DeviceRow = Selectable<DevicesTable>;
export type DeviceVersionRow = Selectable<DeviceVersionsTable>;
export type SigningKeyRow = Selectable<SigningKeysTable>;
export type ReleaseUpdate = Updateable<ReleasesTable>;
export type AddonUpdate = Updateable<AddonsTable>;
export type WebhookRow = Selectable<WebhooksTable>;
export type WebhookEventRow = Selectable<WebhookEventsTable>;
export type WebhookDeliveryRow = Selectable<WebhookDeliveriesTable>;
export type WebhookAttemptRow = Selectable<WebhookAttemptsTable>;
export type DeltaRow = Selectable<SoftwareDeltasTable>;
