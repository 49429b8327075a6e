import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, changesBy, scoped } from '../../http/auth.js';
import { baseUrl } from '../../http/base-url.js';
import { installConditionalGet } from '../../http/conditional.js';
import { AppError, badRequest } from '../../http/errors.js';
import { LangQuery, requestLang } from '../../http/lang.js';
import { integerQuery } from '../../http/query.js';
import { sendRenderedJson } from '../../http/reply.js';
import { ErrorResponse, OkResponse } from '../../http/schemas.js';
import { filePathFromKey } from '../../storage/storage.js';
import { etagMatches, requestedRange } from '../downloads/service.js';
import { chunkKey, isChunkName } from './chunks.js';
import {
  BuildCodeParams,
  BuildCreateBody,
  BuildSchema,
  BuildUpdateBody,
  BuildWithLangSchema,
  CheckUpdateQuery,
  CheckUpdateResponse,
  ChunkParams,
  GameStoreResponse,
  ChunkStoredResponse,
  MAX_BUILD_BODY_BYTES,
  MAX_CHUNK_BYTES,
  MissingBody,
  MissingResponse,
  PublicBuildSchema,
} from './schemas.js';
import { buildCodeOf, GameService } from './service.js';

/** Manifests and chunks never change: caches keep them for a year without asking again. */
const IMMUTABLE = 'public, max-age=31536000, immutable';
const OCTET_STREAM = 'application/octet-stream';

const FileResponse = {
  200: Type.Unknown({ description: 'the bytes' }),
  206: Type.Unknown({ description: 'the bytes of the range asked for' }),
  304: Type.Null({ description: 'not modified (If-None-Match)' }),
  404: ErrorResponse,
};

