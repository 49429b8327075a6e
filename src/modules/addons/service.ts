import type { Static } from 'typebox';
import type { AppContext } from '../../context.js';
import type { AddonRow, ReleaseRow, ReleaseUpdate, ScreenshotRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import type { Lang } from '../../domain/lang.js';
import { isPublished } from '../../domain/rollout.js';
import { bilingualColumns, bilingualWrite, requiredBilingual, requiredBilingualColumns } from '../../http/bilingual.js';
import { badRequest, conflict, notFound } from '../../http/errors.js';
import { publishAtColumn } from '../../http/schemas.js';
import { checkSlug } from '../../http/slug.js';
import { downloadFields } from '../downloads/fields.js';
import { fileSignatureColumn, requirePublisherSignature } from '../downloads/file-signature.js';
import { releaseTrustedComment } from 'patchwell-client/minisign';
import type { DownloadTarget } from '../downloads/service.js';
import type { CatalogueReader } from './catalogue-reader.js';
import {
  type Addon,
  effectiveLatest,
  type ReleaseDependency,
  type ReleaseListItem,
  type Screenshot,
  toAddon,
  toReleaseListItem,
  toScreenshot,
} from './mapper.js';
import * as repo from './repository.js';
import { type EventSubject, newlyPublished, recordEvent } from '../webhooks/events.js';
import type { Db } from '../../db/index.js';
import type {
  AddonCreateBody,
  AddonUpdateBody,
  ReleaseCreateBody,
  ReleaseUpdateBody,
  ScreenshotCreateBody,
  ScreenshotUpdateBody,
} from './schemas.js';

/** A release as webhook events name it: its addon's name and its version. */
async function releaseSubject(trx: Db, release: ReleaseRow): Promise<EventSubject> {
  const addon = await repo.findAddonById(trx, release.addonId);
  return {
    id: release.id,
    title: `${addon?.nameEn || addon?.nameZh || ''} ${release.version}`.trim(),
    text: release.changelogEn || release.changelogZh,
  };
}

/** What webhook events tell of a release. */
function releaseData(release: ReleaseRow): Record<string, unknown> {
  return {
    id: release.id,
    addonId: release.addonId,
    version: release.version,
    sha256: release.sha256,
    fileSize: release.fileSize,
    publishAt: release.publishAt,
  };
}

/** The addon writes, and the lookups of single releases they and the download route share. */
export class AddonService {
  constructor(
    private readonly ctx: AppContext,
    private readonly catalogue: CatalogueReader,
  ) {}

  private get db() {
    return this.ctx.db;
  }

  async release(id: string): Promise<ReleaseRow> {
    const row = await repo.findRelease(this.db, id);
    if (!row) throw notFound(`release not found: ${id}`);
    return row;
  }

  /** A release the public may download: 404 while it is scheduled. */
  async downloadableRelease(id: string): Promise<ReleaseRow> {
    const row = await this.release(id);
    if (!isPublished(row.publishAt, now())) throw notFound(`release not found: ${id}`);
    return row;
  }

  private async releaseItem(id: string, lang: Lang): Promise<ReleaseListItem> {
    const row = await this.release(id);
    const addon = (await repo.addonSummaries(this.db, [row.addonId])).get(row.addonId);
    if (!addon) throw notFound(`addon not found: ${row.addonId}`);
    const latestId = effectiveLatest(await repo.releasesOf(this.db, row.addonId, nowIso()))?.id;
    return toReleaseListItem(row, addon, lang, latestId);
  }

  /* ---------- downloads ---------- */

  async downloadTarget(release: ReleaseRow): Promise<DownloadTarget> {
    if (release.downloadType === 'url') {
      if (!release.externalUrl) throw notFound('release has no download link');
      return { type: 'url', url: release.externalUrl };
    }
    if (release.filePath === '') throw notFound('release has no file');
    const fallback = async () => {
      const addon = await repo.findAddonById(this.db, release.addonId);
      return `${addon?.slug ?? 'addon'}-${release.version}`;
    };
    return {
      type: 'local',
      filePath: release.filePath,
      fileName: await this.ctx.downloads.fileName(release.filePath, fallback),
      sha256: release.sha256,
    };
  }

  /** One counted download: the release's count, the addon's total and the counter version, at once. */
  async countDownload(release: ReleaseRow): Promise<void> {
    await this.ctx.downloads.countRelease(release.id, release.addonId);
  }

  /* ---------- writes ---------- */

  /** Runs a write and, once it committed, tells every instance's caches (and this one's catalogue). */
  private async write<T>(work: (trx: typeof this.db) => Promise<T>): Promise<T> {
    const result = await this.ctx.cache.commit(work);
    this.catalogue.invalidate();
    return result;
  }

  async createAddon(body: Static<typeof AddonCreateBody>, lang: Lang): Promise<Addon> {
    const slug = checkSlug(body.slug);
    const name = requiredBilingual(body, 'name');
    const summary = requiredBilingual(body, 'summary');
    const description = bilingualWrite(body, 'description');
    const now = nowIso();
    const row: AddonRow = {
      id: newId(),
      slug,
      nameZh: name.zh,
      nameEn: name.en,
      summaryZh: summary.zh,
      summaryEn: summary.en,
      descriptionZh: description.zh ?? '',
      descriptionEn: description.en ?? '',
      iconUrl: body.iconUrl === undefined || body.iconUrl === '' ? null : body.iconUrl,
      category: body.category ?? 'general',
      published: body.published === false ? 0 : 1,
      totalDownloads: 0,
      createdAt: now,
      updatedAt: now,
      counterSeq: 0,
    };
    await this.write(async (trx) => {
      if (await repo.findAddonBySlug(trx, slug)) throw conflict(`slug already exists: ${slug}`);
      await trx.insertInto('addons').values(row).execute();
      await recordEvent(
        trx,
        'addon.created',
        { id: row.id, title: row.nameEn || row.nameZh, text: row.summaryEn || row.summaryZh },
        {
          id: row.id,
          slug: row.slug,
          nameZh: row.nameZh,
          nameEn: row.nameEn,
          category: row.category,
          published: row.published === 1,
        },
      );
    });
    return toAddon(row, { releases: [], latestId: undefined, releaseCount: 0 }, [], lang);
  }

  async updateAddon(id: string, body: Static<typeof AddonUpdateBody>, lang: Lang): Promise<Addon> {
    const nameColumns = requiredBilingualColumns(body, 'name');
    const summaryColumns = requiredBilingualColumns(body, 'summary');
    const slug = body.slug === undefined ? undefined : checkSlug(body.slug);
    await this.write(async (trx) => {
      if (!(await repo.findAddonById(trx, id))) throw notFound(`addon not found: ${id}`);
      if (slug !== undefined) {
        const other = await repo.findAddonBySlug(trx, slug);
        if (other && other.id !== id) throw conflict(`slug already exists: ${slug}`);
      }
      await trx
        .updateTable('addons')
        .set({
          ...(slug !== undefined ? { slug } : {}),
          ...nameColumns,
          ...summaryColumns,
          ...bilingualColumns(body, 'description'),
          ...(body.iconUrl !== undefined ? { iconUrl: body.iconUrl === '' ? null : body.iconUrl } : {}),
          ...(body.category !== undefined ? { category: body.category } : {}),
          ...(body.published !== undefined ? { published: body.published ? 1 : 0 } : {}),
          updatedAt: nowIso(),
        })
        .where('id', '=', id)
        .execute();
    });
    return this.catalogue.detail(id, lang);
  }

  /** Deletes an addon with its releases and screenshots (files in the store are kept). */
  async deleteAddon(id: string): Promise<void> {
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, id, this.ctx.engine))) throw notFound(`addon not found: ${id}`);
      await trx.deleteFrom('screenshots').where('addonId', '=', id).execute();
      await trx.deleteFrom('releases').where('addonId', '=', id).execute();
      await trx.deleteFrom('addons').where('id', '=', id).execute();
    });
  }

  async createRelease(body: Static<typeof ReleaseCreateBody>, lang: Lang): Promise<ReleaseListItem> {
    const changelog = bilingualWrite(body, 'changelog');
    if (!(await repo.findAddonById(this.db, body.addonId))) throw notFound(`addon not found: ${body.addonId}`);
    const files = await downloadFields(this.ctx.files, body, null);
    const dependencies = await this.dependenciesColumn(body.addonId, body.dependencies);
    const row: ReleaseRow = {
      id: newId(),
      addonId: body.addonId,
      version: body.version,
      changelogZh: changelog.zh ?? '',
      changelogEn: changelog.en ?? '',
      downloadType: body.downloadType ?? 'local',
      filePath: files.filePath ?? '',
      externalUrl: files.externalUrl ?? null,
      fileSize: files.fileSize ?? 0,
      sha256: files.sha256 ?? null,
      gameVersion: body.gameVersion ?? '',
      downloadCount: 0,
      isLatest: 0,
      wowVersion: CHANNEL,
      createdAt: nowIso(),
      publishAt: publishAtColumn(body.publishAt),
      dependencies: dependencies ?? '[]',
      counterSeq: 0,
      fileSignature: fileSignatureColumn(body.fileSignature) ?? null,
    };
    await this.requireSignature(row);
    const folders = await this.ctx.fingerprints.read(row);
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, row.addonId, this.ctx.engine))) {
        throw notFound(`addon not found: ${row.addonId}`);
      }
      await trx.insertInto('releases').values(row).execute();
      if (folders !== null) await this.ctx.fingerprints.record(trx, row.id, row.filePath, folders);
      await repo.moveLatest(trx, row.addonId, row.id);
      await trx.updateTable('addons').set({ updatedAt: nowIso() }).where('id', '=', row.addonId).execute();
      await recordEvent(trx, 'release.published', await releaseSubject(trx, row), releaseData(row), row.publishAt);
    });
    return this.releaseItem(row.id, lang);
  }

  /**
   * A release's dependencies as stored (JSON text), or undefined when none were given: each names
   * an existing addon other than the release's own, once (400 naming the field otherwise).
   */
  private async dependenciesColumn(
    addonId: string,
    given: Static<typeof ReleaseCreateBody>['dependencies'],
  ): Promise<string | undefined> {
    if (given === undefined) return undefined;
    const slugs = given.map((d) => d.slug);
    const duplicate = slugs.find((slug, i) => slugs.indexOf(slug) !== i);
    if (duplicate !== undefined) throw badRequest(`body.dependencies names ${duplicate} twice`);
    const known = await repo.addonIdsBySlug(this.db, slugs);
    const unknown = slugs.find((slug) => !known.has(slug));
    if (unknown !== undefined) throw badRequest(`body.dependencies: no addon has the slug ${unknown}`);
    if (slugs.some((slug) => known.get(slug) === addonId))
      throw badRequest('body.dependencies: a release cannot need its own addon');
    const stored: ReleaseDependency[] = given.map((d) => ({
      slug: d.slug,
      minVersion: d.minVersion ?? null,
      optional: d.optional ?? false,
    }));
    return JSON.stringify(stored);
  }

  async updateRelease(id: string, body: Static<typeof ReleaseUpdateBody>, lang: Lang): Promise<ReleaseListItem> {
    const current = await this.release(id);
    const fields: ReleaseUpdate = {
      ...(await downloadFields(this.ctx.files, body, current)),
      ...(body.version !== undefined ? { version: body.version } : {}),
      ...bilingualColumns(body, 'changelog'),
      ...(body.gameVersion !== undefined ? { gameVersion: body.gameVersion } : {}),
      ...(body.isLatest === false ? { isLatest: 0 } : {}),
      ...(body.publishAt !== undefined ? { publishAt: publishAtColumn(body.publishAt) } : {}),
    };
    const dependencies = await this.dependenciesColumn(current.addonId, body.dependencies);
    if (dependencies !== undefined) fields.dependencies = dependencies;
    const fileSignature = fileSignatureColumn(body.fileSignature);
    if (fileSignature !== undefined) fields.fileSignature = fileSignature;
    // What the signature binds (the file, its hash, the version) or the signature itself changed.
    const signed = ['filePath', 'downloadType', 'sha256', 'version', 'fileSignature'] as const;
    if (signed.some((field) => fields[field] !== undefined)) await this.requireSignature({ ...current, ...fields });
    // A new file, or a link instead of it: its folders are read again (or the job reads them).
    const refolder = fields.filePath !== undefined || fields.downloadType !== undefined;
    const folders = refolder ? await this.ctx.fingerprints.read({ ...current, ...fields }) : null;
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, current.addonId, this.ctx.engine))) throw notFound(`release not found: ${id}`);
      if (Object.keys(fields).length > 0) await trx.updateTable('releases').set(fields).where('id', '=', id).execute();
      if (refolder) await this.ctx.fingerprints.forget(trx, id);
      if (folders !== null) await this.ctx.fingerprints.record(trx, id, fields.filePath ?? current.filePath, folders);
      if (body.isLatest === true) await repo.moveLatest(trx, current.addonId, id);
      const updated = { ...current, ...fields };
      if (fields.publishAt !== undefined && newlyPublished(current.publishAt, updated.publishAt)) {
        await recordEvent(
          trx,
          'release.published',
          await releaseSubject(trx, updated),
          releaseData(updated),
          updated.publishAt,
        );
      }
    });
    return this.releaseItem(id, lang);
  }

  /** With PUBLISHER_KEYS set: the release's stored file signed by a publisher for this addon and version. */
  private async requireSignature(release: ReleaseRow): Promise<void> {
    if (this.ctx.config.publisherKeys === null) return;
    const addon = await repo.findAddonById(this.db, release.addonId);
    if (!addon) throw notFound(`addon not found: ${release.addonId}`);
    const comment = releaseTrustedComment({ slug: addon.slug, version: release.version, sha256: release.sha256 ?? '' });
    await requirePublisherSignature(this.ctx, release, comment);
  }

  async deleteRelease(id: string): Promise<void> {
    await this.write(async (trx) => {
      const current = await repo.findRelease(trx, id);
      if (!current || !(await repo.lockAddon(trx, current.addonId, this.ctx.engine))) {
        throw notFound(`release not found: ${id}`);
      }
      // Re-read under the lock: the flag or the count may have moved since.
      const locked = await repo.findRelease(trx, id);
      if (!locked) throw notFound(`release not found: ${id}`);
      await trx.deleteFrom('releases').where('id', '=', id).execute();
      // `totalDownloads` is the sum of the addon's releases' counts.
      if (locked.downloadCount > 0) {
        await trx
          .updateTable('addons')
          .set((eb) => ({ totalDownloads: eb('totalDownloads', '-', locked.downloadCount) }))
          .where('id', '=', locked.addonId)
          .execute();
      }
      if (locked.isLatest === 1) await repo.reflagLatest(trx, locked.addonId);
    });
  }

  async createScreenshot(addonId: string, body: Static<typeof ScreenshotCreateBody>): Promise<Screenshot> {
    const row: ScreenshotRow = {
      id: newId(),
      addonId,
      imageUrl: body.imageUrl,
      sortOrder: body.sortOrder ?? 0,
      createdAt: nowIso(),
    };
    await this.write(async (trx) => {
      if (!(await repo.findAddonById(trx, addonId))) throw notFound(`addon not found: ${addonId}`);
      await trx.insertInto('screenshots').values(row).execute();
    });
    return toScreenshot(row);
  }

  async updateScreenshot(id: string, body: Static<typeof ScreenshotUpdateBody>): Promise<Screenshot> {
    const updated = await this.write(async (trx) => {
      if (!(await repo.findScreenshot(trx, id))) throw notFound(`screenshot not found: ${id}`);
      const fields = {
        ...(body.imageUrl !== undefined ? { imageUrl: body.imageUrl } : {}),
        ...(body.sortOrder !== undefined ? { sortOrder: body.sortOrder } : {}),
      };
      if (Object.keys(fields).length > 0)
        await trx.updateTable('screenshots').set(fields).where('id', '=', id).execute();
      return repo.findScreenshot(trx, id);
    });
    if (!updated) throw notFound(`screenshot not found: ${id}`);
    return toScreenshot(updated);
  }

  async deleteScreenshot(id: string): Promise<void> {
    await this.write(async (trx) => {
      const result = await trx.deleteFrom('screenshots').where('id', '=', id).executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound(`screenshot not found: ${id}`);
    });
  }
}
