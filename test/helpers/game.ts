import { createHash } from 'node:crypto';
import type { TestApp } from './app.js';

/** Hex SHA-256 of bytes, computed here without the service's code. */
export const sha256Of = (bytes: Buffer | string): string => createHash('sha256').update(bytes).digest('hex');

export interface GameFile {
  path: string;
  content: Buffer;
  /** Cut into chunks of this many bytes (default: one chunk). */
  chunkBytes?: number;
  extra?: Record<string, unknown>;
}

export interface BuiltManifest {
  text: string;
  /** Every chunk the manifest names, by its name. */
  chunks: Map<string, Buffer>;
}

/** A manifest of `files` for `app`/`version`/`buildCode` (fixed-size chunks: how they are cut is the publisher's business). */
export function manifestOf(
  build: { app?: string; version: string; buildCode: number },
  files: readonly GameFile[],
  extra: Record<string, unknown> = {},
): BuiltManifest {
  const chunks = new Map<string, Buffer>();
  const listed = files.map((file) => {
    const step = file.chunkBytes ?? Math.max(file.content.length, 1);
    const list: [string, number][] = [];
    for (let at = 0; at < file.content.length; at += step) {
      const piece = file.content.subarray(at, at + step);
      const name = sha256Of(piece);
      chunks.set(name, piece);
      list.push([name, piece.length]);
    }
    return { path: file.path, size: file.content.length, sha256: sha256Of(file.content), chunks: list, ...file.extra };
  });
  const text = JSON.stringify({
    format: 1,
    app: build.app ?? 'app',
    version: build.version,
    buildCode: build.buildCode,
    files: listed,
    ...extra,
  });
  return { text, chunks };
}

export function putChunk(t: TestApp, name: string, bytes: Buffer) {
  return t.inject({
    method: 'PUT',
    url: `/api/admin/game/chunks/${name}`,
    headers: { cookie: t.cookie, 'content-type': 'application/octet-stream' },
    payload: bytes,
  });
}

/** Uploads the manifest's chunks, then creates the build: the answer to the creation. */
export async function publishBuild(
  t: TestApp,
  build: { version: string; buildCode: number },
  manifest: BuiltManifest,
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
) {
  for (const [name, bytes] of manifest.chunks) {
    const res = await putChunk(t, name, bytes);
    if (res.statusCode !== 201 && res.statusCode !== 200) throw new Error(`chunk ${res.statusCode}: ${res.body}`);
  }
  return t.inject({
    method: 'POST',
    url: '/api/admin/game/builds',
    headers: { cookie: t.cookie, ...headers },
    payload: { ...build, manifest: manifest.text, ...body },
  });
}
