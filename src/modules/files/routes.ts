import multipart from '@fastify/multipart';
import type { FastifyInstance } from 'fastify';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, changesBy } from '../../http/auth.js';
import { AppError, badRequest } from '../../http/errors.js';
import { ErrorResponse } from '../../http/schemas.js';
import { OFFSET_STREAM } from '../../http/timeouts.js';
import { filePathFromKey, isSafeKey } from '../../storage/storage.js';
import { RESUMABLE_PATH } from './resumable.js';

const Uploaded = Type.Object({
  filePath: Type.String({ description: 'server path, usable as imageUrl or filePath' }),
  originalName: Type.String(),
  size: Type.Integer(),
  sha256: Type.String(),
});

/**
 * A failure of the multipart parser (a missing boundary, a body that ends before its closing
 * boundary) is a 400 naming the body; errors the plugin already classified keep their status.
 */
function malformed(err: unknown, fromBody = true): never {
  const status = (err as { statusCode?: unknown }).statusCode;
  if (!fromBody || (typeof status === 'number' && status >= 400 && status < 500)) throw err;
  throw badRequest(`body: not a complete multipart/form-data body (${(err as Error).message})`);
}

/**
 * Routes a request by whether it is a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`):
 * a route constrained to `no` leaves preflights to the CORS plugin's catch-all route.
 */
type Strategy = Parameters<FastifyInstance['addConstraintStrategy']>[0];
type Handler = NonNullable<ReturnType<ReturnType<Strategy['storage']>['get']>>;

const CORS_PREFLIGHT: Strategy = {
  name: 'corsPreflight',
  storage() {
    const handlers = new Map<unknown, Handler>();
    return { get: (value) => handlers.get(value) ?? null, set: (value, handler) => void handlers.set(value, handler) };
  },
  deriveConstraint: (req) =>
    req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined ? 'yes' : 'no',
  mustMatchWhenDerived: false,
  validate: (value) => {
    if (value !== 'yes' && value !== 'no') throw new Error('corsPreflight: yes or no');
  },
};

export function fileRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const { files, downloads, resumable } = ctx;
  return async (app) => {
    await app.register(
      adminScope(ctx.auth, async (admin) => {
        admin.addHook('onRequest', changesBy('publisher', 'editor'));
        await admin.register(multipart, {
          limits: { fileSize: ctx.config.maxUploadBytes, files: 1, fields: 10, parts: 12 },
        });
        admin.post(
          '/api/upload',
          {
            schema: {
              tags: ['files (admin)'],
              summary: 'Upload one file (multipart part `file`); streamed to the store',
              consumes: ['multipart/form-data'],
              response: { 201: Uploaded, 400: ErrorResponse, 413: ErrorResponse, 415: ErrorResponse },
            },
          },
          async (request, reply) => {
            if (!request.isMultipart()) throw new AppError(415, 'expected multipart/form-data with a part named file');
            const part = await request.file().catch(malformed);
            if (part === undefined) throw badRequest('body.file: is required');
            if (part.fieldname !== 'file') {
              part.file.resume();
              throw badRequest(`body.file: is required (got a part named "${part.fieldname}")`);
            }
            // A body that breaks off or is not multipart fails the part's stream: the client's fault,
            // not the store's. The store removes what it had written.
            const uploaded = await files
              .upload(part.file, part.filename || 'file', part.mimetype)
              .catch((err: unknown) => malformed(part.file.errored ?? err, part.file.errored !== null));
            if (part.file.truncated) {
              await files.discard(uploaded.filePath);
              throw new AppError(413, `file is larger than the limit of ${ctx.config.maxUploadBytes} bytes`);
            }
            return reply.code(201).send(uploaded);
          },
        );
      }),
    );

    // Resumable uploads (tus 1.0.0): the same credentials and roles as the multipart upload.
    await app.register(
      adminScope(ctx.auth, async (admin) => {
        admin.addHook('onRequest', changesBy('publisher', 'editor'));
        // tus reads the chunk itself, streamed: the body is left untouched here.
        admin.addContentTypeParser(OFFSET_STREAM, (_request, _payload, done) => done(null));
        const tus = {
          tags: ['files (admin)'],
          description:
            'tus 1.0.0 (creation, creation-with-upload, termination, expiration): `Tus-Resumable: 1.0.0` on every ' +
            'request but OPTIONS; `Upload-Metadata` `filename` names the file. Errors are `{error}`.',
        };
        if (!admin.hasConstraintStrategy(CORS_PREFLIGHT.name)) admin.addConstraintStrategy(CORS_PREFLIGHT);
        admin.route({
          method: 'OPTIONS',
          url: RESUMABLE_PATH,
          // tus discovery (with credentials, like every admin endpoint). A CORS preflight is not
          // routed here: it goes to the CORS plugin's route and is answered as every admin route's is.
          constraints: { [CORS_PREFLIGHT.name]: 'no' },
          config: { cors: { preflight: false } },
          schema: { ...tus, summary: 'Resumable upload: discover what the server offers' },
          handler: (request, reply) => resumable.handle(request, reply),
        });
        admin.post(
          RESUMABLE_PATH,
          { schema: { ...tus, summary: 'Resumable upload: create (answers Location)' } },
          (request, reply) => resumable.handle(request, reply),
        );
        admin.route({
          method: ['HEAD', 'PATCH', 'DELETE'],
          url: `${RESUMABLE_PATH}/:id`,
          schema: { ...tus, summary: 'Resumable upload: offset (HEAD), append (PATCH), cancel (DELETE)' },
          handler: (request, reply) => resumable.handle(request, reply),
        });
        admin.get(
          `${RESUMABLE_PATH}/:id`,
          {
            exposeHeadRoute: false,
            schema: {
              tags: ['files (admin)'],
              summary: 'The stored file of a finished resumable upload, like the multipart answer',
              description:
                'Stores the finished upload first when its last PATCH could not; 503 (with Retry-After) ' +
                'while the store fails: the bytes are kept, ask again.',
              params: Type.Object({ id: Type.String() }),
              response: { 200: Uploaded, 404: ErrorResponse, 409: ErrorResponse, 503: ErrorResponse },
            },
          },
          async (request, reply) => {
            try {
              return await resumable.result(request.params.id);
            } catch (err) {
              if (err instanceof AppError) throw err;
              request.log.error({ err }, 'storing a finished resumable upload failed');
              reply.header('Retry-After', '10');
              throw new AppError(
                503,
                'the upload is complete but could not be stored yet; its bytes are kept: try again',
              );
            }
          },
        );
      }),
    );

    app.get(
      '/uploads/*',
      {
        schema: {
          tags: ['files'],
          summary: 'A stored file: images inline, everything else as an attachment',
          params: Type.Object({ '*': Type.String() }),
          response: { 200: Type.Unknown({ description: 'the file' }), 404: ErrorResponse },
        },
      },
      async (request, reply) => {
        const key = request.params['*'];
        if (!isSafeKey(key)) throw badRequest('path: not a valid file path');
        const filePath = filePathFromKey(key);
        const fallback = () => key.split('/').pop() ?? 'file';
        return downloads.serve(
          request,
          reply,
          { type: 'local', filePath, fileName: await downloads.fileName(filePath, fallback), sha256: null },
          { disposition: 'auto' },
        );
      },
    );
  };
}
