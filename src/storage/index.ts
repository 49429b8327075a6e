import type { StorageConfig } from '../config.js';
import { LocalStorage } from './local.js';
import { S3Storage } from './s3.js';
import type { Storage } from './storage.js';

/** The configured file store: a local folder (default) or an S3-compatible bucket (`STORAGE=s3://…`). */
export function openStorage(config: StorageConfig): Promise<Storage> {
  if (config.kind === 'local') return Promise.resolve(new LocalStorage(config.root));
  return Promise.resolve(new S3Storage(config));
}
