import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { pipeline, Transform } from 'node:stream';
import { Server as TusServer } from '@tus/server';
import { TUS_RESUMABLE, type Upload } from '@tus/utils';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { NodeRequest } from 'srvx/node';
import { now } from '../../domain/clock.js';
import { AppError, conflict, notFound } from '../../http/errors.js';
import { isGone, type ResumableStore } from '../../storage/resumable.js';
import type { Storage } from '../../storage/storage.js';
import { type FileService, keyForUpload, servedType, type UploadedFile } from './service.js';

export const RESUMABLE_PATH = '/api/admin/uploads';
const HOUR_MS = 3600 * 1000;
/** What the service offers of tus 1.0.0 (deferred lengths are not: the size limit is checked up front). */
const EXTENSIONS = ['creation', 'creation-with-upload', 'termination', 'expiration'];
const UPLOAD_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface ResumableOptions {
  maxBytes: number;
  expiryHours: number;
}

/** A tus error the hooks throw: the server answers it with this status and text. */
const tusError = (status_code: number, body: string) => ({ status_code, body });

/**
 * Passes the bytes through and fails, before the end, when they are not exactly `size`: a store
 * that answers an upload's object while another instance is still writing it (S3-compatible
 * servers that write in place) never gets a short copy stored.
 */
function exactly(size: number): Transform {
  let seen = 0;
  const wrong = () => new Error(`resumable upload read back ${seen} bytes, not its ${size}`);
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      done(seen > size ? wrong() : null, chunk);
    },
    flush(done) {
      done(seen === size ? null : wrong());
    },
  });
}

/**
 * An empty `Upload-Metadata` (what python3-tuspy sends for no metadata) is taken as none: the tus
 * server would refuse it as malformed.
 */
function dropEmptyMetadata(raw: IncomingMessage): void {
  const value = raw.headers['upload-metadata'];
  if (typeof value !== 'string' || value.trim() !== '') return;
  delete raw.headers['upload-metadata'];
  const kept = raw.rawHeaders.filter((_value, i, all) => all[i - (i % 2)]?.toLowerCase() !== 'upload-metadata');
  raw.rawHeaders.splice(0, raw.rawHeaders.length, ...kept);
}

function originalNameOf(upload: Upload): string {
  const name = upload.metadata?.filename;
  return typeof name === 'string' && name.trim() !== '' ? name : 'file';
}

/**
 * Resumable uploads (tus 1.0.0 with creation, termination and expiration) through `@tus/server`,
 * into the configured store's `.tus/` place. Once the last byte is in, the file is streamed once
 * from there into the store under a key like any upload's (hashed on the way, recorded in `files`)
 * and the unfinished upload's bytes are deleted; `GET` on the upload's URL then answers the stored
 * file. Instances sharing the store share the uploads.
 */
