import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

/** The access key pair s3rver accepts (it checks the key id; SigV4 signatures are not verified). */
export const S3RVER_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

interface KoaContext {
  method: string;
  path: string;
  query: Record<string, string | undefined>;
  status: number;
  type: string;
  body: string;
}

interface S3rverInstance {
  /** Listens; answers the address it listens on. */
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
  /** Koa's middleware list (s3rver is a Koa app). */
  middleware: ((ctx: KoaContext, next: () => Promise<void>) => Promise<void>)[];
  store: { getResourcePath(bucket: string, key: string | undefined, resource: string): string };
}
/** A request to the server, as a failure rule sees it. */
export interface S3Request {
  method: string;
  path: string;
  query: Record<string, string | undefined>;
}

type S3rverClass = new (options: Record<string, unknown>) => S3rverInstance;

export interface TestS3 {
  endpoint: string;
  bucket: string;
  dir: string;
  /** Environment that points the service at this server (`STORAGE=s3://bucket/prefix` and friends). */
  env(prefix: string, extra?: Record<string, string>): Record<string, string>;
  /** Every request the server received, in order (e.g. to count a client's HEAD requests). */
  readonly requests: readonly S3Request[];
  /** From now on, requests `failing` picks are answered 500 InternalError (S3 failing); null: none. */
  fail(failing: ((request: S3Request) => boolean) | null): void;
  close(): Promise<void>;
}

/** Starts s3rver (an S3-compatible server, from npm) in this process on loopback with one bucket. */
export async function startS3(bucket = 'lds-test'): Promise<TestS3> {
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverClass;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-s3-'));
  const server = new S3rver({
    address: '127.0.0.1',
    // Port 0: it binds a free port itself (none chosen here that another process could take first).
    port: 0,
    silent: true,
    directory: dir,
    configureBuckets: [{ name: bucket, configs: [] }],
  });
  let failing: ((request: S3Request) => boolean) | null = null;
  const requests: S3Request[] = [];
  server.middleware.unshift(async (ctx, next) => {
    requests.push({ method: ctx.method, path: ctx.path, query: { ...ctx.query } });
    if (failing === null || !failing(ctx)) return next();
    ctx.status = 500;
    ctx.type = 'application/xml';
    ctx.body = errorXml('InternalError', 'We encountered an internal error. Please try again.');
  }, multipartUploads(server));
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  return {
    endpoint,
    bucket,
    dir,
    requests,
    env: (prefix, extra = {}) => ({
      STORAGE: `s3://${bucket}/${prefix}`,
      S3_ENDPOINT: endpoint,
      S3_FORCE_PATH_STYLE: 'true',
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      ...extra,
    }),
    fail: (rule) => {
      failing = rule;
    },
    async close() {
      await server.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

const xmlText = (value: string) => value.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

const errorXml = (code: string, message: string, extra = '') =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message>${extra}</Error>`;

/**
 * The multipart-upload calls s3rver lacks and `@tus/s3-store` or the service make: ListParts (`GET
 * /bucket/key?uploadId=`), AbortMultipartUpload (`DELETE /bucket/key?uploadId=`) and
 * ListMultipartUploads (`GET /bucket?uploads`), answered from s3rver's own folder of pending uploads
 * (`<uploadId>/key`, written when the upload begins, and its parts `<n>` with `<n>.md5`), as S3 answers them.
 */
function multipartUploads(server: S3rverInstance) {
  return async (ctx: KoaContext, next: () => Promise<void>): Promise<void> => {
    const listing = /^\/([^/]+)\/?$/.exec(ctx.path)?.[1];
    if (listing !== undefined && ctx.method === 'GET' && ctx.query.uploads !== undefined) {
      return listMultipartUploads(ctx, listing, server.store.getResourcePath(listing, undefined, 'uploads'));
    }
    const uploadId = ctx.query.uploadId;
    const match = /^\/([^/]+)\/(.+)$/.exec(ctx.path);
    if (uploadId === undefined || match === null || (ctx.method !== 'GET' && ctx.method !== 'DELETE')) return next();
    const [, bucket = '', key = ''] = match;
    const folder = path.join(server.store.getResourcePath(bucket, undefined, 'uploads'), path.basename(uploadId));
    if (!fs.existsSync(folder)) {
      ctx.status = 404;
      ctx.type = 'application/xml';
      ctx.body = errorXml(
        'NoSuchUpload',
        'The specified upload does not exist.',
        `<UploadId>${xmlText(uploadId)}</UploadId>`,
      );
      return;
    }
    if (ctx.method === 'DELETE') {
      fs.rmSync(folder, { recursive: true, force: true });
      ctx.status = 204;
      ctx.body = '';
      return;
    }
    const parts = fs
      .readdirSync(folder)
      .filter((name) => /^\d+$/.test(name))
      .map(Number)
      .sort((a, b) => a - b)
      .map((n) => {
        const file = path.join(folder, String(n));
        const md5 = fs.readFileSync(`${file}.md5`, 'utf8').trim();
        const stat = fs.statSync(file);
        return `<Part><PartNumber>${n}</PartNumber><LastModified>${stat.mtime.toISOString()}</LastModified><ETag>"${md5}"</ETag><Size>${stat.size}</Size></Part>`;
      });
    ctx.status = 200;
    ctx.type = 'application/xml';
    ctx.body =
      '<?xml version="1.0" encoding="UTF-8"?>\n<ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
      `<Bucket>${xmlText(bucket)}</Bucket><Key>${xmlText(decodeURIComponent(key))}</Key><UploadId>${xmlText(uploadId)}</UploadId>` +
      `<IsTruncated>false</IsTruncated>${parts.join('')}</ListPartsResult>`;
  };
}

/** Every pending multipart upload of `bucket` whose key begins with `?prefix=`, in one page, by key. */
function listMultipartUploads(ctx: KoaContext, bucket: string, uploads: string): void {
  const prefix = ctx.query.prefix ?? '';
  const listed: string[] = [];
  for (const uploadId of fs.existsSync(uploads) ? fs.readdirSync(uploads) : []) {
    const keyFile = path.join(uploads, uploadId, 'key');
    if (!fs.existsSync(keyFile)) continue;
    const key = fs.readFileSync(keyFile, 'utf8');
    if (!key.startsWith(prefix)) continue;
    listed.push(
      `<Upload><Key>${xmlText(key)}</Key><UploadId>${xmlText(uploadId)}</UploadId>` +
        `<Initiated>${fs.statSync(keyFile).mtime.toISOString()}</Initiated><StorageClass>STANDARD</StorageClass></Upload>`,
    );
  }
  ctx.status = 200;
  ctx.type = 'application/xml';
  ctx.body =
    '<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
    `<Bucket>${xmlText(bucket)}</Bucket><Prefix>${xmlText(prefix)}</Prefix>` +
    `<MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>${listed.sort().join('')}</ListMultipartUploadsResult>`;
}
