import { DetailedError, Upload } from 'tus-js-client';
import { ApiError } from './client';
import type { Paths } from './client';
import { CHUNK_BYTES, startResuming, storedFile } from 'patchwell-publish/tus';

export type UploadResult = Paths['/api/admin/uploads/{id}']['get']['responses'][200]['content']['application/json'];

const ENDPOINT = '/api/admin/uploads';

/** The service's `{error}` message of a failed tus request, else the client's own. */
function apiError(error: Error): ApiError {
  if (error instanceof DetailedError && error.originalResponse !== null) {
    const status = error.originalResponse.getStatus();
    try {
      const body = JSON.parse(error.originalResponse.getBody()) as { error?: unknown };
      if (typeof body.error === 'string') return new ApiError(status, body.error, ENDPOINT);
    } catch {
      // not JSON
    }
    return new ApiError(status, error.message, ENDPOINT);
  }
  return new ApiError(0, error.message, ENDPOINT);
}

/**
 * A resumable upload (tus, `/api/admin/uploads`) in chunks: a dropped connection is retried from
 * where the service holds the file, and choosing the same file again after a closed tab resumes it
 * (tus-js-client remembers the upload in localStorage by the file's name, type, size and date).
 * `onProgress` receives 0..1; the answer is the stored file, as the multipart upload answers it.
 */
export function uploadFile(
  file: File,
  onProgress: (fraction: number) => void,
  signal?: AbortSignal,
): Promise<UploadResult> {
  return new Promise((resolve, reject) => {
    const upload = new Upload(file, {
      endpoint: ENDPOINT,
      metadata: { filename: file.name, filetype: file.type || 'application/octet-stream' },
      chunkSize: CHUNK_BYTES,
      retryDelays: [0, 1000, 3000, 5000, 10000, 20000],
      removeFingerprintOnSuccess: true,
      onProgress: (sent, total) => onProgress(total > 0 ? sent / total : 0),
      onSuccess: () => {
        const url = upload.url ?? '';
        storedFile(async () => {
          const res = await fetch(url, { credentials: 'same-origin' });
          const body = (await res.json()) as UploadResult | { error?: string };
          if (!res.ok) throw new ApiError(res.status, 'error' in body ? (body.error ?? res.statusText) : '', url);
          return body as UploadResult;
        })
          .then((stored) => {
            onProgress(1);
            resolve(stored);
          })
          .catch(reject);
      },
      onError: (error) => reject(apiError(error)),
    });
    signal?.addEventListener('abort', () => {
      void upload.abort(true);
      reject(new ApiError(0, 'upload cancelled', ENDPOINT));
    });
    startResuming(upload).catch(reject);
  });
}
