import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { Upload } from 'tus-js-client';
import { admin, type TestApp } from './app.js';

/** The app listening on loopback (port 0): its base URL. */
export async function listen(t: TestApp): Promise<string> {
  await t.app.server.listen({ port: 0, host: '127.0.0.1' });
  const { port } = t.app.server.server.address() as AddressInfo;
  return `http://127.0.0.1:${port}`;
}

/** A new API token of the administrator. */
export async function apiToken(t: TestApp): Promise<string> {
  const res = await admin(t, 'POST', '/api/admin/tokens', { name: `tus-${Math.random()}` });
  if (res.statusCode !== 201) throw new Error(`token: ${res.statusCode} ${res.body}`);
  return res.json<{ token: string }>().token;
}

export interface TusOptions {
  chunkSize?: number;
  uploadUrl?: string;
  size?: number;
  /** Called with the bytes the server holds, once per accepted chunk. */
  onChunk?: (accepted: number) => void;
  /** Stops after this many accepted bytes (at a chunk's end) and answers the URL. */
  stopAfter?: number;
  /** Sends the first chunk with the creation request (creation-with-upload). */
  withCreation?: boolean;
}

/** Uploads `input` with tus-js-client (a real tus client) and answers the upload's URL. */
export function tusUpload(
  base: string,
  token: string,
  input: Buffer | Readable,
  name: string,
  options: TusOptions = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const upload: Upload = new Upload(input, {
      endpoint: `${base}/api/admin/uploads`,
      headers: { authorization: `Bearer ${token}` },
      metadata: { filename: name },
      chunkSize: options.chunkSize ?? 256 * 1024,
      retryDelays: [],
      uploadDataDuringCreation: options.withCreation ?? false,
      ...(options.size !== undefined ? { uploadSize: options.size } : {}),
      ...(options.uploadUrl !== undefined ? { uploadUrl: options.uploadUrl } : {}),
      onChunkComplete: (_chunk, accepted) => {
        options.onChunk?.(accepted);
        if (options.stopAfter !== undefined && accepted >= options.stopAfter) {
          void upload.abort().then(() => resolve(upload.url ?? ''));
        }
      },
      onSuccess: () => resolve(upload.url ?? ''),
      onError: reject,
    });
    upload.start();
  });
}
