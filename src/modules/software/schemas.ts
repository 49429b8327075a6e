import { Type } from 'typebox';
import {
  FileSignatureBody,
  fileSignatureSchema,
  NullableString,
  PublishAtBody,
  StringEnum,
} from '../../http/schemas.js';
import { bilingualBody } from '../../http/bilingual.js';
import { ChannelQuery, LangEnum, LangQuery } from '../../http/lang.js';
import { SlugBody } from '../../http/slug.js';
import { NullableHttpUrl } from '../../http/urls.js';

const Text = Type.String();
const NullableText = NullableString();

export const AutoHaltSchema = Type.Object(
  {
    maxQuietRate: Type.Number({ minimum: 0, maximum: 1, description: 'halt when quietAfterUpdate exceeds this share' }),
    minDevices: Type.Integer({ minimum: 1, maximum: 1_000_000_000, description: 'only once this many devices count' }),
  },
  { additionalProperties: false },
);

/** Fields of release safety that every answer listing versions carries (additive). */
function releaseSafetyFields() {
  return {
    rolloutPercent: Type.Integer({ description: 'share of devices (0–100) offered this version' }),
    publishAt: NullableString({ description: 'hidden from public reads until this time' }),
    revokedAt: NullableString({ description: 'withdrawn: not offered until unrevoked, downloads answer 410' }),
  };
}

/** A delta update to a version, as admin answers list it. */
export const DeltaSummarySchema = Type.Object({
  fromVersionCode: Type.Integer({ description: 'the version the delta updates from' }),
  status: StringEnum(['pending', 'ready', 'skipped', 'failed'] as const),
  fileSize: Type.Union([Type.Number(), Type.Null()], { description: 'bytes of the delta (ready only)' }),
  sha256: NullableText,
});

export const VersionSchema = Type.Object({
  id: Text,
  packageId: Text,
  version: Text,
  versionCode: Type.Integer(),
  changelog: Text,
  changelogZh: Text,
  changelogEn: Text,
  downloadType: StringEnum(['local', 'url'] as const),
  filePath: Text,
  externalUrl: NullableText,
  fileSize: Type.Number(),
  sha256: NullableText,
  forceUpdate: Type.Boolean(),
  minVersion: NullableText,
  isLatest: Type.Boolean(),
  wowVersion: Text,
  downloadCount: Type.Integer(),
  launcherDownloadCount: Type.Integer(),
  createdAt: Text,
  ...releaseSafetyFields(),
  autoHalt: Type.Union([AutoHaltSchema, Type.Null()]),
  haltedAt: NullableString({ description: 'when the automatic halt set rolloutPercent to 0' }),
  haltReason: NullableString(),
  deltas: Type.Optional(
    Type.Array(DeltaSummarySchema, { description: 'admin answers only: the delta updates to this version' }),
  ),
  ...fileSignatureSchema(),
});

export const VersionWithLangSchema = Type.Intersect([VersionSchema, Type.Object({ lang: LangEnum })]);

export const PackageSchema = Type.Object({
  id: Text,
  slug: Text,
  name: Text,
  nameZh: Text,
  nameEn: Text,
  description: Text,
  descriptionZh: Text,
  descriptionEn: Text,
  createdAt: Text,
  updatedAt: Text,
  versions: Type.Array(VersionSchema),
  _count: Type.Object({ versions: Type.Integer() }),
  lang: LangEnum,
});

export const CheckUpdateQuery = Type.Object({
  slug: Type.Optional(Type.String()),
  deviceId: Type.Optional(
    Type.String({ maxLength: 128, description: "the heartbeat's deviceId: places the device in staged rollouts" }),
  ),
  versionCode: Type.Optional(Type.String({ description: "client's current versionCode (integer, default 0)" })),
  ...ChannelQuery,
  ...LangQuery,
});

export const CheckUpdateResponse = Type.Object({
  hasUpdate: Type.Boolean(),
  forceUpdate: Type.Boolean(),
  lang: LangEnum,
  wowVersion: Text,
  latest: Type.Object({
    version: Text,
    versionCode: Type.Integer(),
    changelog: Text,
    changelogZh: Text,
    changelogEn: Text,
    downloadUrl: Text,
    fileSize: Type.Number(),
    minVersion: NullableText,
    wowVersion: Text,
    createdAt: Text,
    sha256: NullableText,
    fileName: Type.Optional(
      Type.String({
        description:
          "the stored file's original name (as uploaded; else `slug-version`), which its extension is taken from; absent for an external link",
      }),
    ),
    forceUpdate: Type.Boolean(),
    delta: Type.Optional(
      Type.Object(
        {
          fromVersionCode: Type.Integer(),
          downloadUrl: Text,
          fileSize: Type.Number(),
          sha256: Text,
        },
        {
          description:
            "a zstd patch from the client's versionCode: `zstd -d --long=31 --patch-from=CURRENT DELTA` rebuilds this file",
        },
      ),
    ),
    fileSignature: fileSignatureSchema().fileSignature,
  }),
  downgrade: Type.Boolean({ description: 'true for a device on a revoked version: install `latest` even when lower' }),
  signedAt: Type.String({ description: 'when this answer was signed (never more than 1 hour ago)' }),
});

