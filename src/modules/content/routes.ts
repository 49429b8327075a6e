import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope } from '../../http/auth.js';
import { installConditionalGet } from '../../http/conditional.js';
import { badRequest } from '../../http/errors.js';
import { LangQuery, requestLang } from '../../http/lang.js';
import { integerQuery } from '../../http/query.js';
import { ErrorResponse, IdParams, OkResponse } from '../../http/schemas.js';
import {
  ArticleCreateBody,
  ArticleListQuery,
  ArticleSchema,
  ArticleUpdateBody,
  BannerCreateBody,
  BannerListQuery,
  BannerSchema,
  BannerUpdateBody,
  GalleryCreateBody,
  GalleryImageSchema,
  GalleryListQuery,
  GalleryUpdateBody,
} from './schemas.js';
import { ContentService } from './service.js';

/** `enabled=1` (or `true`) lists only enabled items; any other value, or none, lists all. */
const enabledOnly = (value: string | undefined) => value === '1' || value === 'true';

export function contentRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const content = new ContentService(ctx);

  return async (app) => {
    installConditionalGet(app);
    app.get(
      '/api/articles',
      {
        schema: {
          tags: ['content'],
          summary: 'Announcement articles, newest first (Markdown content)',
          querystring: ArticleListQuery,
          response: { 200: Type.Array(ArticleSchema), 400: ErrorResponse },
        },
      },
      async (request) => {
        const { published, limit } = request.query;
        if (limit === '') throw badRequest('querystring.limit: must be a positive integer');
        const max = limit === undefined ? undefined : integerQuery(limit, 'limit', 0, 1);
        return content.articles(published !== 'false', max, requestLang(request));
      },
    );

    app.get(
      '/api/articles/:idOrSlug',
      {
        schema: {
          tags: ['content'],
          summary: 'One article by id or slug',
          params: Type.Object({ idOrSlug: Type.String() }),
          querystring: Type.Object(LangQuery),
          response: { 200: ArticleSchema, 404: ErrorResponse },
        },
      },
      async (request) => content.article(request.params.idOrSlug, requestLang(request)),
    );

    app.get(
      '/api/banners',
      {
        schema: {
          tags: ['content'],
          summary: 'Hero banners by sortOrder',
          querystring: BannerListQuery,
          response: { 200: Type.Array(BannerSchema) },
        },
      },
      async (request) => content.banners(enabledOnly(request.query.enabled)),
    );

    app.get(
      '/api/gallery',
      {
        schema: {
          tags: ['content'],
          summary: 'Gallery images by sortOrder',
          querystring: GalleryListQuery,
          response: { 200: Type.Array(GalleryImageSchema) },
        },
      },
      async (request) => content.gallery(enabledOnly(request.query.enabled), requestLang(request)),
    );

    await app.register(
      adminScope(ctx.auth, async (admin) => {
        const tags = ['content (admin)'];

        admin.get(
          '/api/admin/articles',
          {
            schema: {
              tags,
              summary: 'Every article, newest first: drafts and scheduled ones (publishAt in the future) included',
              querystring: Type.Object(LangQuery),
              response: { 200: Type.Array(ArticleSchema) },
            },
          },
          async (request) => content.allArticles(requestLang(request)),
        );

        admin.post(
          '/api/articles',
          {
            schema: {
              tags,
              body: ArticleCreateBody,
              response: { 201: ArticleSchema, 400: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request, reply) =>
            reply.code(201).send(await content.createArticle(request.body, requestLang(request))),
        );
        admin.put(
          '/api/articles/:id',
          {
            schema: {
              tags,
              params: IdParams,
              body: ArticleUpdateBody,
              response: { 200: ArticleSchema, 400: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request) => content.updateArticle(request.params.id, request.body, requestLang(request)),
        );
        admin.delete(
          '/api/articles/:id',
          { schema: { tags, params: IdParams, response: { 200: OkResponse, 404: ErrorResponse } } },
          async (request) => {
            await content.deleteArticle(request.params.id);
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/banners',
          { schema: { tags, body: BannerCreateBody, response: { 201: BannerSchema, 400: ErrorResponse } } },
          async (request, reply) => reply.code(201).send(await content.createBanner(request.body)),
        );
        admin.put(
          '/api/banners/:id',
          {
            schema: {
              tags,
              params: IdParams,
              body: BannerUpdateBody,
              response: { 200: BannerSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => content.updateBanner(request.params.id, request.body),
        );
        admin.delete(
          '/api/banners/:id',
          { schema: { tags, params: IdParams, response: { 200: OkResponse, 404: ErrorResponse } } },
          async (request) => {
            await content.deleteBanner(request.params.id);
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/gallery',
          {
            schema: { tags, body: GalleryCreateBody, response: { 201: GalleryImageSchema, 400: ErrorResponse } },
          },
          async (request, reply) =>
            reply.code(201).send(await content.createGalleryImage(request.body, requestLang(request))),
        );
        admin.put(
          '/api/gallery/:id',
          {
            schema: {
              tags,
              params: IdParams,
              body: GalleryUpdateBody,
              response: { 200: GalleryImageSchema, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => content.updateGalleryImage(request.params.id, request.body, requestLang(request)),
        );
        admin.delete(
          '/api/gallery/:id',
          { schema: { tags, params: IdParams, response: { 200: OkResponse, 404: ErrorResponse } } },
          async (request) => {
            await content.deleteGalleryImage(request.params.id);
            return { ok: true as const };
          },
        );
      }),
    );
  };
}
