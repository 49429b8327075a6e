import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { Static } from 'typebox';
import { checkSignature, gameTrustedComment, parseSignature, prehash } from 'patchwell-client/minisign';
import type { AppContext } from '../../context.js';
import type { Db } from '../../db/index.js';
import type { GameBuildRow } from '../../db/schema.js';
import { now, nowIso } from '../../domain/clock.js';
import { checkManifest } from '../../domain/game-manifest.js';
import type { Lang } from '../../domain/lang.js';
import { localize } from '../../domain/lang.js';
import { isPublished } from '../../domain/rollout.js';
import { bilingualColumns, bilingualWrite } from '../../http/bilingual.js';
import { AppError, badRequest, conflict, notFound } from '../../http/errors.js';
import { publishAtColumn } from '../../http/schemas.js';
import { fileSignatureColumn } from '../downloads/file-signature.js';
import { newlyPublished, recordEvent } from '../webhooks/events.js';
import { batches } from './chunks.js';
import {
  type Build,
  type BuildSummary,
  decideGameUpdate,
  manifestPath,
  type PublicBuild,
  publishedAt,
  toBuild,
  toPublicBuild,
} from './mapper.js';
import type { BuildCreateBody, BuildUpdateBody, CheckUpdateResponse } from './schemas.js';

type CheckUpdate = Static<typeof CheckUpdateResponse>;

/** A build's manifest as served: its exact bytes. */
export interface ServedManifest {
  readonly buildCode: number;
  readonly bytes: Buffer;
  readonly sha256: string;
  readonly lastModified: Date;
}

/** PostgreSQL's advisory lock that build creations take in turn (any constant no other lock uses). */
const BUILD_CREATION_LOCK = 0x67616d65;

/** Every column but the manifest's text. */
const SUMMARY_COLUMNS = [
  'buildCode',
  'version',
  'changelogZh',
  'changelogEn',
  'forceUpdate',
  'publishAt',
  'revokedAt',
  'manifestSha256',
  'manifestSize',
  'manifestSignature',
  'totalSize',
  'fileCount',
  'chunkCount',
  'newBytes',
  'downloadCount',
  'createdAt',
  'updatedAt',
  'broken',
] as const;

function buildSubject(build: Pick<GameBuildRow, 'buildCode' | 'version' | 'changelogEn' | 'changelogZh'>) {
  return {
    id: String(build.buildCode),
    title: `Game client ${build.version} (build ${build.buildCode})`,
    text: build.changelogEn || build.changelogZh,
  };
}

function buildData(build: BuildSummary): Record<string, unknown> {
  return {
    buildCode: build.buildCode,
    version: build.version,
    forceUpdate: build.forceUpdate === 1,
    publishAt: build.publishAt,
    totalSize: build.totalSize,
    fileCount: build.fileCount,
    manifestSha256: build.manifestSha256,
  };
}

/** A `buildCode` path parameter: an integer ≥ 1 (404 otherwise: no such build). */
export function buildCodeOf(param: string): number {
  const code = /^\d{1,15}$/.test(param) ? Number(param) : 0;
  if (code < 1) throw notFound(`game build not found: ${param}`);
  return code;
}

/**
 * One warning per stored build that breaks the player-safety rules (`broken`), for the start-up log:
 * each names the build and the rule.
 */
export async function brokenBuildWarnings(db: Db): Promise<string[]> {
  const rows = await db
    .selectFrom('gameBuilds')
    .select(['buildCode', 'version', 'broken'])
    .where('broken', 'is not', null)
    .orderBy('buildCode', 'desc')
    .execute();
  return rows.map(
    (row) =>
      `game build ${row.version} (buildCode ${row.buildCode}) breaks the manifest rules and is never offered ` +
      `to launchers (it stays stored and listed): ${row.broken}`,
  );
}

export class GameService {
  constructor(private readonly ctx: AppContext) {}

  private get db(): Db {
    return this.ctx.db;
  }

