import type { Static } from 'typebox';
import type { AppContext } from '../../context.js';
import type { PackageRow, VersionRow, VersionUpdate } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import { type Lang, localize } from '../../domain/lang.js';
import { decideCheckUpdate, effectiveLatest, isPublished } from '../../domain/rollout.js';
import { bilingualColumns, bilingualWrite, requiredBilingual, requiredBilingualColumns } from '../../http/bilingual.js';
import { AppError, conflict, notFound } from '../../http/errors.js';
import { publishAtColumn } from '../../http/schemas.js';
import { checkSlug, RESERVED_SOFTWARE_SLUGS } from '../../http/slug.js';
import { filePathFromKey } from '../../storage/storage.js';
import { type DeltaOffer, deltaFileKeys, deltaSummaries, readyDeltas } from '../deltas/repository.js';
import { downloadFields } from '../downloads/fields.js';
import { fileSignatureColumn, requirePublisherSignature } from '../downloads/file-signature.js';
import { versionTrustedComment } from 'patchwell-client/minisign';
import type { DownloadTarget } from '../downloads/service.js';
import { latestIdOf, type Package, type RolloutRow, toPackage, toRollout, toVersion, type Version } from './mapper.js';
import * as repo from './repository.js';
import { newlyPublished, recordEvent } from '../webhooks/events.js';
import { versionData, versionSubject } from './events.js';
import type {
  ChangelogResponse,
  CheckUpdateResponse,
  PackageCreateBody,
  PackageUpdateBody,
  VersionCreateBody,
  VersionUpdateBody,
} from './schemas.js';

type CheckUpdate = Static<typeof CheckUpdateResponse>;

export const downloadPath = (versionId: string) => `/api/software/download/${encodeURIComponent(versionId)}`;
export const deltaPath = (versionId: string, fromVersionCode: number) =>
  `${downloadPath(versionId)}/delta/${fromVersionCode}`;

/** Ready deltas by target version id, then by the source's `versionCode`. */
type Offers = ReadonlyMap<string, ReadonlyMap<number, DeltaOffer>>;

export class SoftwareService {
  readonly launcherSlug: string;
  readonly patchSlug: string;

  constructor(private readonly ctx: AppContext) {
    this.launcherSlug = `${ctx.config.appName}-launcher`;
    this.patchSlug = `${ctx.config.appName}-launcher-patch`;
  }

  private get db() {
    return this.ctx.db;
  }

  /** Versions the public sees: published ones (revoked ones stay listed, with `revokedAt`). */
  private published(versions: readonly VersionRow[], at: number): VersionRow[] {
    return versions.filter((v) => isPublished(v.publishAt, at));
  }

  async list(lang: Lang): Promise<Package[]> {
    const at = now();
    const packages = await repo.listPackages(this.db);
    const versions = this.published(
      await repo.versionsOf(
        this.db,
        packages.map((p) => p.id),
      ),
      at,
    );
    return packages.map((p) =>
      toPackage(
        p,
        versions.filter((v) => v.packageId === p.id),
        lang,
        'latest',
        at,
      ),
    );
  }

  /** One package with its versions: the published ones, or for administrators every one (scheduled too). */
  async detail(idOrSlug: string, lang: Lang, audience: 'public' | 'admin' = 'public'): Promise<Package> {
    const at = now();
    const row = await repo.findPackage(this.db, idOrSlug);
    if (!row) throw notFound(`software package not found: ${idOrSlug}`);
    const versions = await repo.versionsOf(this.db, [row.id]);
    if (audience === 'public') return toPackage(row, this.published(versions, at), lang, 'all', at);
    const pkg = toPackage(row, versions, lang, 'all', at);
    return { ...pkg, versions: await this.withDeltas(pkg.versions) };
  }

  /**
   * The package and its versions as the rollout rules see them, cached until the next write or
   * scheduled publication (on any instance).
   */
  private rolloutOf(slug: string): Promise<{ pkg: PackageRow; versions: RolloutRow[]; deltas: Offers } | null> {
    return this.ctx.cache.get(`software:rollout:${slug}`, async () => {
      const pkg = await repo.findPackageBySlug(this.db, slug);
      if (!pkg) return null;
      const at = now();
      const versions = (await repo.versionsOf(this.db, [pkg.id])).map((v) => toRollout(v, at));
      return { pkg, versions, deltas: await this.offers(versions.map((v) => v.id)) };
    });
  }