/** The game client's builds and chunks (game-files.md, "The service"). */
export function gameRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const game = new GameService(ctx);
  const { downloads, gameChunks } = ctx;
  const tags = ['game'];

  return async (app) => {
    // Signed answers: check-update, the build list and the manifest (`@path` and `@query` covered).
    await app.register(
      scoped(async (launcher) => {
        ctx.signer.install(launcher);
        launcher.get(
          '/api/game/check-update',
          {
            securityHeaders: false,
            schema: {
              tags,
              summary: 'Does a newer game client build exist?',
              querystring: CheckUpdateQuery,
              response: { 200: CheckUpdateResponse, 400: ErrorResponse },
            },
          },
          async (request, reply) => {
            const code = integerQuery(request.query.buildCode, 'buildCode', 0, Number.MIN_SAFE_INTEGER);
            const json = await game.checkUpdate(code, requestLang(request), baseUrl(request, ctx.config.publicBaseUrl));
            return sendRenderedJson(reply, json);
          },
        );

        launcher.get(
          '/api/game/builds/:buildCode/manifest',
          {
            securityHeaders: false,
            schema: {
              tags,
              summary: "A build's manifest: its exact bytes (counts one download of the build)",
              params: BuildCodeParams,
              response: { ...FileResponse, 410: ErrorResponse, 416: ErrorResponse },
            },
          },
          async (request, reply) => {
            const served = await game.manifest(buildCodeOf(request.params.buildCode));
            const etag = `"${served.sha256}"`;
            reply
              .header('ETag', etag)
              .header('Cache-Control', IMMUTABLE)
              .header('Accept-Ranges', 'bytes')
              .header('Last-Modified', served.lastModified.toUTCString())
              .type('application/json');
            if (etagMatches(request.headers['if-none-match'], etag)) return reply.code(304).send();
            const size = served.bytes.length;
            const range = requestedRange(request, reply, size, etag, served.lastModified);
            if (range === null) return reply.send({ error: `range not satisfiable for a manifest of ${size} bytes` });
            reply.header('Content-Length', range.end - range.start + 1);
            // An empty stream, not an empty body: Fastify's HEAD handling would otherwise set Content-Length: 0.
            if (request.method === 'HEAD') return reply.send(Readable.from([]));
            if (range.start === 0) await downloads.countGameBuild(served.buildCode);
            const whole = range.start === 0 && range.end === size - 1;
            return reply.send(whole ? served.bytes : served.bytes.subarray(range.start, range.end + 1));
          },
        );

        await launcher.register(
          scoped(async (reads) => {
            installConditionalGet(reads);
            reads.get(
              '/api/game/builds',
              {
                schema: {
                  tags,
                  summary: 'The published game client builds, newest buildCode first',
                  querystring: Type.Object(LangQuery),
                  response: { 200: Type.Array(PublicBuildSchema) },
                },
              },
              async (request) => game.publicList(requestLang(request)),
            );
          }),
        );
      }),
    );

    app.get(
      '/api/game/chunks/:sha256',
      {
        securityHeaders: false,
        schema: {
          tags,
          summary: 'A chunk: its bytes, named by their SHA-256 (unsigned: check it against its name)',
          params: ChunkParams,
          response: { ...FileResponse, 302: Type.Unknown({ description: 'to the store (presigned)' }) },
        },
      },
      async (request, reply) => {
        const { sha256 } = request.params;
        if (!isChunkName(sha256)) throw badRequest('params.sha256: must be a lowercase hex SHA-256');
        // A redirect (presigned store URL) replaces this with no-store.
        reply.header('Cache-Control', IMMUTABLE);
        return downloads.serve(
          request,
          reply,
          {
            type: 'local',
            filePath: filePathFromKey(chunkKey(sha256)),
            fileName: sha256,
            sha256,
            // The size is recorded: a presigned redirect asks the store nothing.
            recorded: () => gameChunks.recorded(sha256),
          },
          { disposition: 'attachment' },
        );
      },
    );

    await app.register(
      adminScope(ctx.auth, async (admin) => {
        admin.addHook('onRequest', changesBy('publisher'));
        const adminTags = ['game (admin)'];
        // A chunk's bytes are streamed to the store and checked on the way (see GameChunks.put).
        admin.addContentTypeParser(OCTET_STREAM, (_request, payload, done) => done(null, payload));

        admin.post(
          '/api/admin/game/chunks/missing',
          {
            schema: {
              tags: adminTags,
              summary: 'Which of these chunks the store lacks (at most 10,000 asked at once)',
              body: MissingBody,
              response: { 200: MissingResponse, 400: ErrorResponse },
            },
          },
          async (request) => ({ missing: await gameChunks.missing(request.body.chunks) }),
        );

        admin.put(
          '/api/admin/game/chunks/:sha256',
          {
            schema: {
              tags: adminTags,
              summary:
                'Store a chunk (raw bytes, application/octet-stream, at most 8 MiB): 201, or 200 when already stored',
              consumes: [OCTET_STREAM],
              params: ChunkParams,
              response: {
                200: ChunkStoredResponse,
                201: ChunkStoredResponse,
                400: ErrorResponse,
                413: ErrorResponse,
                415: ErrorResponse,
              },
            },
          },
          async (request, reply) => {
            const { sha256 } = request.params;
            // Only an application/octet-stream body is a stream; any other content type was parsed
            // (or refused) before this, and its value is no chunk.
            const body = request.body instanceof Readable ? request.body : undefined;
            if (!isChunkName(sha256)) {
              body?.resume();
              throw badRequest('params.sha256: must be a lowercase hex SHA-256');
            }
            if (body === undefined) {
              if (request.body !== undefined) {
                throw new AppError(
                  415,
                  `body: a chunk is sent as ${OCTET_STREAM}, not ${request.headers['content-type']}`,
                );
              }
              throw badRequest(`body: the chunk bytes are required (${OCTET_STREAM})`);
            }
            if (Number(request.headers['content-length'] ?? 0) > MAX_CHUNK_BYTES) {
              body.resume();
              throw new AppError(413, `body: a chunk is at most ${MAX_CHUNK_BYTES} bytes`);
            }
            const stored = await gameChunks.put(sha256, body);
            return reply.code(stored.created ? 201 : 200).send({ sha256, size: stored.size });
          },
        );

        admin.get(
          '/api/admin/game/store',
          {
            schema: {
              tags: adminTags,
              summary: "The store's chunks and their bytes, every build's together (each stored once)",
              response: { 200: GameStoreResponse },
            },
          },
          async () => gameChunks.totals(),
        );

        admin.get(
          '/api/admin/game/builds',
          {
            schema: {
              tags: adminTags,
              summary: 'Every build, scheduled ones included, newest buildCode first',
              querystring: Type.Object(LangQuery),
              response: { 200: Type.Array(BuildSchema) },
            },
          },
          async (request) => game.adminList(requestLang(request)),
        );

        admin.post(
          '/api/admin/game/builds',
          {
            bodyLimit: MAX_BUILD_BODY_BYTES,
            schema: {
              tags: adminTags,
              summary: 'Publish a build: its manifest checked whole, every chunk it names stored (Idempotency-Key)',
              body: BuildCreateBody,
              response: { 201: BuildWithLangSchema, 400: ErrorResponse, 409: ErrorResponse, 413: ErrorResponse },
            },
          },
          async (request, reply) => {
            const lang = requestLang(request);
            return reply.code(201).send({ ...(await game.create(request.body, lang)), lang });
          },
        );

        admin.put(
          '/api/admin/game/builds/:buildCode',
          {
            schema: {
              tags: adminTags,
              summary: "Change a build's changelog, forceUpdate or publishAt (only the fields sent)",
              params: BuildCodeParams,
              body: BuildUpdateBody,
              response: { 200: BuildWithLangSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            const lang = requestLang(request);
            return { ...(await game.update(buildCodeOf(request.params.buildCode), request.body, lang)), lang };
          },
        );

        for (const [action, revoked] of [
          ['revoke', true],
          ['unrevoke', false],
        ] as const) {
          admin.post(
            `/api/admin/game/builds/:buildCode/${action}`,
            {
              schema: {
                tags: adminTags,
                summary: revoked
                  ? 'Withdraw a build: not offered until unrevoked, launchers on it are sent back (downgrade), its manifest 410'
                  : 'Offer a withdrawn build again',
                params: BuildCodeParams,
                response: { 200: BuildWithLangSchema, 404: ErrorResponse },
              },
            },
            async (request) => {
              const lang = requestLang(request);
              return { ...(await game.setRevoked(buildCodeOf(request.params.buildCode), revoked, lang)), lang };
            },
          );
        }

        admin.delete(
          '/api/admin/game/builds/:buildCode',
          {
            schema: {
              tags: adminTags,
              summary: 'Delete a build; chunks no build names are swept later',
              params: BuildCodeParams,
              response: { 200: OkResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            await game.delete(buildCodeOf(request.params.buildCode));
            return { ok: true as const };
          },
        );
      }),
    );
  };
}
