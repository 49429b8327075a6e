import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { baseUrl } from '../../http/base-url.js';
import { LangQuery, requestLang } from '../../http/lang.js';
import { type FeedName, FeedService } from './service.js';

const NAMES: readonly FeedName[] = ['articles.rss', 'articles.atom', 'releases.atom', 'launcher.atom'];

/** Whether the client's copy is current: `If-None-Match` when sent (RFC 9110 §13.1.3), else `If-Modified-Since`. */
function notModified(
  headers: Record<string, string | string[] | undefined>,
  etag: string,
  lastModified: Date,
): boolean {
  const match = headers['if-none-match'];
  if (typeof match === 'string') {
    return match.split(',').some((tag) => ['*', etag, `W/${etag}`].includes(tag.trim()));
  }
  const since = headers['if-modified-since'];
  if (typeof since !== 'string') return false;
  const at = Date.parse(since);
  return !Number.isNaN(at) && lastModified.getTime() <= at;
}

export function feedRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const feeds = new FeedService(ctx);
  return async (app) => {
    for (const name of NAMES) {
      app.get(
        `/feeds/${name}`,
        {
          schema: {
            tags: ['feeds'],
            summary: `${name.endsWith('.rss') ? 'RSS 2.0' : 'Atom 1.0'} feed: ${name.split('.')[0]} (newest 50)`,
            querystring: Type.Object(LangQuery),
            response: { 200: Type.String(), 304: Type.Null() },
          },
        },
        async (request, reply) => {
          const feed = await feeds.feed(name, requestLang(request), baseUrl(request, ctx.config.publicBaseUrl));
          reply
            .header('ETag', feed.etag)
            .header('Last-Modified', feed.lastModified.toUTCString())
            .header('Cache-Control', 'no-cache');
          if (notModified(request.headers, feed.etag, feed.lastModified)) return reply.code(304).send(null);
          return reply.type(feed.contentType).send(feed.body);
        },
      );
    }
  };
}