export class ResumableUploads {
  private readonly place: ResumableStore;
  private readonly tus: TusServer;
  private readonly expiryMs: number;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    storage: Storage,
    private readonly files: FileService,
    options: ResumableOptions,
  ) {
    this.expiryMs = options.expiryHours * HOUR_MS;
    this.place = storage.resumable(this.expiryMs);
    this.place.datastore.extensions = this.place.datastore.extensions.filter((e) => EXTENSIONS.includes(e));
    const prefix = this.place.idPrefix;
    this.tus = new TusServer({
      path: RESUMABLE_PATH,
      datastore: this.place.datastore,
      maxSize: options.maxBytes,
      relativeLocation: true,
      // CORS is the service's (@fastify/cors); tus adds only its exposed headers.
      allowedOrigins: () => false,
      namingFunction: () => prefix + randomUUID(),
      generateUrl: (_req, { path, id }) => `${path}/${id.slice(prefix.length)}`,
      getFileIdFromRequest: (_req, lastPath) =>
        lastPath !== undefined && UPLOAD_ID.test(lastPath) ? prefix + lastPath : undefined,
      onUploadCreate: async (_req, upload) => {
        if (upload.sizeIsDeferred) throw tusError(400, 'Upload-Length is required (deferred lengths are not offered)');
        return {};
      },
      onUploadFinish: async (_req, upload) => {
        await this.finish(upload);
        return {};
      },
    });
  }

  /** Answers a tus request (OPTIONS, POST, HEAD, PATCH, DELETE); every error as `{error}`. */
  async handle(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const version = request.headers['tus-resumable'];
    if (request.method !== 'OPTIONS' && version !== undefined && version !== TUS_RESUMABLE) {
      reply.header('Tus-Resumable', TUS_RESUMABLE).header('Tus-Version', TUS_RESUMABLE);
      throw new AppError(412, `Tus-Resumable: version ${String(version)} is not supported (1.0.0 is)`);
    }
    dropEmptyMetadata(request.raw);
    const answer = await this.tus.handleWeb(new NodeRequest({ req: request.raw, res: reply.raw }));
    if (answer.status === 404 && (request.method === 'HEAD' || request.method === 'PATCH')) {
      const finished = await this.finishedAnswer(request, reply);
      if (finished !== null) return finished;
    }
    answer.headers.forEach((value, name) => {
      if (name !== 'content-length' && name !== 'connection') reply.header(name, value);
    });
    if (answer.status >= 400) {
      const text = (await answer.text()).trim();
      // A failure of the store is logged and answered without its details, like every 5xx.
      if (answer.status >= 500) throw new Error(`resumable upload failed (${answer.status}): ${text}`);
      throw new AppError(answer.status, text === '' ? 'upload request refused' : text);
    }
    return reply.code(answer.status).send();
  }

  /**
   * tus 1.0 on an upload already finished (its bytes moved into the store, so the datastore no longer
   * knows it): until it expires, `HEAD` answers 200 with `Upload-Offset` = `Upload-Length`, and a
   * `PATCH` at that offset without bytes 204, so that a client resuming it sends nothing again.
   * Null when no stored file came from this upload.
   */
  private async finishedAnswer(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | null> {
    const id = request.url.split('?')[0]?.split('/').pop() ?? '';
    const stored = UPLOAD_ID.test(id) ? await this.files.findByUnique(id) : null;
    if (stored === null) return null;
    const expires = Date.parse(stored.createdAt) + this.expiryMs;
    if (now() > expires) throw new AppError(410, 'the upload expired');
    reply
      .header('Tus-Resumable', TUS_RESUMABLE)
      .header('Cache-Control', 'no-store')
      .header('Upload-Offset', String(stored.size))
      .header('Upload-Expires', new Date(expires).toUTCString());
    if (request.method === 'HEAD') return reply.code(200).header('Upload-Length', String(stored.size)).send();
    const offset = request.headers['upload-offset'];
    if (offset !== String(stored.size)) {
      throw conflict(`Upload-Offset: the upload is complete at ${stored.size} bytes (got ${String(offset)})`);
    }
    if (Number(request.headers['content-length'] ?? '0') > 0) {
      throw new AppError(413, `the upload is complete: it takes no bytes after its ${stored.size}`);
    }
    return reply.code(204).send();
  }

  /**
   * The stored file of a finished upload, finishing it first when its last request could not (the
   * store failed, or the process stopped): its bytes are kept until the stored file is recorded.
   */
  async result(id: string): Promise<UploadedFile> {
    const stored = await this.files.findByUnique(id);
    if (stored !== null) return stored;
    if (!UPLOAD_ID.test(id)) throw notFound('no such upload');
    try {
      const upload = await this.place.datastore.getUpload(this.place.idPrefix + id).catch((err: unknown) => {
        if (isGone(err)) throw notFound('no such upload (it was cancelled, or expired unfinished)');
        throw err;
      });
      if (upload.size === undefined || upload.offset < upload.size) {
        throw conflict(`upload not finished: ${upload.offset} of ${upload.size ?? '?'} bytes received`);
      }
      return await this.finish(upload);
    } catch (err) {
      // Finished meanwhile by another instance, which then removed the upload's bytes.
      const finished = await this.files.findByUnique(id);
      if (finished !== null) return finished;
      throw err;
    }
  }

  /**
   * Streams a complete upload into the store (hashing it) under a key made from its id, records it,
   * then deletes its unfinished copy. Finishing twice (two instances) stores the same bytes under the
   * same key twice; a copy read back short fails, and is never stored.
   */
  private async finish(upload: Upload): Promise<UploadedFile> {
    const id = upload.id.slice(this.place.idPrefix.length);
    const name = originalNameOf(upload);
    const created = upload.creation_date === undefined ? new Date(now()) : new Date(upload.creation_date);
    const key = keyForUpload(name, created, id);
    const source = pipeline(await this.place.read(id), exactly(upload.size ?? 0), () => undefined);
    const type = upload.metadata?.filetype;
    const stored = await this.files.upload(
      source,
      name,
      typeof type === 'string' && type !== '' ? type : servedType(name).contentType,
      key,
    );
    await this.place.remove(id);
    return stored;
  }

  /**
   * Deletes every upload created more than the expiry before `at`, finished or not, and whatever is
   * left of an upload without its record (bytes, or an S3 multipart upload with its parts).
   */
  async expire(at = now()): Promise<number> {
    let removed = 0;
    for (const id of await this.place.begunBefore(at - this.expiryMs)) {
      const upload = await this.place.datastore.getUpload(this.place.idPrefix + id).catch((err: unknown) => {
        if (isGone(err)) return null;
        throw err;
      });
      const created = upload?.creation_date === undefined ? 0 : Date.parse(upload.creation_date);
      if (upload !== null && created + this.expiryMs > at) continue;
      await this.place.remove(id);
      removed += 1;
    }
    return removed;
  }

  /** Sweeps expired uploads every `everyMs` (each instance; removing twice is harmless). */
  start(everyMs: number, onError: (err: unknown) => void): void {
    this.timer = setInterval(() => void this.expire().catch(onError), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
