import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import parseRange from 'range-parser';
import type { DownloadOffload } from '../../config.js';
import type { Db, Engine } from '../../db/index.js';
import { notFound } from '../../http/errors.js';
import { canonicalHttpUrl } from '../../http/urls.js';
import { keyFromFilePath, type ObjectInfo, type Storage } from '../../storage/storage.js';
import type { FileService } from '../files/service.js';
import { servedType } from '../files/service.js';
import { DownloadCounter, type DownloadKind } from './counting.js';

/** What a download endpoint serves: a file in the store or an external link. */
export type DownloadTarget =
  | {
      type: 'local';
      filePath: string;
      fileName: string;
      sha256: string | null;
      /**
       * What the database records of the stored object (size, last change; null: not stored), when it
       * does: asked instead of the store when the answer is a presigned redirect, which then costs
       * the store no request.
       */
      recorded?: () => Promise<ObjectInfo | null>;
    }
  | { type: 'url'; url: string };

export interface ServeOptions {
  /** Runs once when the request is a counted download (GET from byte 0, or a redirect). */
  count?: () => Promise<void>;
  /** `attachment` for downloads; `auto` serves images inline (the `/uploads/` route). */
  disposition: 'attachment' | 'auto';
}

/** RFC 6266 `Content-Disposition` with an ASCII fallback and the RFC 5987 UTF-8 name. */
export function contentDisposition(type: 'attachment' | 'inline', fileName: string): string {
  const ascii =
    fileName
      .normalize('NFKD')
      .replace(/[^\x20-\x7e]/g, '_')
      .replace(/["\\%]/g, '_') || 'download';
  const encoded = encodeURIComponent(fileName).replace(
    /['()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `${type}; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}

/** Whether an `If-None-Match` header names `etag` (or `*`). */
export function etagMatches(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

/**
 * Where the proxy finds a stored object: `prefix` + the key, each segment percent-encoded (nginx
 * and Apache's mod_xsendfile decode it), so that any key makes a valid, ASCII header value.
 */
export function offloadLocation(offload: DownloadOffload, key: string): string {
  return offload.prefix + key.split('/').map(encodeURIComponent).join('/');
}

/** The 416 answer's message for a file of `size` bytes. */
const unsatisfiable = (size: number) => `range not satisfiable for a file of ${size} bytes`;

/**
 * The bytes a GET asks of a representation of `size` bytes (RFC 9110 `Range`, honoured when
 * `If-Range` is absent or names `etag` or `lastModified`), with `reply` set up for them: 206 and
 * `Content-Range` for one range; the whole for none, a malformed header or several ranges (as RFC
 * 9110 allows), `exact` false for the latter two; null with 416 and `Content-Range` set when no
 * range is satisfiable (the caller sends the error body).
 */
export function requestedRange(
  request: FastifyRequest,
  reply: FastifyReply,
  size: number,
  etag: string,
  lastModified: Date | null,
): { start: number; end: number; exact: boolean } | null {
  const whole = { start: 0, end: size - 1, exact: true };
  const header = request.headers.range;
  const ifRange = request.headers['if-range'];
  const applies =
    typeof header === 'string' &&
    (ifRange === undefined || ifRange === etag || (lastModified !== null && ifRange === lastModified.toUTCString()));
  if (!applies) return whole;
  const ranges = parseRange(size, header, { combine: true });
  if (ranges === -1) {
    reply
      .code(416)
      .header('Content-Range', `bytes */${size}`)
      .header('Content-Type', 'application/json; charset=utf-8');
    return null;
  }
  const first = ranges !== -2 && ranges.type === 'bytes' && ranges.length === 1 ? ranges[0] : undefined;
  if (first === undefined) return { ...whole, exact: false };
  reply.code(206).header('Content-Range', `bytes ${first.start}-${first.end}/${size}`);
  return { start: first.start, end: first.end, exact: !header.includes(',') };
}

/**
 * The one download path: conditional requests, ranges, HEAD, redirects and counting, streaming
 * from the store so that memory stays flat whatever the file size.
 */
export class DownloadService {
  private readonly counter: DownloadCounter;

  constructor(
    db: Db,
    private readonly storage: Storage,
    private readonly files: FileService,
    private readonly options: {
      engine: Engine;
      offload: DownloadOffload | null;
      /** Told of committed counted downloads (metrics). */
      onCounted?: ((kind: DownloadKind, count: number) => void) | undefined;
    },
  ) {
    this.counter = new DownloadCounter(db, options.engine, options.onCounted);
  }

  async serve(request: FastifyRequest, reply: FastifyReply, target: DownloadTarget, options: ServeOptions) {
    const counted = request.method === 'GET';
    if (target.type === 'url') {
      // Count only a redirect that will certainly be sent: its Location is a valid http(s) URL.
      const location = canonicalHttpUrl(target.url);
      if (location === null) throw notFound('the download link is not a valid http(s) URL');
      if (counted) await options.count?.();
      return reply.code(302).header('Cache-Control', 'no-store').redirect(location);
    }
    const key = keyFromFilePath(target.filePath);
    if (key === null) throw notFound('file not found');
    // Object storage may hand a GET's bytes out itself: a redirect, counted unless it resumes
    // (HEAD stays here: a URL presigned for GET does not answer HEAD).
    const presigned =
      counted && options.disposition === 'attachment' ? await this.storage.presignedUrl?.(key, target.fileName) : null;
    const info = presigned && target.recorded ? await target.recorded() : await this.storage.stat(key);
    if (info === null) throw notFound('file not found');

    const etag = `"${target.sha256 ?? `${info.size.toString(16)}-${info.lastModified.getTime().toString(16)}`}"`;
    const { contentType, inline } = servedType(target.fileName);
    const disposition = options.disposition === 'auto' && inline ? 'inline' : 'attachment';
    reply
      .header('Accept-Ranges', 'bytes')
      .header('ETag', etag)
      .header('Last-Modified', info.lastModified.toUTCString())
      .header('Content-Type', disposition === 'inline' ? contentType : 'application/octet-stream')
      .header('Content-Disposition', contentDisposition(disposition, target.fileName))
      .header('X-Content-Type-Options', 'nosniff');

    if (etagMatches(request.headers['if-none-match'], etag)) return reply.code(304).send();

    if (presigned) {
      const resumed = typeof request.headers.range === 'string' && !/^bytes=\s*0-/.test(request.headers.range);
      if (!resumed) await options.count?.();
      reply.removeHeader('Content-Disposition');
      return reply.code(302).header('Cache-Control', 'no-store').redirect(presigned);
    }

    const range = requestedRange(request, reply, info.size, etag, info.lastModified);
    if (range === null) return reply.removeHeader('Content-Disposition').send({ error: unsatisfiable(info.size) });
    const { start, end } = range;
    // The proxy applies Range itself; it is handed only requests it answers as decided here.
    const proxyAgrees = range.exact;
    const length = info.size === 0 ? 0 : end - start + 1;
    reply.header('Content-Length', length);
    // An empty stream, not an empty body: Fastify's HEAD handling would otherwise set Content-Length: 0.
    if (request.method === 'HEAD') return reply.send(Readable.from([]));
    const offload = this.options.offload;
    if (length > 0 && proxyAgrees && offload !== null && this.storage.kind === 'local') {
      if (start === 0) await options.count?.();
      // The proxy sets these for the bytes it sends (Accept-Ranges too: it would appear twice).
      reply.removeHeader('Content-Range').removeHeader('Content-Length').removeHeader('Accept-Ranges');
      return reply.code(200).header(offload.header, offloadLocation(offload, key)).send('');
    }
    // The file is opened before the download is counted: a file that cannot be read counts nothing.
    const body = length === 0 ? '' : await this.storage.read(key, { start, end }, info);
    if (start === 0 && options.count) {
      try {
        await options.count();
      } catch (err) {
        if (typeof body !== 'string') body.destroy();
        throw err;
      }
    }
    return reply.send(body);
  }

  /** One counted download of a software version; `launcher` also counts as a launcher self-update. */
  countVersion(versionId: string, launcher: boolean): Promise<void> {
    return this.counter.version(versionId, launcher);
  }

  /** One counted download of a game build (its manifest fetched). */
  countGameBuild(buildCode: number): Promise<void> {
    return this.counter.gameBuild(buildCode);
  }

  /** One counted download of an addon release: the release's count, the addon's total and the counter version. */
  countRelease(releaseId: string, addonId: string): Promise<void> {
    return this.counter.release(releaseId, addonId);
  }

  /** The download file name of a stored file: its uploaded name, else `fallback()` (looked up only then). */
  async fileName(filePath: string, fallback: () => string | Promise<string>): Promise<string> {
    const key = keyFromFilePath(filePath);
    const original = key === null ? null : await this.files.originalName(key);
    return original ?? fallback();
  }
}
