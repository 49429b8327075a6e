/**
 * The resumable upload of a build: tus (tus-js-client) to the service's `/api/admin/uploads`,
 * resuming an interrupted upload of the same file from where the service holds it.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { DefaultHttpStack, type DetailedError, Upload } from 'tus-js-client';
import { type Api, type Failure, retryAfterMs, type StoredFile } from './api.js';
import type { Progress } from './progress.js';
import { FileUrlStorage } from './state.js';
import { CHUNK_BYTES, startResuming, storedFile } from './tus.js';

export interface LocalFile {
  path: string;
  name: string;
  size: number;
  sha256: string;
}

/** Size and SHA-256 of a file, streamed. */
export async function describeFile(file: string): Promise<LocalFile> {
  let size: number;
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) throw new Error('not a file');
    size = stat.size;
  } catch (err) {
    throw new Error(`--file: cannot read ${file} (${(err as Error).message})`, { cause: err });
  }
  const hash = createHash('sha256');
  await pipeline(fs.createReadStream(file), hash);
  return { path: file, name: path.basename(file), size, sha256: hash.digest('hex') };
}

export interface UploadOptions {
  state: FileUrlStorage;
  progress: Progress;
  chunkBytes?: number;
}

/**
 * Uploads `file` (or resumes its remembered upload) and answers the stored file. The upload URL is
 * remembered under the file's server, size and SHA-256 until the service has the whole file.
 */
export async function uploadFile(api: Api, file: LocalFile, options: UploadOptions): Promise<StoredFile> {
  const fingerprint = fingerprintOf(api, file);
  const remembered = options.state.urlOf(fingerprint);
  if (remembered !== null) {
    // Finished before (the version was not created then): the service still has the stored file.
    const finished = await api.json<StoredFile>('GET', remembered).catch(() => null);
    if (finished !== null && finished.sha256 === file.sha256) return finished;
  }
  const url = await new Promise<string>((resolve, reject) => {
    const upload = new Upload(fs.createReadStream(file.path), {
      endpoint: api.url('/api/admin/uploads'),
      headers: api.headers,
      metadata: { filename: file.name, filetype: 'application/octet-stream' },
      uploadSize: file.size,
      chunkSize: options.chunkBytes ?? CHUNK_BYTES,
      httpStack: new DefaultHttpStack({ agent: api.agent }),
      // The command's retry policy, not tus-js-client's own (which ignores Retry-After).
      retryDelays: api.retryDelays(),
      onShouldRetry: (err, attempt, upload) => {
        const wait = api.retryWait(attempt, tusFailure(err), TUS_RETRIED);
        if (wait === null || !upload.retryDelays) return false;
        upload.retryDelays[attempt] = wait;
        return true;
      },
      fingerprint: async () => fingerprint,
      urlStorage: options.state,
      storeFingerprintForResuming: true,
      // Kept until the stored file is read back below, then forgotten by the caller.
      removeFingerprintOnSuccess: false,
      onProgress: options.progress,
      onSuccess: () => resolve(upload.url ?? ''),
      onError: reject,
    });
    startResuming(upload).catch(reject);
  });
  const stored = await storedFile(() => api.json<StoredFile>('GET', url));
  if (stored.sha256 !== file.sha256 || stored.size !== file.size) {
    throw new Error(`the service stored ${stored.size} bytes with SHA-256 ${stored.sha256}, not this file`);
  }
  return stored;
}

/** Besides the policy's: 409 (the offset moved: another run's PATCH) and 423 (the upload locked), resumed. */
const TUS_RETRIED = [409, 423];

/** A failed tus request as the retry policy sees it. */
function tusFailure(err: DetailedError): Failure {
  const response = err.originalResponse;
  const status = response === null ? null : response.getStatus();
  const request = err.originalRequest;
  const cause = err.causingError?.message ?? err.message;
  return {
    status,
    retryAfterMs: retryAfterMs(response?.getHeader('retry-after')),
    message: `${request.getMethod()} ${new URL(request.getURL()).pathname}: ${status ?? cause}`,
  };
}

/** A file's identity in the state file: the server, its size and its SHA-256. */
function fingerprintOf(api: Api, file: LocalFile): string {
  return `${api.server} ${file.size} ${file.sha256}`;
}

/** Forgets a file's upload once its version or release exists. */
export async function forgetUpload(api: Api, file: LocalFile, state: FileUrlStorage): Promise<void> {
  await state.removeUpload(fingerprintOf(api, file));
}
