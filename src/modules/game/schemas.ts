import { Type } from 'typebox';
import { bilingualBody } from '../../http/bilingual.js';
import { LangEnum, LangQuery } from '../../http/lang.js';
import { NullableString, PublishAtBody } from '../../http/schemas.js';
import { MAX_CHUNK_BYTES } from '../../domain/game-manifest.js';

const Text = Type.String();
const Sha256 = Type.String({ pattern: '^[0-9a-f]{64}$', description: 'lowercase hex SHA-256' });

/** At most this many chunks per missing-chunks question. */
export const MAX_MISSING_QUERY = 10_000;
/** A build's body holds the manifest's text: up to 100,000 files make tens of MiB. */
export const MAX_BUILD_BODY_BYTES = 64 * 1024 * 1024;
export { MAX_CHUNK_BYTES };

export const BuildCodeParams = Type.Object({ buildCode: Type.String({ description: 'the build code (integer ≥ 1)' }) });
export const ChunkParams = Type.Object({ sha256: Type.String({ description: "the chunk's lowercase hex SHA-256" }) });

export const CheckUpdateQuery = Type.Object({
  buildCode: Type.Optional(Type.String({ description: "the installed build's code (integer, default 0)" })),
  ...LangQuery,
});

const changelogFields = {
  changelog: Text,
  changelogZh: Text,
  changelogEn: Text,
};

export const CheckUpdateResponse = Type.Object({
  hasUpdate: Type.Boolean(),
  forceUpdate: Type.Boolean(),
  downgrade: Type.Boolean({ description: 'true for a launcher on a revoked build: install `latest` even when lower' }),
  latest: Type.Union([
    Type.Object({
      version: Text,
      buildCode: Type.Integer(),
      ...changelogFields,
      manifestUrl: Type.String({ description: 'absolute URL of the signed manifest' }),
      manifestSha256: Text,
      manifestSize: Type.Integer(),
      totalSize: Type.Number(),
      fileCount: Type.Integer(),
      manifestSignature: NullableString({ description: "the publisher's minisign signature of the manifest" }),
      publishedAt: Type.String({ description: 'when the build became published (publishAt, else its creation)' }),
    }),
    Type.Null(),
  ]),
  lang: LangEnum,
});

/** A build as the public list shows it. */
export const PublicBuildSchema = Type.Object({
  version: Text,
  buildCode: Type.Integer(),
  ...changelogFields,
  totalSize: Type.Number(),
  fileCount: Type.Integer(),
  publishedAt: Text,
  revokedAt: NullableString(),
});

/** A build as administrators see it. */
export const BuildSchema = Type.Object({
  version: Text,
  buildCode: Type.Integer(),
  ...changelogFields,
  forceUpdate: Type.Boolean(),
  publishAt: NullableString({ description: 'hidden from public reads until this time' }),
  revokedAt: NullableString({ description: 'withdrawn: not offered until unrevoked, its manifest answers 410' }),
  publishedAt: Text,
  manifestSha256: Text,
  manifestSize: Type.Integer(),
  manifestSignature: NullableString(),
  totalSize: Type.Number(),
  fileCount: Type.Integer(),
  chunkCount: Type.Integer({ description: 'distinct chunks the manifest names' }),
  newBytes: Type.Number({ description: 'bytes of chunks no earlier build named: what this build cost the store' }),
  downloadCount: Type.Integer({ description: 'manifests fetched' }),
  createdAt: Text,
  updatedAt: Text,
  broken: NullableString({
    description:
      'the first player-safety rule (game-files.md, 2026-12-05) the manifest breaks: a build stored before ' +
      'the rules, kept and listed but never offered by check-update; null for every valid build',
  }),
});

export const BuildWithLangSchema = Type.Intersect([BuildSchema, Type.Object({ lang: LangEnum })]);

export const MissingBody = Type.Object(
  { chunks: Type.Array(Sha256, { maxItems: MAX_MISSING_QUERY }) },
  { additionalProperties: false },
);
export const MissingResponse = Type.Object({
  missing: Type.Array(Text, { description: 'the chunks asked for that the store lacks, in the order asked' }),
});

export const ChunkStoredResponse = Type.Object({ sha256: Text, size: Type.Integer() });

export const GameStoreResponse = Type.Object({
  chunks: Type.Integer({ description: 'chunks stored (each once, however many builds name it)' }),
  bytes: Type.Number({ description: 'their bytes: what the game client takes in the store' }),
});

const editable = {
  ...bilingualBody('changelog'),
  forceUpdate: Type.Optional(Type.Boolean()),
  publishAt: Type.Optional(PublishAtBody),
};

export const BuildCreateBody = Type.Object(
  {
    version: Type.String({ minLength: 1, maxLength: 64 }),
    buildCode: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
    ...editable,
    manifest: Type.String({ description: 'the manifest, exactly as it will be served (UTF-8 JSON text)' }),
    manifestSignature: Type.Optional(
      NullableString({
        maxLength: 10_000,
        description: 'minisign signature of the manifest, trusted comment `game=<app> buildCode=<n> sha256=<hex>`',
      }),
    ),
  },
  { additionalProperties: false },
);

export const BuildUpdateBody = Type.Object(editable, { additionalProperties: false });
