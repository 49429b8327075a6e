import { Type } from 'typebox';
import { bilingualBody } from '../../http/bilingual.js';
import { LangEnum, LangQuery } from '../../http/lang.js';
import { NullableString, PublishAtBody } from '../../http/schemas.js';
import { SlugBody } from '../../http/slug.js';

const Text = Type.String();

export const ArticleSchema = Type.Object({
  id: Text,
  slug: Text,
  title: Text,
  titleZh: Text,
  titleEn: Text,
  summary: Text,
  summaryZh: Text,
  summaryEn: Text,
  content: Text,
  contentZh: Text,
  contentEn: Text,
  coverImage: Text,
  published: Type.Boolean(),
  publishAt: NullableString({ description: 'hidden from public reads until this time' }),
  createdAt: Text,
  updatedAt: Text,
  lang: LangEnum,
});

export const BannerSchema = Type.Object({
  id: Text,
  imageUrl: Text,
  sortOrder: Type.Integer(),
  enabled: Type.Boolean(),
  createdAt: Text,
});

export const GalleryImageSchema = Type.Object({
  id: Text,
  imageUrl: Text,
  title: Text,
  titleZh: Text,
  titleEn: Text,
  sortOrder: Type.Integer(),
  enabled: Type.Boolean(),
  createdAt: Text,
  lang: LangEnum,
});

export const ArticleListQuery = Type.Object({
  ...LangQuery,
  published: Type.Optional(Type.String({ description: '`false` includes drafts; anything else lists published only' })),
  limit: Type.Optional(Type.String({ description: 'maximum number of articles (a positive integer)' })),
});

const EnabledQuery = {
  enabled: Type.Optional(Type.String({ description: '`1` lists only enabled items; otherwise all' })),
};
export const BannerListQuery = Type.Object(EnabledQuery);
export const GalleryListQuery = Type.Object({ ...EnabledQuery, ...LangQuery });

const imageUrl = Type.String({ minLength: 1, maxLength: 2048 });
const sortOrder = Type.Integer({ minimum: -1_000_000_000, maximum: 1_000_000_000 });

export const ArticleCreateBody = Type.Object(
  {
    slug: SlugBody,
    ...bilingualBody('title', 500),
    ...bilingualBody('summary', 5000),
    ...bilingualBody('content', 1_000_000),
    coverImage: Type.Optional(Type.String({ maxLength: 2048 })),
    published: Type.Optional(Type.Boolean({ description: 'default true' })),
    publishAt: Type.Optional(PublishAtBody),
  },
  { additionalProperties: false },
);
export const ArticleUpdateBody = Type.Partial(ArticleCreateBody, { additionalProperties: false });

export const BannerCreateBody = Type.Object(
  {
    imageUrl,
    sortOrder: Type.Optional(sortOrder),
    enabled: Type.Optional(Type.Boolean({ description: 'default true' })),
  },
  { additionalProperties: false },
);
export const BannerUpdateBody = Type.Partial(BannerCreateBody, { additionalProperties: false });

export const GalleryCreateBody = Type.Object(
  {
    imageUrl,
    ...bilingualBody('title', 500),
    sortOrder: Type.Optional(sortOrder),
    enabled: Type.Optional(Type.Boolean({ description: 'default true' })),
  },
  { additionalProperties: false },
);
export const GalleryUpdateBody = Type.Partial(GalleryCreateBody, { additionalProperties: false });