  /** Every build without its manifest, highest `buildCode` first, cached until the next write or publication. */
  private builds(): Promise<BuildSummary[]> {
    return this.ctx.cache.get('game:builds', () =>
      this.db.selectFrom('gameBuilds').select(SUMMARY_COLUMNS).orderBy('buildCode', 'desc').execute(),
    );
  }

  /** The check-update answer as JSON, rendered (and so signed) once per decision, language and origin. */
  async checkUpdate(clientCode: number, lang: Lang, baseUrl: string): Promise<Buffer> {
    const at = now();
    const decided = decideGameUpdate(await this.builds(), clientCode, at);
    const key = decided
      ? `game:answer:${decided.build.buildCode}:${lang}:${decided.hasUpdate}:${decided.forceUpdate}:${decided.downgrade}:${baseUrl}`
      : `game:answer:none:${lang}`;
    return this.ctx.cache.get(key, async () => {
      const build = decided?.build;
      const answer: CheckUpdate & { signedAt: string } = {
        hasUpdate: decided?.hasUpdate ?? false,
        forceUpdate: decided?.forceUpdate ?? false,
        downgrade: decided?.downgrade ?? false,
        latest: build
          ? {
              version: build.version,
              buildCode: build.buildCode,
              ...localize('changelog', build.changelogZh, build.changelogEn, lang),
              manifestUrl: `${baseUrl}${manifestPath(build.buildCode)}`,
              manifestSha256: build.manifestSha256,
              manifestSize: build.manifestSize,
              totalSize: build.totalSize,
              fileCount: build.fileCount,
              manifestSignature: build.manifestSignature,
              publishedAt: publishedAt(build),
            }
          : null,
        lang,
        signedAt: new Date(now()).toISOString(),
      };
      return Buffer.from(JSON.stringify(answer));
    });
  }

  /** The published builds (revoked ones included, with `revokedAt`), newest `buildCode` first. */
  async publicList(lang: Lang): Promise<PublicBuild[]> {
    const at = now();
    return (await this.builds()).filter((b) => isPublished(b.publishAt, at)).map((b) => toPublicBuild(b, lang));
  }

  /** Every build, scheduled ones included, with its current download count (administrators: not cached). */
  async adminList(lang: Lang): Promise<Build[]> {
    const rows = await this.db.selectFrom('gameBuilds').select(SUMMARY_COLUMNS).orderBy('buildCode', 'desc').execute();
    return rows.map((b) => toBuild(b, lang));
  }

  /** A published build's manifest (404 while scheduled or unknown); the caller answers 410 when revoked. */
  async manifest(buildCode: number): Promise<ServedManifest> {
    const summary = (await this.builds()).find((b) => b.buildCode === buildCode);
    if (!summary || !isPublished(summary.publishAt, now())) throw notFound(`game build not found: ${buildCode}`);
    if (summary.revokedAt !== null) throw new AppError(410, `game build ${summary.version} was withdrawn`);
    return this.ctx.cache.get(`game:manifest:${buildCode}`, async () => {
      const row = await this.db
        .selectFrom('gameBuilds')
        .select(['manifest', 'manifestSha256', 'createdAt'])
        .where('buildCode', '=', buildCode)
        .executeTakeFirst();
      if (!row) throw notFound(`game build not found: ${buildCode}`);
      return {
        buildCode,
        bytes: Buffer.from(row.manifest, 'utf8'),
        sha256: row.manifestSha256,
        lastModified: new Date(row.createdAt),
      };
    });
  }

  private async summary(db: Db, buildCode: number): Promise<BuildSummary> {
    const row = await db
      .selectFrom('gameBuilds')
      .select(SUMMARY_COLUMNS)
      .where('buildCode', '=', buildCode)
      .executeTakeFirst();
    if (!row) throw notFound(`game build not found: ${buildCode}`);
    return row;
  }

  async build(buildCode: number, lang: Lang): Promise<Build> {
    return toBuild(await this.summary(this.db, buildCode), lang);
  }