  /** The deltas that may be offered to `targetIds` (none with DELTAS=off). */
  private async offers(targetIds: readonly string[]): Promise<Offers> {
    return this.ctx.config.deltas.enabled ? readyDeltas(this.db, targetIds) : new Map();
  }

  /** Versions as admin answers show them: each with its deltas. */
  private async withDeltas(versions: Version[]): Promise<Version[]> {
    const deltas = await deltaSummaries(
      this.db,
      versions.map((v) => v.id),
    );
    return versions.map((v) => ({ ...v, deltas: deltas.get(v.id) ?? [] }));
  }

  /**
   * The `check-update` answer as JSON. It depends only on the version the device is offered, the
   * decision, the language and the origin of the download URL, so each of those combinations is
   * rendered (and signed, see Signer) once per publish and then served as it is.
   */
  async checkUpdate(
    slug: string,
    clientCode: number,
    deviceId: string | null,
    lang: Lang,
    baseUrl: string,
  ): Promise<Buffer> {
    const found = await this.rolloutOf(slug);
    if (!found) throw notFound(`software package not found: ${slug}`);
    const decided = decideCheckUpdate(found.versions, clientCode, deviceId);
    if (!decided) throw notFound(`software package ${slug} has no version`);
    const { version, ...decision } = decided;
    const latest = version.row;
    // Only a client on a version with a ready delta gets its own answer: the others share one.
    const delta = found.deltas.get(latest.id)?.get(clientCode);
    const key = `software:answer:${latest.id}:${lang}:${decision.hasUpdate}:${decision.forceUpdate}:${decision.downgrade}:${baseUrl}:${delta?.fromVersionCode ?? ''}`;
    return this.ctx.cache.get(key, async () => {
      const fileName = await this.storedFileName(latest);
      const answer: CheckUpdate = {
        hasUpdate: decision.hasUpdate,
        forceUpdate: decision.forceUpdate,
        lang,
        wowVersion: CHANNEL,
        latest: {
          version: latest.version,
          versionCode: latest.versionCode,
          ...localize('changelog', latest.changelogZh, latest.changelogEn, lang),
          downloadUrl: `${baseUrl}${downloadPath(latest.id)}?source=launcher`,
          fileSize: latest.fileSize,
          minVersion: latest.minVersion,
          wowVersion: CHANNEL,
          createdAt: latest.createdAt,
          sha256: latest.sha256,
          ...(fileName !== null ? { fileName } : {}),
          forceUpdate: latest.forceUpdate === 1,
          ...(delta
            ? {
                delta: {
                  fromVersionCode: delta.fromVersionCode,
                  downloadUrl: `${baseUrl}${deltaPath(latest.id, delta.fromVersionCode)}?source=launcher`,
                  fileSize: delta.fileSize,
                  sha256: delta.sha256,
                },
              }
            : {}),
          ...(latest.fileSignature !== null ? { fileSignature: latest.fileSignature } : {}),
        },
        downgrade: decision.downgrade,
        signedAt: new Date(now()).toISOString(),
      };
      return Buffer.from(JSON.stringify(answer));
    });
  }

  /**
   * What the website and unidentified clients get of the launcher full package: the newest offered
   * version at 100 %, else the latest; null when none is offered.
   */
  async launcherLatest(): Promise<VersionRow | null> {
    const found = await this.rolloutOf(this.launcherSlug);
    return (found && effectiveLatest(found.versions, null)?.row) ?? null;
  }

  async changelog(slug: string, lang: Lang): Promise<Static<typeof ChangelogResponse>> {
    const at = now();
    const pkg = await repo.findPackageBySlug(this.db, slug);
    if (!pkg) throw notFound(`software package not found: ${slug}`);
    const versions = this.published(await repo.versionsOf(this.db, [pkg.id]), at);
    const latestId = latestIdOf(versions, at);
    return {
      ...localize('name', pkg.nameZh, pkg.nameEn, lang),
      slug: pkg.slug,
      lang,
      wowVersion: CHANNEL,
      versions: versions.map((v) => {
        const full = toVersion(v, lang, latestId);
        return {
          version: full.version,
          versionCode: full.versionCode,
          changelog: full.changelog,
          changelogZh: full.changelogZh,
          changelogEn: full.changelogEn,
          fileSize: full.fileSize,
          isLatest: full.isLatest,
          forceUpdate: full.forceUpdate,
          wowVersion: CHANNEL,
          createdAt: full.createdAt,
          rolloutPercent: full.rolloutPercent,
          publishAt: full.publishAt,
          revokedAt: full.revokedAt,
        };
      }),
    };
  }

