import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { type Lang, negotiateLang } from '../domain/lang.js';
import { StringEnum } from './schemas.js';

/** Query parameters of every localised read. */
export const LangQuery = {
  lang: Type.Optional(Type.String({ description: '`zh` or `en` (a region such as `en-US` maps to its language)' })),
  locale: Type.Optional(Type.String({ description: 'alias of `lang`' })),
};

/** Query parameter `wow` (alias `wowVersion`): accepted and always resolved to `1.18`. */
export const ChannelQuery = {
  wow: Type.Optional(Type.String({ description: 'client channel; every value resolves to `1.18`' })),
  wowVersion: Type.Optional(Type.String({ description: 'alias of `wow`' })),
};

/** The language of a request, negotiated once per the spec's priority list. */
export function requestLang(request: FastifyRequest): Lang {
  const query = (request.query ?? {}) as { lang?: unknown; locale?: unknown };
  return negotiateLang({ lang: query.lang, locale: query.locale, acceptLanguage: request.headers['accept-language'] });
}

export const LangEnum = StringEnum<Lang>(['zh', 'en']);
