import type { ContentCache } from './db/content-writes.js';
import type { Config } from './config.js';
import type { Db, Engine } from './db/index.js';
import type { AuthService } from './modules/auth/service.js';
import type { DeviceHousekeeping } from './modules/devices/housekeeping.js';
import type { DeltaWorker } from './modules/deltas/worker.js';
import type { DeviceService } from './modules/devices/service.js';
import type { DownloadService } from './modules/downloads/service.js';
import type { WebhookWorker } from './modules/webhooks/worker.js';
import type { ResumableUploads } from './modules/files/resumable.js';
import type { StoredUploadSweep } from './modules/files/sweep.js';
import type { FileService } from './modules/files/service.js';
import type { GameChunks } from './modules/game/chunks.js';
import type { SharedLimits } from './http/shared-limits.js';
import type { Signer } from './modules/signing/signer.js';
import type { Storage } from './storage/storage.js';

/** What every module is built from; passed explicitly, never hung on the Fastify instance. */
export interface AppContext {
  readonly config: Config;
  readonly db: Db;
  /** For reads that scan many rows, off the event loop (`DatabaseHandle.reads`); never for writes. */
  readonly reads: Db;
  readonly engine: Engine;
  readonly storage: Storage;
  readonly cache: ContentCache;
  readonly signer: Signer;
  readonly auth: AuthService;
  readonly files: FileService;
  /** Resumable (tus) uploads; their expiry sweep is started by the server. */
  readonly resumable: ResumableUploads;
  /** Deletes old stored files nothing names (started by the server, like the resumable expiry). */
  readonly uploadSweep: StoredUploadSweep;
  readonly downloads: DownloadService;
  /** The game client's stored chunks (swept with the stored uploads). */
  readonly gameChunks: GameChunks;
  readonly limits: SharedLimits;
  readonly housekeeping: DeviceHousekeeping;
  readonly devices: DeviceService;
  /** Sends the webhook outbox (started by the server, like the housekeeping). */
  readonly webhooks: WebhookWorker;
  /** Makes delta updates (started by the server when DELTAS is on and zstd is installed). */
  readonly deltas: DeltaWorker;
}
