import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, changesBy } from '../../http/auth.js';
import { installConditionalGet } from '../../http/conditional.js';
import { LangQuery, requestLang } from '../../http/lang.js';
import { RenderedJson, sendRendered } from '../../http/rendered.js';
import { baseUrl } from '../../http/base-url.js';
import { ErrorResponse, IdParams, OkResponse } from '../../http/schemas.js';
import { searchTerms } from './catalogue.js';
import {
  AddonCreateBody,
  AddonListQuery,
  AddonSchema,
  AddonUpdateBody,
  ByHashParams,
  ByHashResponse,
  FingerprintsBody,
  FingerprintsResponse,
  ReleaseCreateBody,
  ReleaseListItemSchema,
  ReleaseListQuery,
  ReleaseUpdateBody,
  ScreenshotCreateBody,
  ScreenshotSchema,
  ScreenshotUpdateBody,
  UpdatesBody,
  UpdatesResponse,
} from './schemas.js';
import { CatalogueReader, type PagedRequest } from './catalogue-reader.js';
import { AddonService } from './service.js';
import { AddonUpdates } from './updates.js';

const FileResponse = {
  200: Type.Unknown({ description: 'the file (application/octet-stream)' }),
  302: Type.Unknown({ description: 'redirect to the external link' }),
  404: ErrorResponse,
};

