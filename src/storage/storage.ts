import type { Readable } from 'node:stream';
import type { ResumableStore } from './resumable.js';

export interface ByteRange {
  /** First byte, inclusive. */
  start: number;
  /** Last byte, inclusive. */
  end: number;
}

export interface ObjectInfo {
  size: number;
  lastModified: Date;
}

/** A stored object as a listing names it. */
export interface ListedObject {
  key: string;
  lastModified: Date;
}

/** A key `deleteMany` could not delete, and why. */
export interface FailedDelete {
  key: string;
  error: unknown;
}

export interface WrittenObject {
  size: number;
  sha256: string;
}

/**
 * The file store: a local folder on one machine, an S3-compatible bucket for many. Keys are
 * relative, `/`-separated paths that `isSafeKey` accepts.
 */
export interface Storage {
  readonly kind: 'local' | 's3';
  /** Streams `source` into `key`, hashing as it goes; the object appears only once complete. */
  write(key: string, source: Readable, contentType: string): Promise<WrittenObject>;
  stat(key: string): Promise<ObjectInfo | null>;
  /** `checked`: what `stat` of this key just answered, so that a store may skip checks it made then. */
  read(key: string, range?: ByteRange, checked?: ObjectInfo): Promise<Readable>;
  delete(key: string): Promise<void>;
  /**
   * Deletes each of `keys` (one already gone is fine) several at a time, or in a request per
   * thousand: answers those that could not be deleted, each with its error.
   */
  deleteMany(keys: readonly string[]): Promise<FailedDelete[]>;
  /**
   * Every stored key (not the store's own `.tmp`/`.tus` places), streamed a folder or a page at a
   * time; none under the folder `except` (`name/`), which the local store does not even walk.
   */
  list(except?: string): AsyncIterable<ListedObject>;
  /** The file holding a key's bytes, for a program to read directly (local store only); null when absent. */
  localPath?(key: string): string | null;
  /** A short-lived URL a client may download from directly, when the operator enabled it. */
  presignedUrl?(key: string, fileName: string): Promise<string | null>;
  /** Where resumable uploads wait until complete; each expires `expiryMs` after its creation. */
  resumable(expiryMs: number): ResumableStore;
  close?(): Promise<void>;
}

/** The longest key `isSafeKey` accepts. */
export const KEY_MAX_LENGTH = 512;
/** Characters no key holds: backslashes and control characters. */
// eslint-disable-next-line no-control-regex
export const NOT_IN_KEY = /[\\\u0000-\u001f\u007f]/;

/**
 * Store-relative path without absolute parts, backslashes, control characters, empty segments or
 * segments starting with a dot (`.`, `..`, and the store's own `.tmp`).
 */
export function isSafeKey(key: string): boolean {
  if (key === '' || key.length > KEY_MAX_LENGTH) return false;
  if (NOT_IN_KEY.test(key)) return false;
  return key.split('/').every((seg) => seg !== '' && !seg.startsWith('.'));
}

export const UPLOADS_PREFIX = '/uploads/';

/** The store key a public `filePath` (`/uploads/…`) names, or null when it names nothing in the store. */
export function keyFromFilePath(filePath: string): string | null {
  if (!filePath.startsWith(UPLOADS_PREFIX)) return null;
  const key = filePath.slice(UPLOADS_PREFIX.length);
  return isSafeKey(key) ? key : null;
}

export function filePathFromKey(key: string): string {
  return UPLOADS_PREFIX + key;
}
