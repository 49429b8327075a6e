import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { StorageConfig } from '../config.js';
import { contentDisposition } from '../modules/downloads/service.js';
import { hashingCounter } from './local.js';
import { type ByteRange, isSafeKey, type ObjectInfo, type Storage, type WrittenObject } from './storage.js';

export type S3StorageConfig = Extract<StorageConfig, { kind: 's3' }>;

/** Multipart part size: memory per upload is about `PART_SIZE × QUEUE_SIZE`, whatever the file size. */
const PART_SIZE = 8 * 1024 * 1024;
const QUEUE_SIZE = 4;

function isNotFound(err: unknown): boolean {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } } | null;
  return e?.name === 'NotFound' || e?.name === 'NoSuchKey' || e?.$metadata?.httpStatusCode === 404;
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
    this.client = new S3Client(clientConfig(config.endpoint));
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
    const body = answer.Body;
    if (body instanceof Readable) return body;
    if (body === undefined) return Readable.from([]);
    // Other runtimes answer a web stream; Node answers a Readable (kept above).
    return Readable.fromWeb(body.transformToWebStream() as Parameters<typeof Readable.fromWeb>[0]);
  }

  async delete(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.config.bucket, Key: this.objectKey(key) }));
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
}
