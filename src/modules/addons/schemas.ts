import { Type } from 'typebox';
import { bilingualBody } from '../../http/bilingual.js';
import { ChannelQuery, LangEnum, LangQuery } from '../../http/lang.js';
import { PublishAtBody } from '../../http/schemas.js';
import { SlugBody } from '../../http/slug.js';

const Text = Type.String();
const NullableText = Type.Union([Type.String(), Type.Null()]);
const DownloadType = Type.Union([Type.Literal('local'), Type.Literal('url')]);

export const ReleaseSchema = Type.Object({
  id: Text,
  addonId: Text,
  version: Text,
  changelog: Text,
  changelogZh: Text,
  changelogEn: Text,
  downloadType: DownloadType,
  filePath: Text,
  externalUrl: NullableText,
  fileSize: Type.Number(),
  sha256: NullableText,
  gameVersion: Text,
  downloadCount: Type.Integer(),
  isLatest: Type.Boolean(),
  wowVersion: Text,
  createdAt: Text,
  publishAt: NullableText,
});

export const AddonSummarySchema = Type.Object({ id: Text, slug: Text, name: Text, nameZh: Text, nameEn: Text });

/** A release as `GET /api/releases` lists it (and as release writes answer). */
export const ReleaseListItemSchema = Type.Intersect([
  ReleaseSchema,
  Type.Object({ addon: AddonSummarySchema, lang: LangEnum }),
]);

export const ScreenshotSchema = Type.Object({
  id: Text,
  addonId: Text,
  imageUrl: Text,
  sortOrder: Type.Integer(),
  createdAt: Text,
});

export const AddonSchema = Type.Object({
  id: Text,
  slug: Text,
  name: Text,
  nameZh: Text,
  nameEn: Text,
  summary: Text,
  summaryZh: Text,
  summaryEn: Text,
  description: Text,
  descriptionZh: Text,
  descriptionEn: Text,
  iconUrl: NullableText,
  category: Text,
  published: Type.Boolean(),
  totalDownloads: Type.Integer(),
  createdAt: Text,
  updatedAt: Text,
  releases: Type.Array(ReleaseSchema),
  screenshots: Type.Array(ScreenshotSchema),
  _count: Type.Object({ releases: Type.Integer() }),
  lang: LangEnum,
});

export const AddonListQuery = Type.Object({
  ...LangQuery,
  ...ChannelQuery,
  published: Type.Optional(Type.String({ description: '`false` includes drafts; anything else lists published only' })),
  category: Type.Optional(Type.String({ description: 'only addons of this category' })),
  search: Type.Optional(
    Type.String({
      maxLength: 200,
      description: 'case-insensitive; every whitespace-separated term must occur in the name or summary (zh or en)',
    }),
  ),
});

export const ReleaseListQuery = Type.Object({
  ...LangQuery,
  ...ChannelQuery,
  addonId: Type.Optional(Type.String({ description: 'only the releases of this addon' })),
});

const category = Type.String({ minLength: 1, maxLength: 64, description: 'default `general`' });
const iconUrl = Type.Union([Type.String({ maxLength: 2048 }), Type.Null()]);

export const AddonCreateBody = Type.Object(
  {
    slug: SlugBody,
    ...bilingualBody('name', 200),
    ...bilingualBody('summary', 2000),
    ...bilingualBody('description'),
    iconUrl: Type.Optional(iconUrl),
    category: Type.Optional(category),
    published: Type.Optional(Type.Boolean({ description: 'default true' })),
  },
  { additionalProperties: false },
);
export const AddonUpdateBody = Type.Partial(AddonCreateBody, { additionalProperties: false });

const releaseFields = {
  version: Type.String({ minLength: 1, maxLength: 64 }),
  ...bilingualBody('changelog'),
  downloadType: DownloadType,
  filePath: Type.String({ maxLength: 1024 }),
  externalUrl: Type.Union([Type.String({ maxLength: 2048 }), Type.Null()]),
  fileSize: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  sha256: Type.Union([Type.String({ pattern: '^[0-9a-fA-F]{64}$' }), Type.Null()]),
  gameVersion: Type.String({ maxLength: 64 }),
  wowVersion: Type.String({ description: 'accepted and ignored: stored as `1.18`' }),
  publishAt: PublishAtBody,
};
const optionalReleaseFields = Type.Partial(Type.Object(releaseFields)).properties;

export const ReleaseCreateBody = Type.Object(
  {
    ...optionalReleaseFields,
    addonId: Type.String({ minLength: 1 }),
    version: releaseFields.version,
    isLatest: Type.Optional(Type.Boolean({ description: 'ignored: a new release is always the latest' })),
  },
  { additionalProperties: false },
);

export const ReleaseUpdateBody = Type.Object(
  { ...optionalReleaseFields, isLatest: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);

const imageUrl = Type.String({ minLength: 1, maxLength: 2048 });
const sortOrder = Type.Integer({ minimum: -1_000_000_000, maximum: 1_000_000_000 });

export const ScreenshotCreateBody = Type.Object(
  { imageUrl, sortOrder: Type.Optional(sortOrder) },
  { additionalProperties: false },
);
export const ScreenshotUpdateBody = Type.Partial(ScreenshotCreateBody, { additionalProperties: false });