  async version(versionId: string): Promise<VersionRow> {
    const row = await repo.findVersion(this.db, versionId);
    if (!row) throw notFound(`software version not found: ${versionId}`);
    return row;
  }

  /**
   * Every version by id, loaded once per content version (any write, on any instance, reloads it): a
   * download finds its version in memory. Its counters are not read from here.
   */
  private versionsById(): Promise<ReadonlyMap<string, VersionRow>> {
    return this.ctx.cache.get('software:versions-by-id', async () => {
      const rows = await this.db.selectFrom('softwareVersions').selectAll().execute();
      return new Map(rows.map((row) => [row.id, row]));
    });
  }

  /** A version the public may download: 404 while scheduled, 410 once revoked. */
  async downloadableVersion(versionId: string): Promise<VersionRow> {
    const row = (await this.versionsById()).get(versionId);
    if (!row || !isPublished(row.publishAt, now())) throw notFound(`software version not found: ${versionId}`);
    if (row.revokedAt !== null) throw new AppError(410, `software version ${row.version} was withdrawn`);
    return row;
  }

  async downloadTarget(version: VersionRow): Promise<DownloadTarget> {
    if (version.downloadType === 'url') {
      if (!version.externalUrl) throw notFound('software version has no download link');
      return { type: 'url', url: version.externalUrl };
    }
    const fileName = await this.storedFileName(version);
    if (fileName === null) throw notFound('software version has no file');
    return { type: 'local', filePath: version.filePath, fileName, sha256: version.sha256 };
  }

  /**
   * The name a version's stored file is downloaded under (and check-update names, signed): its
   * uploaded name, else `slug-version`; null for an external link or no file.
   */
  private async storedFileName(version: VersionRow): Promise<string | null> {
    if (version.downloadType === 'url' || version.filePath === '') return null;
    return this.ctx.downloads.fileName(version.filePath, () => this.fileBaseName(version));
  }

  /** `slug-version`: the download name of a file uploaded without a name. */
  private async fileBaseName(version: VersionRow): Promise<string> {
    const pkg = await this.db
      .selectFrom('softwarePackages')
      .select('slug')
      .where('id', '=', version.packageId)
      .executeTakeFirst();
    return `${pkg?.slug ?? 'download'}-${version.version}`;
  }

  /** The delta to `version` from `fromVersionCode` as a download (404 unless one may be offered). */
  async deltaTarget(version: VersionRow, fromVersionCode: number): Promise<DownloadTarget> {
    const offers = await this.ctx.cache.get(`software:deltas:${version.id}`, () => this.offers([version.id]));
    const offer = offers.get(version.id)?.get(fromVersionCode);
    if (!offer) throw notFound(`no delta to ${version.version} from versionCode ${fromVersionCode}`);
    return {
      type: 'local',
      filePath: filePathFromKey(offer.fileKey),
      fileName: `${await this.fileBaseName(version)}-from-${fromVersionCode}.zst`,
      sha256: offer.sha256,
    };
  }

  async createPackage(body: Static<typeof PackageCreateBody>, lang: Lang): Promise<Package> {
    const slug = checkSlug(body.slug, RESERVED_SOFTWARE_SLUGS);
    const name = requiredBilingual(body, 'name');
    const description = bilingualWrite(body, 'description');
    const now = nowIso();
    const row: PackageRow = {
      id: newId(),
      slug,
      nameZh: name.zh,
      nameEn: name.en,
      descriptionZh: description.zh ?? '',
      descriptionEn: description.en ?? '',
      createdAt: now,
      updatedAt: now,
    };
    await this.ctx.cache.commit(async (trx) => {
      if (await repo.findPackageBySlug(trx, slug)) throw conflict(`slug already exists: ${slug}`);
      await trx.insertInto('softwarePackages').values(row).execute();
    });
    return toPackage(row, [], lang, 'all', Date.parse(now));
  }

  async updatePackage(id: string, body: Static<typeof PackageUpdateBody>, lang: Lang): Promise<Package> {
    const nameColumns = requiredBilingualColumns(body, 'name');
    const slug = body.slug === undefined ? undefined : checkSlug(body.slug, RESERVED_SOFTWARE_SLUGS);
    await this.ctx.cache.commit(async (trx) => {
      const existing = await trx.selectFrom('softwarePackages').select('id').where('id', '=', id).executeTakeFirst();
      if (!existing) throw notFound(`software package not found: ${id}`);
      if (slug !== undefined) {
        const other = await repo.findPackageBySlug(trx, slug);
        if (other && other.id !== id) throw conflict(`slug already exists: ${slug}`);
      }
      await trx
        .updateTable('softwarePackages')
        .set({
          ...(slug !== undefined ? { slug } : {}),
          ...nameColumns,
          ...bilingualColumns(body, 'description'),
          updatedAt: nowIso(),
        })
        .where('id', '=', id)
        .execute();
    });
    return this.detail(id, lang, 'admin');
  }