export function addonRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const catalogue = new CatalogueReader(ctx);
  const addons = new AddonService(ctx, catalogue);
  const updates = new AddonUpdates(ctx);

  /** The language and page of a list request (`page` null when neither `limit` nor `cursor` is given). */
  const paged = (request: FastifyRequest, limit: string | undefined, cursor: string | undefined): PagedRequest => ({
    lang: requestLang(request),
    page:
      limit === undefined && cursor === undefined
        ? null
        : { limit: limit === undefined ? undefined : Number(limit), cursor },
    base: baseUrl(request, ctx.config.publicBaseUrl),
    url: request.url,
  });

  return async (app) => {
    installConditionalGet(app);
    ctx.signer.install(app);
    app.get(
      '/api/addons',
      {
        schema: {
          tags: ['addons'],
          summary: 'The addon catalogue, most recently updated first, each with its latest release',
          querystring: AddonListQuery,
          response: { 200: Type.Array(AddonSchema) },
        },
      },
      async (request, reply) => {
        const { published, category, search, sort, limit, cursor } = request.query;
        const answer = await catalogue.list({
          filter: { publishedOnly: published !== 'false', category: category || undefined, terms: searchTerms(search) },
          sort: sort ?? 'updated',
          ...paged(request, limit, cursor),
        });
        return sendRendered(request, reply, answer);
      },
    );

    app.get(
      '/api/addons/:idOrSlug',
      {
        schema: {
          tags: ['addons'],
          summary: 'One addon with all its releases (newest first) and screenshots (by sortOrder)',
          params: Type.Object({ idOrSlug: Type.String() }),
          querystring: Type.Object(LangQuery),
          response: { 200: AddonSchema, 404: ErrorResponse },
        },
      },
      async (request, reply) => {
        return sendRendered(request, reply, await catalogue.detailJson(request.params.idOrSlug, requestLang(request)));
      },
    );

    app.get(
      '/api/releases',
      {
        schema: {
          tags: ['addons'],
          summary: 'Releases, newest first, each with its addon summary',
          querystring: ReleaseListQuery,
          response: { 200: Type.Array(ReleaseListItemSchema) },
        },
      },
      async (request, reply) => {
        const { addonId, limit, cursor } = request.query;
        return sendRendered(
          request,
          reply,
          await catalogue.releaseList(addonId || undefined, paged(request, limit, cursor)),
        );
      },
    );

    app.post(
      '/api/addons/updates',
      {
        // Signed like the other answers that say what to download (a POST answer: per request).
        config: { signed: true },
        schema: {
          tags: ['addons'],
          summary:
            'For an addon manager: which installed addons have an update, with the latest release to download and, when asked, the changelogs of the releases in between (one request per folder)',
          querystring: Type.Object(LangQuery),
          body: UpdatesBody,
          response: { 200: UpdatesResponse, 400: ErrorResponse },
        },
      },
      async (request, reply) => {
        const { installed, changelogs, lang = requestLang(request) } = request.body;
        const base = baseUrl(request, ctx.config.publicBaseUrl);
        const results = await updates.check(installed, lang, base, changelogs);
        return sendRendered(request, reply, RenderedJson.of(Buffer.from(JSON.stringify({ results }))));
      },
    );

    app.post(
      '/api/addons/fingerprints',
      {
        // Signed as the addon updates are (a POST answer: per request, covering its Content-Digest).
        config: { signed: true },
        schema: {
          tags: ['addons'],
          summary:
            'For an addon manager: which published releases have folders with these fingerprints (folders unpacked by hand, recognised)',
          body: FingerprintsBody,
          response: { 200: FingerprintsResponse, 400: ErrorResponse },
        },
      },
      async (request, reply) => {
        const matches = await updates.folderMatches(request.body.fingerprints);
        return sendRendered(request, reply, RenderedJson.of(Buffer.from(JSON.stringify({ matches }))));
      },
    );

    app.get(
      '/api/releases/by-hash/:sha256',
      {
        schema: {
          tags: ['addons'],
          summary: 'The published release whose file has this SHA-256, with its addon',
          params: ByHashParams,
          querystring: Type.Object(LangQuery),
          response: { 200: ByHashResponse, 400: ErrorResponse, 404: ErrorResponse },
        },
      },
      async (request) =>
        updates.byHash(request.params.sha256, requestLang(request), baseUrl(request, ctx.config.publicBaseUrl)),
    );

    app.get(
      '/api/download/:releaseId',
      {
        schema: {
          tags: ['addons'],
          summary: "Download a release (counted in the release's downloadCount and the addon's totalDownloads)",
          params: Type.Object({ releaseId: Type.String() }),
          response: FileResponse,
        },
      },
      async (request, reply) => {
        const release = await addons.downloadableRelease(request.params.releaseId);
        return ctx.downloads.serve(request, reply, await addons.downloadTarget(release), {
          disposition: 'attachment',
          count: () => addons.countDownload(release),
        });
      },
    );

    await app.register(
      adminScope(ctx.auth, async (admin) => {
        admin.addHook('onRequest', changesBy('publisher'));
        const tags = ['addons (admin)'];

        admin.get(
          '/api/admin/addons/:idOrSlug',
          {
            schema: {
              tags,
              summary: 'One addon with every release, scheduled ones (publishAt in the future) included',
              params: Type.Object({ idOrSlug: Type.String() }),
              querystring: Type.Object(LangQuery),
              response: { 200: AddonSchema, 404: ErrorResponse },
            },
          },
          async (request) => catalogue.detail(request.params.idOrSlug, requestLang(request), 'admin'),
        );

        admin.post(
          '/api/addons',
          {
            schema: {
              tags,
              body: AddonCreateBody,
              response: { 201: AddonSchema, 400: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request, reply) => reply.code(201).send(await addons.createAddon(request.body, requestLang(request))),
        );

        admin.put(
          '/api/addons/:id',
          {
            schema: {
              tags,
              summary: 'Change an addon; only the fields sent change',
              params: IdParams,
              body: AddonUpdateBody,
              response: { 200: AddonSchema, 400: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request) => addons.updateAddon(request.params.id, request.body, requestLang(request)),
        );

        admin.delete(
          '/api/addons/:id',
          {
            schema: {
              tags,
              summary: 'Delete an addon with its releases and screenshots (stored files are kept)',
              params: IdParams,
              response: { 200: OkResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            await addons.deleteAddon(request.params.id);
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/releases',
          {
            schema: {
              tags,
              summary: 'Publish a release; it becomes the latest of its addon',
              body: ReleaseCreateBody,
              response: { 201: ReleaseListItemSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request, reply) =>
            reply.code(201).send(await addons.createRelease(request.body, requestLang(request))),
        );

        admin.put(
          '/api/releases/:id',
          {
            schema: {
              tags,
              summary: 'Change a release; only the fields sent change; isLatest: true moves the flag',
              params: IdParams,
              body: ReleaseUpdateBody,
              response: { 200: ReleaseListItemSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => addons.updateRelease(request.params.id, request.body, requestLang(request)),
        );

        admin.delete(
          '/api/releases/:id',
          {
            schema: {
              tags,
              summary: 'Delete a release; when it was the latest, the newest remaining one becomes the latest',
              params: IdParams,
              response: { 200: OkResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            await addons.deleteRelease(request.params.id);
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/addons/:id/screenshots',
          {
            schema: {
              tags,
              params: IdParams,
              body: ScreenshotCreateBody,
              response: { 201: ScreenshotSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request, reply) =>
            reply.code(201).send(await addons.createScreenshot(request.params.id, request.body)),
        );

        admin.put(
          '/api/screenshots/:id',
          {
            schema: {
              tags,
              params: IdParams,
              body: ScreenshotUpdateBody,
              response: { 200: ScreenshotSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => addons.updateScreenshot(request.params.id, request.body),
        );

        admin.delete(
          '/api/screenshots/:id',
          { schema: { tags, params: IdParams, response: { 200: OkResponse, 404: ErrorResponse } } },
          async (request) => {
            await addons.deleteScreenshot(request.params.id);
            return { ok: true as const };
          },
        );
      }),
    );
  };
}
