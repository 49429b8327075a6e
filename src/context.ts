import type { ContentCache } from './cache.js';
import type { Config } from './config.js';
import type { Db, Engine } from './db/index.js';
import type { AuthService } from './modules/auth/service.js';
import type { DeviceService } from './modules/devices/service.js';
import type { DownloadService } from './modules/downloads/service.js';
import type { FileService } from './modules/files/service.js';
import type { Signer } from './signing.js';
import type { Storage } from './storage/storage.js';

/** What every module is built from; passed explicitly, never hung on the Fastify instance. */
export interface AppContext {
  readonly config: Config;
  readonly db: Db;
  readonly engine: Engine;
  readonly storage: Storage;
  readonly cache: ContentCache;
  readonly signer: Signer;
  readonly auth: AuthService;
  readonly files: FileService;
  readonly downloads: DownloadService;
  readonly devices: DeviceService;
}
