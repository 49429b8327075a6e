import type { Readable } from 'node:stream';
import type { DataStore } from '@tus/utils';

/** Where resumable (tus) uploads keep their bytes until they are complete: hidden from store keys. */
export const RESUMABLE_FOLDER = '.tus';

/**
 * A store's place for unfinished resumable uploads: a `@tus` datastore over the same folder or
 * bucket, under `.tus/` (a segment `isSafeKey` refuses, so nothing there is ever served or
 * referenced). Upload ids are random UUIDs; `idPrefix` turns one into the datastore's name for it.
 */
export interface ResumableStore {
  readonly datastore: DataStore;
  readonly idPrefix: string;
  /** The bytes of a complete upload, streamed. */
  read(id: string): Promise<Readable>;
  /**
   * The ids of every upload with anything kept that was begun before `before` (ms): its record, its
   * bytes, or (S3) a multipart upload left without a record when its creation failed half-way.
   */
  begunBefore(before: number): Promise<string[]>;
  /**
   * Deletes an upload's bytes and records, whatever is left of them (S3: its multipart upload is
   * aborted, with or without a record); nothing when already gone.
   */
  remove(id: string): Promise<void>;
}

/** The datastore's "no such upload" answers (its errors are plain `{status_code, body}` objects). */
export function isGone(err: unknown): boolean {
  const status = (err as { status_code?: unknown } | null)?.status_code;
  return status === 404 || status === 410;
}
