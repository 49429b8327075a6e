import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope } from '../../http/auth.js';
import { installConditionalGet } from '../../http/conditional.js';
import { LangQuery, requestLang } from '../../http/lang.js';
import { sendRenderedJson } from '../../http/reply.js';
import { ErrorResponse, IdParams, OkResponse } from '../../http/schemas.js';
import { searchTerms } from './catalogue.js';
import {
  AddonCreateBody,
  AddonListQuery,
  AddonSchema,
  AddonUpdateBody,
  ReleaseCreateBody,
  ReleaseListItemSchema,
  ReleaseListQuery,
  ReleaseUpdateBody,
  ScreenshotCreateBody,
  ScreenshotSchema,
  ScreenshotUpdateBody,
} from './schemas.js';
import { AddonService } from './service.js';

const FileResponse = {
  200: Type.Unknown({ description: 'the file (application/octet-stream)' }),
  302: Type.Unknown({ description: 'redirect to the external link' }),
  404: ErrorResponse,
};

export function addonRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const addons = new AddonService(ctx);

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
        const { published, category, search } = request.query;
        const json = await addons.listJson(
          { publishedOnly: published !== 'false', category: category || undefined, terms: searchTerms(search) },
          requestLang(request),
        );
        // Already-rendered JSON (once per filter, language and counter version; see AddonService.listJson):
        // Fastify sends a Buffer as is, so the schema documents the answer without re-serialising it.
        return sendRenderedJson(reply, json);
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
        const json = await addons.detailJson(request.params.idOrSlug, requestLang(request));
        return sendRenderedJson(reply, json);
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
        const json = await addons.releasesJson(request.query.addonId || undefined, requestLang(request));
        return sendRenderedJson(reply, json);
      },
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
          async (request) => addons.detail(request.params.idOrSlug, requestLang(request), 'admin'),
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
