/**
 * What the service's two tus clients share: this command and the admin console (which imports
 * it as `patchwell-publish/tus`).
 */
import type { Upload } from 'tus-js-client';

/** Bytes per upload request: below common proxies' body caps (Cloudflare stops at 100 MB). */
export const CHUNK_BYTES = 50 * 1024 * 1024;

/** Starts `upload`, resuming the upload of the same file its URL storage remembers, if there is one. */
export async function startResuming(upload: Upload): Promise<void> {
  const [previous] = await upload.findPreviousUploads();
  if (previous !== undefined) upload.resumeFromPreviousUpload(previous);
  upload.start();
}

/**
 * Seconds to wait before asking again for a finished upload's file while the service answers 503
 * (its store failed to take the file for now; the bytes are kept): about a minute in all.
 */
const STORE_RETRY_SECONDS = [2, 5, 10, 10, 15, 15];

/**
 * `get` (the GET of a finished upload's URL), asked again after a pause each time it fails with
 * status 503, until it answers or the pauses are used up (then its error).
 */
export async function storedFile<T>(get: () => Promise<T>): Promise<T> {
  for (const seconds of STORE_RETRY_SECONDS) {
    try {
      return await get();
    } catch (err) {
      if ((err as { status?: unknown }).status !== 503) throw err;
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    }
  }
  return get();
}