  async deletePackage(id: string): Promise<void> {
    const deltaFiles = await this.ctx.cache.commit(async (trx) => {
      const keys = await deltaFileKeys(trx, { packageId: id });
      const result = await trx.deleteFrom('softwarePackages').where('id', '=', id).executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound(`software package not found: ${id}`);
      return keys;
    });
    await this.deleteFiles(deltaFiles);
  }

  /** Deletes delta files whose rows went with their versions (after the commit: a rollback keeps them). */
  private async deleteFiles(keys: readonly string[]): Promise<void> {
    for (const key of keys) await this.ctx.storage.delete(key);
  }

  async createVersion(packageId: string, body: Static<typeof VersionCreateBody>, lang: Lang): Promise<Version> {
    const changelog = bilingualWrite(body, 'changelog');
    const files = await downloadFields(this.ctx.files, body, null);
    const row: VersionRow = {
      id: newId(),
      packageId,
      version: body.version,
      versionCode: body.versionCode,
      changelogZh: changelog.zh ?? '',
      changelogEn: changelog.en ?? '',
      downloadType: body.downloadType ?? 'local',
      filePath: files.filePath ?? '',
      externalUrl: files.externalUrl ?? null,
      fileSize: files.fileSize ?? 0,
      sha256: files.sha256 ?? null,
      forceUpdate: body.forceUpdate === true ? 1 : 0,
      minVersion: body.minVersion ?? null,
      isLatest: 0,
      wowVersion: CHANNEL,
      downloadCount: 0,
      launcherDownloadCount: 0,
      createdAt: nowIso(),
      publishAt: publishAtColumn(body.publishAt),
      rolloutPercent: body.rolloutPercent ?? 100,
      revokedAt: null,
      autoHalt: body.autoHalt ? JSON.stringify(body.autoHalt) : null,
      haltedAt: null,
      haltReason: null,
      fileSignature: fileSignatureColumn(body.fileSignature) ?? null,
    };
    await this.requireSignature(row);
    await this.ctx.cache.commit(async (trx) => {
      if (!(await repo.lockPackage(trx, this.ctx.engine, packageId))) {
        throw notFound(`software package not found: ${packageId}`);
      }
      await repo.requireFreeVersionCode(trx, packageId, row.versionCode);
      await trx.insertInto('softwareVersions').values(row).execute();
      await repo.moveLatest(trx, packageId, row.id);
      await trx.updateTable('softwarePackages').set({ updatedAt: nowIso() }).where('id', '=', packageId).execute();
      await recordEvent(trx, 'version.published', await versionSubject(trx, row), versionData(row), row.publishAt);
    });
    const versions = await repo.versionsOf(this.db, [packageId]);
    return toVersion({ ...row, isLatest: 1 }, lang, latestIdOf(versions, now()));
  }

