import { ConfigError, type StorageConfig } from '../config.js';
import { LocalStorage } from './local.js';
import type { Storage } from './storage.js';

export function openStorage(config: StorageConfig): Promise<Storage> {
  if (config.kind === 'local') return Promise.resolve(new LocalStorage(config.root));
  return Promise.reject(
    new ConfigError('STORAGE=s3://… is not supported by this build yet; unset STORAGE for the local folder'),
  );
}
