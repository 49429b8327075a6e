import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { S3Store } from '@tus/s3-store';
import {
  AbortMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  type GetObjectCommandOutput,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  type MultipartUpload,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { StorageConfig } from '../config.js';
import { contentDisposition } from '../modules/downloads/service.js';
import { hashingCounter } from './local.js';
import { isGone, RESUMABLE_FOLDER, type ResumableStore } from './resumable.js';
import {
  type ByteRange,
  type FailedDelete,
  isSafeKey,
  type ListedObject,
  type ObjectInfo,
  type Storage,
  type WrittenObject,
} from './storage.js';

export type S3StorageConfig = Extract<StorageConfig, { kind: 's3' }>;

/** Multipart part size: memory per upload is about `PART_SIZE × QUEUE_SIZE`, whatever the file size. */
const PART_SIZE = 8 * 1024 * 1024;
const QUEUE_SIZE = 4;
/** Keys per DeleteObjects request: S3 takes at most 1,000. */
const DELETE_BATCH = 1000;

function isNotFound(err: unknown): boolean {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } } | null;
  return e?.name === 'NotFound' || e?.name === 'NoSuchKey' || e?.$metadata?.httpStatusCode === 404;
}

/**
 * tus's S3 store, whose `remove` (termination) also deletes the short tail it keeps as `<id>.part`,
 * and whose `read` completes a multipart upload that holds every byte but was never completed (its
 * last PATCH stored the last part, then S3 failed or the process stopped before completing it).
 */
class ResumableS3Store extends S3Store {
  override async remove(id: string): Promise<void> {
    await super.remove(id);
    await this.client.deleteObject({ Bucket: this.bucket, Key: this.partKey(id, true) });
  }

  override async read(id: string): Promise<Readable> {
    try {
      return await super.read(id);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    await this.complete(id).catch((err: unknown) => {
      // Completed meanwhile (another instance): the object is there now.
      if (!isNotFound(err)) throw err;
    });
    return super.read(id);
  }

  private async complete(id: string): Promise<void> {
    const metadata = await this.getMetadata(id);
    const parts = await this.retrieveParts(id);
    const held = parts.reduce((sum, part) => sum + (part.Size ?? 0), 0);
    if (held !== metadata.file.size) {
      throw new Error(`resumable upload ${id} is not complete: ${held} of ${metadata.file.size ?? '?'} bytes`);
    }
    await this.finishMultipartUpload(metadata, parts);
    await this.clearCache(id);
  }
}

/** An object's body as a Node stream. */
function bodyStream(body: GetObjectCommandOutput['Body']): Readable {
  if (body instanceof Readable) return body;
  if (body === undefined) return Readable.from([]);
  // Other runtimes answer a web stream; Node answers a Readable (kept above).
  return Readable.fromWeb(body.transformToWebStream() as Parameters<typeof Readable.fromWeb>[0]);
}

/**
 * S3-compatible object storage (AWS S3, MinIO, Ceph, R2, …) through the AWS SDK. Credentials come
 * from the SDK's default chain (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, profiles, instance roles).
 * Uploads stream as multipart uploads, so an object only appears once it is complete.
 */
export class S3Storage implements Storage {
  readonly kind = 's3' as const;
  readonly client: S3Client;
  private readonly presignClient: S3Client;
  /** The client settings, kept for the resumable uploads' own client. */
  private readonly clientConfig: S3ClientConfig;

  constructor(
    private readonly config: S3StorageConfig,
    overrides: Partial<S3ClientConfig> = {},
  ) {
    const clientConfig = (endpoint: string | null): S3ClientConfig => ({
      region: config.region,
      forcePathStyle: config.forcePathStyle,
      ...(endpoint !== null
        ? {
            endpoint,
            // S3-compatible servers vary in their support of the newer default checksums; the
            // service hashes every upload itself (sha256), so ask for checksums only where S3 requires them.
            requestChecksumCalculation: 'WHEN_REQUIRED' as const,
            responseChecksumValidation: 'WHEN_REQUIRED' as const,
          }
        : {}),
      ...overrides,
    });
    this.clientConfig = clientConfig(config.endpoint);
    this.client = new S3Client(this.clientConfig);
    // Signing is local: a second client only changes the host that presigned URLs name.
    this.presignClient =
      config.publicEndpoint === null ? this.client : new S3Client(clientConfig(config.publicEndpoint));
  }

