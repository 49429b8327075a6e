import fs from 'node:fs';
import { pipeline } from 'node:stream/promises';
import type { Storage } from './storage.js';

/**
 * A file a program can read directly for the stored object `key`: the store's own file (local
 * store), else a copy of the object written to `copy`; null when the store has no such object.
 */
export async function localFileOf(storage: Storage, key: string, copy: string): Promise<string | null> {
  const direct = storage.localPath?.(key);
  if (direct !== undefined) return direct;
  if ((await storage.stat(key)) === null) return null;
  await pipeline(await storage.read(key), fs.createWriteStream(copy));
  return copy;
}