  /** With PUBLISHER_KEYS: the manifest's bytes signed by a publisher for this app and build (400 otherwise). */
  private async requireSignature(signature: string | null, bytes: Buffer, buildCode: number, sha256: string) {
    const keys = this.ctx.config.publisherKeys;
    if (keys === null) return;
    const field = 'body.manifestSignature';
    if (signature === null) throw badRequest(`${field}: is required: the manifest must be signed by a publisher key`);
    const comment = gameTrustedComment({ app: this.ctx.config.appName, buildCode, sha256 });
    const verdict = checkSignature(parseSignature(signature), keys, await prehash([bytes]), comment);
    if (!verdict.ok) throw badRequest(`${field}: ${verdict.reason}`);
  }

  async create(body: Static<typeof BuildCreateBody>, lang: Lang): Promise<Build> {
    const checked = checkManifest(body.manifest);
    if (!checked.ok) throw badRequest(`body.manifest: ${checked.error}`);
    const { manifest } = checked;
    const app = this.ctx.config.appName;
    if (manifest.buildCode !== body.buildCode) {
      throw badRequest(`body.manifest: buildCode is ${manifest.buildCode}, the request's is ${body.buildCode}`);
    }
    if (manifest.version !== body.version) {
      throw badRequest(`body.manifest: version is "${manifest.version}", the request's is "${body.version}"`);
    }
    if (manifest.app !== app) throw badRequest(`body.manifest: app is "${manifest.app}", this service's is "${app}"`);
    const bytes = Buffer.from(body.manifest, 'utf8');
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    const signature = fileSignatureColumn(body.manifestSignature, 'body.manifestSignature') ?? null;
    await this.requireSignature(signature, bytes, body.buildCode, sha256);
    const changelog = bilingualWrite(body, 'changelog');
    const names = [...checked.chunks.keys()];
    const row = await this.ctx.cache.commit(async (trx) => {
      await this.claimBuildCode(trx, body.buildCode);
      // Taken in turn (see claimBuildCode): creation times ascend with build codes.
      const at = nowIso();
      // Touched inside this transaction: the sweep cannot take a chunk this build is about to name.
      const stored = await this.ctx.gameChunks.touch(trx, names);
      for (const [name, size] of checked.chunks) {
        const storedSize = stored.get(name);
        if (storedSize === undefined) {
          throw badRequest(
            `body.manifest: chunk ${name} is not stored: upload it first (PUT /api/admin/game/chunks/${name})`,
          );
        }
        if (storedSize !== size) throw badRequest(`body.manifest: chunk ${name} is ${storedSize} bytes, not ${size}`);
      }
      const newBytes = await this.newBytes(trx, body.buildCode, checked.chunks);
      const build: GameBuildRow = {
        buildCode: body.buildCode,
        version: body.version,
        changelogZh: changelog.zh ?? '',
        changelogEn: changelog.en ?? '',
        forceUpdate: body.forceUpdate === true ? 1 : 0,
        publishAt: publishAtColumn(body.publishAt),
        revokedAt: null,
        manifest: body.manifest,
        manifestSha256: sha256,
        manifestSize: bytes.length,
        manifestSignature: signature,
        totalSize: checked.totalSize,
        fileCount: manifest.files.length,
        chunkCount: names.length,
        newBytes,
        downloadCount: 0,
        createdAt: at,
        updatedAt: at,
        // Checked whole above: a build created now breaks no rule.
        broken: null,
      };
      await trx.insertInto('gameBuilds').values(build).execute();
      for (const batch of batches(names, 5000)) {
        await trx
          .insertInto('gameBuildChunks')
          .values(batch.map((name) => ({ buildCode: body.buildCode, sha256: name })))
          .execute();
      }
      await recordEvent(trx, 'game.build.published', buildSubject(build), buildData(build), build.publishAt);
      return build;
    });
    return toBuild(row, lang);
  }