  /** The object key of a store key: under the configured prefix. */
  private objectKey(key: string): string {
    if (!isSafeKey(key)) throw new Error(`unsafe storage key: ${key}`);
    return this.config.prefix === '' ? key : `${this.config.prefix}/${key}`;
  }

  async write(key: string, source: Readable, contentType: string): Promise<WrittenObject> {
    const counter = hashingCounter();
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.config.bucket, Key: this.objectKey(key), Body: counter, ContentType: contentType },
      partSize: PART_SIZE,
      queueSize: QUEUE_SIZE,
      leavePartsOnError: false,
    });
    const piping = pipeline(source, counter);
    // Surfaced below; an error here also fails the upload that reads `counter`.
    piping.catch(() => undefined);
    try {
      await upload.done();
      await piping;
    } catch (err) {
      source.destroy();
      counter.destroy();
      throw err;
    }
    return counter.digest();
  }

  async stat(key: string): Promise<ObjectInfo | null> {
    try {
      const head = await this.client.send(
        new HeadObjectCommand({ Bucket: this.config.bucket, Key: this.objectKey(key) }),
      );
      return { size: head.ContentLength ?? 0, lastModified: head.LastModified ?? new Date(0) };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async read(key: string, range?: ByteRange): Promise<Readable> {
    const answer = await this.client.send(
      new GetObjectCommand({
        Bucket: this.config.bucket,
        Key: this.objectKey(key),
        ...(range ? { Range: `bytes=${range.start}-${range.end}` } : {}),
      }),
    );
    return bodyStream(answer.Body);
  }

  async delete(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.config.bucket, Key: this.objectKey(key) }));
  }

  /** A DeleteObjects request per thousand keys (S3's limit), one after another. */
  async deleteMany(keys: readonly string[]): Promise<FailedDelete[]> {
    const failed: FailedDelete[] = [];
    for (let at = 0; at < keys.length; at += DELETE_BATCH) {
      const batch = keys.slice(at, at + DELETE_BATCH);
      try {
        const named = new Map(batch.map((key) => [this.objectKey(key), key]));
        const answer = await this.client.send(
          new DeleteObjectsCommand({
            Bucket: this.config.bucket,
            Delete: { Objects: [...named.keys()].map((Key) => ({ Key })), Quiet: true },
          }),
        );
        for (const error of answer.Errors ?? []) {
          const key = named.get(error.Key ?? '') ?? error.Key ?? '';
          failed.push({ key, error: new Error(`deleting ${key}: ${error.Code ?? 'error'} ${error.Message ?? ''}`) });
        }
      } catch (error) {
        failed.push(...batch.map((key) => ({ key, error })));
      }
    }
    return failed;
  }

  /** The objects under the prefix, a page (up to 1000) at a time; keys the store would refuse (`.tus/…`) skipped. */
  async *list(except?: string): AsyncIterable<ListedObject> {
    const prefix = this.config.prefix === '' ? '' : `${this.config.prefix}/`;
    let token: string | undefined;
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.config.bucket, Prefix: prefix, ContinuationToken: token }),
      );
      for (const object of page.Contents ?? []) {
        const key = (object.Key ?? '').slice(prefix.length);
        if (isSafeKey(key) && (except === undefined || !key.startsWith(except))) {
          yield { key, lastModified: object.LastModified ?? new Date(0) };
        }
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
  }

  /** A short-lived GET URL that downloads as an attachment named `fileName`; null when not enabled. */
  async presignedUrl(key: string, fileName: string): Promise<string | null> {
    if (!this.config.presignDownloads) return null;
    const command = new GetObjectCommand({
      Bucket: this.config.bucket,
      Key: this.objectKey(key),
      ResponseContentDisposition: contentDisposition('attachment', fileName),
      ResponseContentType: 'application/octet-stream',
    });
    return getSignedUrl(this.presignClient, command, { expiresIn: this.config.presignSeconds });
  }

  close(): Promise<void> {
    this.client.destroy();
    if (this.presignClient !== this.client) this.presignClient.destroy();
    return Promise.resolve();
  }

  /**
   * Resumable uploads as S3 multipart uploads under `<prefix>/.tus/` in the same bucket (with
   * `<id>.info` records and a `<id>.part` for a tail shorter than a part), so every instance sees them.
   */
  resumable(expiryMs: number): ResumableStore {
    const bucket = this.config.bucket;
    const idPrefix = `${this.config.prefix === '' ? '' : `${this.config.prefix}/`}${RESUMABLE_FOLDER}/`;
    const datastore = new ResumableS3Store({
      partSize: PART_SIZE,
      expirationPeriodInMilliseconds: expiryMs,
      // Expiry is the service's own sweep (on its clock), not bucket lifecycle rules on tags.
      useTags: false,
      s3ClientConfig: { ...this.clientConfig, bucket },
    });
    const client = this.client;
    /** The multipart uploads (not completed, not aborted) whose keys begin with `prefix`. */
    async function multipartUploads(prefix: string): Promise<MultipartUpload[]> {
      const uploads: MultipartUpload[] = [];
      let keyMarker: string | undefined;
      let uploadIdMarker: string | undefined;
      for (;;) {
        const page = await client.send(
          new ListMultipartUploadsCommand({
            Bucket: bucket,
            Prefix: prefix,
            KeyMarker: keyMarker,
            UploadIdMarker: uploadIdMarker,
          }),
        );
        uploads.push(...(page.Uploads ?? []));
        if (!page.IsTruncated) return uploads;
        keyMarker = page.NextKeyMarker;
        uploadIdMarker = page.NextUploadIdMarker;
      }
    }
    return {
      datastore,
      idPrefix,
      read: (id) => datastore.read(idPrefix + id),
      async begunBefore(before) {
        const ids = new Set<string>();
        // Records (`<id>.info`, never rewritten), completed uploads' objects and tails.
        let token: string | undefined;
        do {
          const page = await client.send(
            new ListObjectsV2Command({ Bucket: bucket, Prefix: idPrefix, ContinuationToken: token }),
          );
          for (const object of page.Contents ?? []) {
            if ((object.LastModified?.getTime() ?? 0) >= before) continue;
            ids.add((object.Key ?? '').slice(idPrefix.length).replace(/\.(info|part)$/, ''));
          }
          token = page.IsTruncated ? page.NextContinuationToken : undefined;
        } while (token !== undefined);
        // Multipart uploads, recorded or not (a creation that stopped before writing its record).
        for (const upload of await multipartUploads(idPrefix)) {
          if ((upload.Initiated?.getTime() ?? 0) < before) ids.add((upload.Key ?? '').slice(idPrefix.length));
        }
        return [...ids].filter((id) => id !== '');
      },
      async remove(id) {
        const name = idPrefix + id;
        // Aborts the multipart upload its record names (its parts); then whatever objects remain of it go.
        await datastore.remove(name).catch(async (err: unknown) => {
          if (!isGone(err)) throw err;
          // No record, or its multipart upload is gone already: any multipart upload under its name is aborted.
          for (const upload of await multipartUploads(name)) {
            if (upload.Key !== name) continue;
            await client.send(
              new AbortMultipartUploadCommand({ Bucket: bucket, Key: name, UploadId: upload.UploadId }),
            );
          }
        });
        await client.send(
          new DeleteObjectsCommand({
            Bucket: bucket,
            Delete: { Objects: [{ Key: name }, { Key: `${name}.info` }, { Key: `${name}.part` }] },
          }),
        );
      },
    };
  }
}
