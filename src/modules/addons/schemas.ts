import { Type } from 'typebox';
import type { Lang } from '../../domain/lang.js';
import { bilingualBody } from '../../http/bilingual.js';
import { ChannelQuery, LangEnum, LangQuery } from '../../http/lang.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from '../../http/paging.js';
import { FileSignatureBody, fileSignatureSchema, PublishAtBody, StringEnum } from '../../http/schemas.js';
import { SLUG_PATTERN, SlugBody } from '../../http/slug.js';
import { ImageRef, NullableHttpUrl, NullableImageRef } from '../../http/urls.js';

const Text = Type.String();
const NullableText = Type.Union([Type.String(), Type.Null()]);
const DownloadType = Type.Union([Type.Literal('local'), Type.Literal('url')]);

export const ReleaseDependencySchema = Type.Object(
  {
    slug: Type.String({ pattern: SLUG_PATTERN, description: 'the addon needed' }),
    minVersion: Type.Union([Type.String({ minLength: 1, maxLength: 64 }), Type.Null()], {
      description: 'the lowest version that works, or null for any',
    }),
    optional: Type.Boolean({ description: 'true: used when present (an optional dependency), not required' }),
  },
  { additionalProperties: false },
);

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
  dependencies: Type.Array(ReleaseDependencySchema),
  ...fileSignatureSchema(),
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

/** Paging of a list (additive: without them the whole list is answered, as the specification has it). */
const PageQuery = {
  limit: Type.Optional(
    Type.String({
      // Query values are strings here (never coerced): this pattern is the range 1–100.
      pattern: '^(100|[1-9][0-9]?)$',
      description: `items per page, 1–${MAX_PAGE_SIZE} (${DEFAULT_PAGE_SIZE} when only \`cursor\` is given). The answer carries \`X-Total-Count\` and, when there is more, \`Link: <…>; rel="next"\``,
    }),
  ),
  cursor: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 1024,
      description: 'opaque: the `rel="next"` link of the previous page carries it',
    }),
  ),
};

export const AddonListQuery = Type.Object({
  ...LangQuery,
  ...ChannelQuery,
  ...PageQuery,
  sort: Type.Optional(
    Type.Union(
      [
        Type.Literal('updated'),
        Type.Literal('downloads'),
        Type.Literal('name'),
        Type.Literal('created'),
        Type.Literal('relevance'),
      ],
      {
        description:
          "`updated` (default: most recently updated first), `downloads` (most first), `name` (A–Z by the answer's name), `created` (newest first), `relevance` (best match of `search` first: a name equal to a term, then starting with it, then holding it, then the summary)",
      },
    ),
  ),
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
  ...PageQuery,
  addonId: Type.Optional(Type.String({ description: 'only the releases of this addon' })),
});

const category = Type.String({ minLength: 1, maxLength: 64, description: 'default `general`' });
const iconUrl = NullableImageRef();

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
  externalUrl: NullableHttpUrl(),
  fileSize: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  sha256: Type.Union([Type.String({ pattern: '^[0-9a-fA-F]{64}$' }), Type.Null()]),
  fileSignature: FileSignatureBody,
  gameVersion: Type.String({ maxLength: 64 }),
  wowVersion: Type.String({ description: 'accepted and ignored: stored as `1.18`' }),
  publishAt: PublishAtBody,
  dependencies: Type.Array(
    Type.Object(
      {
        slug: ReleaseDependencySchema.properties.slug,
        minVersion: Type.Optional(ReleaseDependencySchema.properties.minVersion),
        optional: Type.Optional(Type.Boolean({ description: 'default false' })),
      },
      { additionalProperties: false },
    ),
    { maxItems: 50, description: 'addons this release needs (or, `optional`, can use), by slug; each must exist' },
  ),
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

const imageUrl = ImageRef({ minLength: 1 });
const sortOrder = Type.Integer({ minimum: -1_000_000_000, maximum: 1_000_000_000 });

export const ScreenshotCreateBody = Type.Object(
  { imageUrl, sortOrder: Type.Optional(sortOrder) },
  { additionalProperties: false },
);
export const ScreenshotUpdateBody = Type.Partial(ScreenshotCreateBody, { additionalProperties: false });

/* Addon managers */

const Sha256 = Type.String({ pattern: '^[0-9a-fA-F]{64}$', description: 'SHA-256 of the file, hex' });

