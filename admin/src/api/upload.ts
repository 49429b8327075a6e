import { ApiError } from './client';
import type { Paths } from './client';

export type UploadResult = Paths['/api/upload']['post']['responses'][201]['content']['application/json'];

/**
 * `POST /api/upload` with XMLHttpRequest, because fetch cannot report upload progress.
 * `onProgress` receives 0..1.
 */
export function uploadFile(
  file: File,
  onProgress: (fraction: number) => void,
  signal?: AbortSignal,
): Promise<UploadResult> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', '/api/upload');
    xhr.withCredentials = true;
    xhr.responseType = 'text';
    xhr.upload.onprogress = (event) => {
      if (event.lengthComputable && event.total > 0) onProgress(event.loaded / event.total);
    };
    xhr.onload = () => {
      let body: unknown = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        // not JSON
      }
      if (xhr.status === 201 || xhr.status === 200) {
        onProgress(1);
        resolve(body as UploadResult);
        return;
      }
      const message =
        body !== null && typeof body === 'object' && typeof (body as { error?: unknown }).error === 'string'
          ? (body as { error: string }).error
          : xhr.statusText || 'upload failed';
      reject(new ApiError(xhr.status, message, '/api/upload'));
    };
    xhr.onerror = () => reject(new ApiError(0, 'network error', '/api/upload'));
    xhr.onabort = () => reject(new ApiError(0, 'upload cancelled', '/api/upload'));
    signal?.addEventListener('abort', () => xhr.abort());
    const form = new FormData();
    form.append('file', file, file.name);
    xhr.send(form);
  });
}
