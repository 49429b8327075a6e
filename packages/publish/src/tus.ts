/**
 * What the service's two tus clients share: this command and the admin console (which imports
 * this file, as it imports the service's own shared sources).
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