  async updateVersion(versionId: string, body: Static<typeof VersionUpdateBody>, lang: Lang): Promise<Version> {
    const current = await this.version(versionId);
    const fields: VersionUpdate = {
      ...(await downloadFields(this.ctx.files, body, current)),
      ...(body.version !== undefined ? { version: body.version } : {}),
      ...(body.versionCode !== undefined ? { versionCode: body.versionCode } : {}),
      ...bilingualColumns(body, 'changelog'),
      ...(body.forceUpdate !== undefined ? { forceUpdate: body.forceUpdate ? 1 : 0 } : {}),
      ...(body.minVersion !== undefined ? { minVersion: body.minVersion } : {}),
      ...(body.publishAt !== undefined ? { publishAt: publishAtColumn(body.publishAt) } : {}),
      // A new percent (a ramp, or resuming after a halt) clears the record of an automatic halt.
      ...(body.rolloutPercent !== undefined
        ? { rolloutPercent: body.rolloutPercent, haltedAt: null, haltReason: null }
        : {}),
      ...(body.autoHalt !== undefined ? { autoHalt: body.autoHalt ? JSON.stringify(body.autoHalt) : null } : {}),
    };
    const fileSignature = fileSignatureColumn(body.fileSignature);
    if (fileSignature !== undefined) fields.fileSignature = fileSignature;
    // What the signature binds (the file, its hash, the versionCode) or the signature itself changed.
    const signed = ['filePath', 'downloadType', 'sha256', 'versionCode', 'fileSignature'] as const;
    if (signed.some((field) => fields[field] !== undefined)) await this.requireSignature({ ...current, ...fields });
    await this.ctx.cache.commit(async (trx) => {
      // A new versionCode is checked under the package's lock, as creations are.
      const newCode = fields.versionCode !== current.versionCode ? fields.versionCode : undefined;
      if (body.isLatest === true || newCode !== undefined) {
        await repo.lockPackage(trx, this.ctx.engine, current.packageId);
      }
      if (newCode !== undefined) await repo.requireFreeVersionCode(trx, current.packageId, newCode, versionId);
      if (body.isLatest === false) fields.isLatest = 0;
      if (Object.keys(fields).length > 0) {
        await trx.updateTable('softwareVersions').set(fields).where('id', '=', versionId).execute();
      }
      if (body.isLatest === true) await repo.moveLatest(trx, current.packageId, versionId);
      const updated = { ...current, ...fields };
      if (fields.publishAt !== undefined && newlyPublished(current.publishAt, updated.publishAt)) {
        await recordEvent(
          trx,
          'version.published',
          await versionSubject(trx, updated),
          versionData(updated),
          updated.publishAt,
        );
      }
      if (body.rolloutPercent !== undefined && body.rolloutPercent !== current.rolloutPercent) {
        await recordEvent(trx, 'version.rollout_changed', await versionSubject(trx, updated), {
          ...versionData(updated),
          previousRolloutPercent: current.rolloutPercent,
        });
      }
    });
    return this.versionAnswer(versionId, lang);
  }

  /** With PUBLISHER_KEYS set: the version's stored file signed by a publisher for this package and versionCode. */
  private async requireSignature(version: VersionRow): Promise<void> {
    if (this.ctx.config.publisherKeys === null) return;
    const pkg = await repo.findPackage(this.db, version.packageId);
    if (!pkg) throw notFound(`software package not found: ${version.packageId}`);
    const comment = versionTrustedComment({
      slug: pkg.slug,
      versionCode: version.versionCode,
      sha256: version.sha256 ?? '',
    });
    await requirePublisherSignature(this.ctx, version, comment);
  }

  /** A version as admin answers show it, `isLatest` following the flag rules among offered versions. */
  private async versionAnswer(versionId: string, lang: Lang): Promise<Version> {
    const current = await this.version(versionId);
    const versions = await repo.versionsOf(this.db, [current.packageId]);
    const updated = versions.find((v) => v.id === versionId) ?? current;
    const version = toVersion(updated, lang, latestIdOf(versions, now()));
    const [answer = version] = await this.withDeltas([version]);
    return answer;
  }

  /** Withdraws a version (`revokedAt` set) or, with `revoked` false, offers it again. */
  async setRevoked(versionId: string, revoked: boolean, lang: Lang): Promise<Version> {
    await this.ctx.cache.commit(async (trx) => {
      const result = await trx
        .updateTable('softwareVersions')
        .set({ revokedAt: revoked ? nowIso() : null })
        .where('id', '=', versionId)
        .where('revokedAt', revoked ? 'is' : 'is not', null)
        .executeTakeFirst();
      const version = await repo.findVersion(trx, versionId);
      if (!version) throw notFound(`software version not found: ${versionId}`);
      if (revoked && result.numUpdatedRows > 0n) {
        await recordEvent(trx, 'version.revoked', await versionSubject(trx, version), versionData(version));
      }
    });
    return this.versionAnswer(versionId, lang);
  }

  async deleteVersion(versionId: string): Promise<void> {
    const current = await this.version(versionId);
    const deltaFiles = await this.ctx.cache.commit(async (trx) => {
      await repo.lockPackage(trx, this.ctx.engine, current.packageId);
      // Re-read under the lock: the flag may have moved (or the version gone) since.
      const locked = await repo.findVersion(trx, versionId);
      if (!locked) throw notFound(`software version not found: ${versionId}`);
      const keys = await deltaFileKeys(trx, { versionIds: [versionId] });
      await trx.deleteFrom('softwareVersions').where('id', '=', versionId).execute();
      if (locked.isLatest === 1) await repo.reflagLatest(trx, current.packageId);
      return keys;
    });
    await this.deleteFiles(deltaFiles);
  }
}