export const InstalledEntrySchema = Type.Union([
  Type.Object(
    { slug: Type.String({ minLength: 1, maxLength: 64 }), version: Type.String({ minLength: 1, maxLength: 64 }) },
    { additionalProperties: false },
  ),
  Type.Object({ sha256: Sha256 }, { additionalProperties: false }),
]);

/**
 * The bounds of the changelogs one updates answer carries (`changelogs: true`): per addon, and in the
 * whole answer (entries, and bytes of their JSON), so that no answer outgrows what a launcher reads.
 */
export const CHANGELOG_LIMITS = { perAddon: 50, entries: 1000, bytes: 1024 * 1024 } as const;

export const UpdatesBody = Type.Object(
  {
    installed: Type.Array(InstalledEntrySchema, {
      minItems: 1,
      maxItems: 500,
      description: 'the installed addons: `{slug, version}` or `{sha256}` of the file (up to 500)',
    }),
    changelogs: Type.Optional(
      Type.Boolean({
        description: `true: each result also carries \`changelogs\`, the releases above the installed one up to \`latest\`, newest first (at most ${CHANGELOG_LIMITS.perAddon} per addon, ${CHANGELOG_LIMITS.entries} and ${CHANGELOG_LIMITS.bytes} bytes of entries per answer), and \`changelogsOmitted\`, how many those bounds left out`,
      }),
    ),
    lang: Type.Optional(
      StringEnum<Lang>(['zh', 'en'], {
        description:
          "the answer's language (names, changelogs), covered by the answer's signature through the body's Content-Digest; wins over the query's `lang` and Accept-Language",
      }),
    ),
  },
  { additionalProperties: false },
);

const AddonRefSchema = Type.Object({ id: Text, slug: Text, name: Text, nameZh: Text, nameEn: Text });

const ReleaseFileSchema = Type.Object({
  id: Text,
  version: Text,
  downloadUrl: Text,
  sha256: NullableText,
  fileSize: Type.Number(),
  createdAt: Text,
  dependencies: Type.Array(ReleaseDependencySchema),
  fileSignature: fileSignatureSchema().fileSignature,
});

export const UpdatesResponse = Type.Object({
  results: Type.Array(
    Type.Object({
      query: InstalledEntrySchema,
      addon: Type.Union([AddonRefSchema, Type.Null()]),
      installed: Type.Union([ReleaseFileSchema, Type.Null()]),
      updateAvailable: Type.Boolean(),
      latest: Type.Union([ReleaseFileSchema, Type.Null()]),
      changelogs: Type.Optional(
        Type.Array(Type.Object({ version: Text, changelog: Text, createdAt: Text }), {
          description:
            'only with `changelogs: true`: the releases above the installed one up to `latest`, newest first',
        }),
      ),
      changelogsOmitted: Type.Optional(
        Type.Integer({
          minimum: 0,
          description: 'only with `changelogs: true`: the releases above the installed one left out by the bounds',
        }),
      ),
    }),
  ),
});

export const ByHashParams = Type.Object({ sha256: Sha256 });

export const ByHashResponse = Type.Object({ addon: AddonRefSchema, release: ReleaseFileSchema });

/** Most fingerprints one request may ask about (an addon manager sends more in several requests). */
export const MAX_FINGERPRINTS = 5000;

export const FingerprintsBody = Type.Object(
  {
    fingerprints: Type.Array(
      Type.String({
        pattern: '^[0-9a-f]{64}$',
        description: "a folder's fingerprint (patchwell-client/fingerprint): SHA-256, lowercase hex",
      }),
      {
        maxItems: MAX_FINGERPRINTS,
        description: `the fingerprints of folders found on disk (up to ${MAX_FINGERPRINTS})`,
      },
    ),
  },
  { additionalProperties: false },
);

export const FingerprintsResponse = Type.Object({
  matches: Type.Array(
    Type.Object({
      fingerprint: Text,
      folder: Type.String({ description: "the release's top-level folder with this fingerprint" }),
      addon: Type.Object({ id: Text, slug: Text }),
      release: Type.Object({
        id: Text,
        version: Text,
        folders: Type.Array(Type.String(), {
          description: 'every top-level folder of the release (sorted): adopt it only when all are found and match',
        }),
      }),
    }),
    {
      description:
        'every folder of a published release of a published addon with one of the fingerprints asked: by fingerprint as asked, newest release first',
    },
  ),
});