export const LatestQuery = Type.Object({
  info: Type.Optional(Type.String({ description: '`1`: answer JSON metadata instead of the file' })),
  track: Type.Optional(Type.String({ description: 'with `info=1`: `1` also counts a download' })),
  ...ChannelQuery,
  ...LangQuery,
});

export const LatestInfoResponse = Type.Object({
  available: Type.Boolean(),
  version: Type.Optional(Text),
  versionCode: Type.Optional(Type.Integer()),
  changelog: Type.Optional(Text),
  changelogZh: Type.Optional(Text),
  changelogEn: Type.Optional(Text),
  fileSize: Type.Optional(Type.Number()),
  sha256: Type.Optional(NullableText),
  createdAt: Type.Optional(Text),
  downloadUrl: Type.Optional(Text),
  downloadType: Type.Optional(Text),
  lang: Type.Optional(LangEnum),
  ...fileSignatureSchema(),
});

export const ChangelogQuery = Type.Object({ slug: Type.Optional(Type.String()), ...ChannelQuery, ...LangQuery });

export const ChangelogResponse = Type.Object({
  name: Text,
  nameZh: Text,
  nameEn: Text,
  slug: Text,
  lang: LangEnum,
  wowVersion: Text,
  versions: Type.Array(
    Type.Object({
      version: Text,
      versionCode: Type.Integer(),
      changelog: Text,
      changelogZh: Text,
      changelogEn: Text,
      fileSize: Type.Number(),
      isLatest: Type.Boolean(),
      forceUpdate: Type.Boolean(),
      wowVersion: Text,
      createdAt: Text,
      ...releaseSafetyFields(),
    }),
  ),
});

export const DownloadQuery = Type.Object({
  source: Type.Optional(Type.String({ description: '`launcher` marks a launcher self-update' })),
});

export const PackageCreateBody = Type.Object(
  { slug: SlugBody, ...bilingualBody('name', 200), ...bilingualBody('description') },
  { additionalProperties: false },
);
export const PackageUpdateBody = Type.Partial(PackageCreateBody, { additionalProperties: false });

const versionFields = {
  version: Type.String({ minLength: 1, maxLength: 64 }),
  versionCode: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  ...bilingualBody('changelog'),
  downloadType: StringEnum(['local', 'url'] as const),
  filePath: Type.String({ maxLength: 1024 }),
  externalUrl: NullableHttpUrl(),
  fileSize: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  sha256: NullableString({ pattern: '^[0-9a-fA-F]{64}$' }),
  fileSignature: FileSignatureBody,
  forceUpdate: Type.Boolean(),
  minVersion: NullableString({ maxLength: 64 }),
  wowVersion: Type.String({ description: 'accepted and ignored: stored as `1.18`' }),
  publishAt: PublishAtBody,
  rolloutPercent: Type.Integer({ minimum: 0, maximum: 100, description: 'default 100; 0 halts the rollout' }),
  autoHalt: Type.Union([AutoHaltSchema, Type.Null()], {
    description: 'halt automatically (rolloutPercent 0) once minDevices count and quietAfterUpdate > maxQuietRate',
  }),
};

const optionalVersionFields = Type.Partial(Type.Object(versionFields)).properties;

export const VersionCreateBody = Type.Object(
  {
    ...optionalVersionFields,
    version: versionFields.version,
    versionCode: versionFields.versionCode,
    isLatest: Type.Optional(Type.Boolean({ description: 'ignored: a new version is always the latest' })),
  },
  { additionalProperties: false },
);

export const VersionUpdateBody = Type.Object(
  { ...optionalVersionFields, isLatest: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);

const HealthFigures = {
  devicesOnVersion: Type.Integer({ description: "devices whose last heartbeat's appVersion is this version" }),
  quietAfterUpdate: Type.Union([Type.Number(), Type.Null()], {
    description: 'share of devices (first seen ≥ 10 min ago) silent > 3 min in their first 10 min; null: none yet',
  }),
};

export const RolloutHealthSchema = Type.Object({
  rolloutPercent: Type.Integer(),
  publishedAt: Text,
  ...HealthFigures,
  onlineOnVersion: Type.Integer(),
  previous: Type.Union([Type.Object({ version: Text, ...HealthFigures }), Type.Null()]),
  timeline: Type.Array(Type.Object({ at: Text, devicesOnVersion: Type.Integer(), devicesOnPrevious: Type.Integer() }), {
    description: 'devices active on the version and on the previous one, at up to 48 points since publishedAt',
  }),
  haltedAt: NullableText,
  haltReason: NullableText,
});