  /**
   * 409 unless `buildCode` is above every build the service holds (published, scheduled or revoked):
   * launchers only move up. Creations take turns from here to their commit (PostgreSQL: a lock held
   * until the transaction ends; SQLite runs one write transaction at a time), so two at once cannot
   * both see the same highest build and store a lower one after a higher one.
   */
  private async claimBuildCode(trx: Db, buildCode: number): Promise<void> {
    if (this.ctx.engine === 'postgres') {
      await sql`select pg_advisory_xact_lock(${sql.lit(BUILD_CREATION_LOCK)})`.execute(trx);
    }
    const highest = await trx
      .selectFrom('gameBuilds')
      .select('buildCode')
      .orderBy('buildCode', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (highest === undefined || highest.buildCode < buildCode) return;
    const used = await trx
      .selectFrom('gameBuilds')
      .select('buildCode')
      .where('buildCode', '=', buildCode)
      .executeTakeFirst();
    if (used) throw conflict(`buildCode ${buildCode} is already used`);
    throw conflict(
      `buildCode ${buildCode} is not above ${highest.buildCode}, the highest build this service holds ` +
        '(published, scheduled or revoked): launchers only move up (to send them back, revoke the builds above)',
    );
  }

  /** Bytes of `chunks` that the build before `buildCode` (the highest below it) does not name. */
  private async newBytes(trx: Db, buildCode: number, chunks: ReadonlyMap<string, number>): Promise<number> {
    const before = await trx
      .selectFrom('gameBuilds')
      .select('buildCode')
      .where('buildCode', '<', buildCode)
      .orderBy('buildCode', 'desc')
      .limit(1)
      .executeTakeFirst();
    let total = 0;
    for (const size of chunks.values()) total += size;
    if (!before) return total;
    for (const batch of batches([...chunks.keys()])) {
      const shared = await trx
        .selectFrom('gameBuildChunks')
        .select('sha256')
        .where('buildCode', '=', before.buildCode)
        .where('sha256', 'in', batch)
        .execute();
      for (const { sha256 } of shared) total -= chunks.get(sha256) ?? 0;
    }
    return total;
  }

  async update(buildCode: number, body: Static<typeof BuildUpdateBody>, lang: Lang): Promise<Build> {
    const fields = {
      ...bilingualColumns(body, 'changelog'),
      ...(body.forceUpdate !== undefined ? { forceUpdate: body.forceUpdate ? 1 : 0 } : {}),
      ...(body.publishAt !== undefined ? { publishAt: publishAtColumn(body.publishAt) } : {}),
    };
    const row = await this.ctx.cache.commit(async (trx) => {
      const current = await this.summary(trx, buildCode);
      const updated = { ...current, ...fields, updatedAt: nowIso() };
      await trx
        .updateTable('gameBuilds')
        .set({ ...fields, updatedAt: updated.updatedAt })
        .where('buildCode', '=', buildCode)
        .execute();
      if (fields.publishAt !== undefined && newlyPublished(current.publishAt, updated.publishAt)) {
        await recordEvent(trx, 'game.build.published', buildSubject(updated), buildData(updated), updated.publishAt);
      }
      return updated;
    });
    return toBuild(row, lang);
  }

  /** Withdraws a build (`revokedAt` set) or, with `revoked` false, offers it again. */
  async setRevoked(buildCode: number, revoked: boolean, lang: Lang): Promise<Build> {
    const row = await this.ctx.cache.commit(async (trx) => {
      const result = await trx
        .updateTable('gameBuilds')
        .set({ revokedAt: revoked ? nowIso() : null })
        .where('buildCode', '=', buildCode)
        .where('revokedAt', revoked ? 'is' : 'is not', null)
        .executeTakeFirst();
      const build = await this.summary(trx, buildCode);
      if (revoked && result.numUpdatedRows > 0n) {
        await recordEvent(trx, 'game.build.revoked', buildSubject(build), buildData(build));
      }
      return build;
    });
    return toBuild(row, lang);
  }

  /** Deletes a build; chunks no other build names are swept once older than the upload expiry. */
  async delete(buildCode: number): Promise<void> {
    await this.ctx.cache.commit(async (trx) => {
      const result = await trx.deleteFrom('gameBuilds').where('buildCode', '=', buildCode).executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound(`game build not found: ${buildCode}`);
    });
  }
}
