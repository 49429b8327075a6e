import type { Static } from 'typebox';
import type { AppContext } from '../../context.js';
import type { AddonRow, ReleaseRow, ReleaseUpdate, ScreenshotRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import type { Lang } from '../../domain/lang.js';
import { isPublished } from '../../domain/rollout.js';
import { bilingualColumns, bilingualWrite, requiredBilingual, requiredBilingualColumns } from '../../http/bilingual.js';
import { conflict, notFound } from '../../http/errors.js';
import { publishAtColumn } from '../../http/schemas.js';
import { checkSlug } from '../../http/slug.js';
import { downloadFields } from '../downloads/fields.js';
import type { DownloadTarget } from '../downloads/service.js';
import { buildCatalogue, Catalogue, type CatalogueEntry, type CatalogueFilter } from './catalogue.js';
import {
  type Addon,
  effectiveLatest,
  type ReleaseListItem,
  type Screenshot,
  toAddon,
  toReleaseListItem,
  toScreenshot,
} from './mapper.js';
import * as repo from './repository.js';
import type {
  AddonCreateBody,
  AddonUpdateBody,
  ReleaseCreateBody,
  ReleaseUpdateBody,
  ScreenshotCreateBody,
  ScreenshotUpdateBody,
} from './schemas.js';

/** Download counters as read at (or after) one counter version. */
interface Counters {
  readonly totals: ReadonlyMap<string, number>;
  readonly releases: ReadonlyMap<string, number>;
}

/**
 * What this instance holds for one content version (the catalogue) and one counter version: the
 * counters, read lazily, and the answers already rendered from them. A content write or a counted
 * download starts a new generation, so nothing here is ever staler than the database's versions.
 */
interface Generation {
  readonly catalogue: Catalogue;
  readonly version: number;
  counters: Promise<Counters> | null;
  /** Rendered JSON (UTF-8) of list and detail answers, by request. */
  readonly rendered: Map<string, Buffer>;
  renderedBytes: number;
}

const MAX_RENDERED = 2_000;
/** Memory kept for rendered answers per instance (clients choose search terms freely). */
const MAX_RENDERED_BYTES = 256 * 1024 * 1024;

/** Up to this many addons in an answer, its counters are read by id rather than all at once. */
const TARGETED_COUNTERS_MAX = 500;

/** One list element's JSON around its counters: head + total + middle (+ latest release count + tail). */
interface Fragment {
  readonly head: string;
  readonly middle: string;
  readonly tail: string | null;
}

/** Stand-in counters, never real values (counters are never negative). */
const TOTAL_MARK = -7_919_000_000_001;
const COUNT_MARK = -7_919_000_000_002;
const TOTAL_KEY_MARK = `"totalDownloads":${TOTAL_MARK}`;
const COUNT_KEY_MARK = `"downloadCount":${COUNT_MARK}`;

export class AddonService {
  private generation: Generation | null = null;
  /** Counts this instance's committed catalogue writes, so a load begun before one is not reused. */
  private epoch = 0;
  private loading: { epoch: number; promise: Promise<Catalogue> } | null = null;
  /** List fragments per catalogue and language; dropped with the catalogue. */
  private readonly fragments = new WeakMap<Catalogue, Map<Lang, Map<CatalogueEntry, Fragment>>>();

  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /* ---------- reads ---------- */

  /** The catalogue of the current content version, loaded once per content write (on any instance). */
  private catalogue(): Promise<Catalogue> {
    return this.ctx.cache.get('addons:catalogue', () => {
      // One load at a time, not one per waiting request; a load begun before a write here is not joined.
      if (this.loading?.epoch !== this.epoch) {
        const loading = { epoch: this.epoch, promise: this.loadCatalogue() };
        this.loading = loading;
        void loading.promise.then(
          () => this.loading === loading && (this.loading = null),
          () => this.loading === loading && (this.loading = null),
        );
      }
      return this.loading.promise;
    });
  }

  private async loadCatalogue(): Promise<Catalogue> {
    const addons = await repo.listAddons(this.db);
    const at = nowIso();
    const flagged = await repo.flaggedLatestReleases(this.db, at);
    const counts = await repo.releaseCounts(this.db, at);
    const screenshots = await repo.allScreenshots(this.db);
    const flaggedAddons = new Set(flagged.map((r) => r.addonId));
    const unflagged = addons.filter((a) => (counts.get(a.id) ?? 0) > 0 && !flaggedAddons.has(a.id)).map((a) => a.id);
    const newest = unflagged.length > 0 ? await repo.newestReleases(this.db, unflagged, at) : [];
    return buildCatalogue(addons, [...flagged, ...newest], counts, screenshots);
  }

  /**
   * The current generation: the cached catalogue plus one primary-key read of the counter version
   * per request, so that a download counted on any instance shows on the next read.
   */
  private async current(): Promise<Generation> {
    const catalogue = await this.catalogue();
    const version = await repo.counterVersion(this.db);
    const held = this.generation;
    if (held && held.catalogue === catalogue && held.version === version) return held;
    const fresh: Generation = { catalogue, version, counters: null, rendered: new Map(), renderedBytes: 0 };
    // A slow request that read an older counter version must not replace a newer generation.
    if (!held || held.catalogue !== catalogue || held.version < version) this.generation = fresh;
    return fresh;
  }

  /** The counters of a generation: two narrow queries, once per generation that renders a list. */
  private counters(generation: Generation): Promise<Counters> {
    generation.counters ??= (async () => {
      const totals = await repo.addonTotals(this.db, null);
      const releases = await repo.releaseDownloadCounts(this.db, null);
      const unflagged = generation.catalogue.entries
        .map((e) => e.latest)
        .filter((r): r is ReleaseRow => r !== null && !releases.has(r.id))
        .map((r) => r.id);
      if (unflagged.length > 0) {
        for (const [id, count] of await repo.releaseDownloadCounts(this.db, unflagged)) releases.set(id, count);
      }
      return { totals, releases };
    })();
    return generation.counters;
  }

  /**
   * Counters for `entries`: the generation's full set when it is loaded or the answer is large, else
   * two primary-key reads of just these addons and releases, so a search after a download costs
   * in proportion to its result, not to the catalogue.
   */
  private async countersFor(generation: Generation, entries: readonly CatalogueEntry[]): Promise<Counters> {
    if (generation.counters !== null || entries.length > TARGETED_COUNTERS_MAX) return this.counters(generation);
    if (entries.length === 0) return { totals: new Map(), releases: new Map() };
    const latest = entries.flatMap((e) => (e.latest ? [e.latest.id] : []));
    return {
      totals: await repo.addonTotals(
        this.db,
        entries.map((e) => e.addon.id),
      ),
      releases: latest.length > 0 ? await repo.releaseDownloadCounts(this.db, latest) : new Map(),
    };
  }

  /** A rendered answer of the generation, computed once and kept within the memory budget. */
  private async rendered(generation: Generation, key: string, render: () => Promise<string>): Promise<Buffer> {
    const kept = generation.rendered.get(key);
    if (kept !== undefined) return kept;
    const body = Buffer.from(await render());
    if (body.length > MAX_RENDERED_BYTES / 4) return body;
    const { rendered } = generation;
    while (
      rendered.size > 0 &&
      (rendered.size >= MAX_RENDERED || generation.renderedBytes + body.length > MAX_RENDERED_BYTES)
    ) {
      const oldest = rendered.keys().next().value as string;
      generation.renderedBytes -= rendered.get(oldest)?.length ?? 0;
      rendered.delete(oldest);
    }
    rendered.set(key, body);
    generation.renderedBytes += body.length;
    return body;
  }

  /**
   * The list JSON of one entry, split around its two counters, so that a new counter generation
   * re-assembles the list by concatenation instead of mapping and serialising every addon again.
   * Kept per catalogue (content version) and language.
   */
  private fragment(catalogue: Catalogue, entry: CatalogueEntry, lang: Lang): Fragment {
    let byLang = this.fragments.get(catalogue);
    if (!byLang) {
      byLang = new Map();
      this.fragments.set(catalogue, byLang);
    }
    let byEntry = byLang.get(lang);
    if (!byEntry) {
      byEntry = new Map();
      byLang.set(lang, byEntry);
    }
    let found = byEntry.get(entry);
    if (!found) {
      const latest = entry.latest ? { ...entry.latest, downloadCount: COUNT_MARK } : null;
      const json = JSON.stringify(
        toAddon(
          { ...entry.addon, totalDownloads: TOTAL_MARK },
          { releases: latest ? [latest] : [], latestId: latest?.id, releaseCount: entry.releaseCount },
          entry.screenshots,
          lang,
        ),
      );
      // The marks are found with their keys: inside a JSON string the quotes would be escaped.
      const [head = '', rest = ''] = json.split(TOTAL_KEY_MARK);
      const [middle = '', tail] = rest.split(COUNT_KEY_MARK);
      found = { head, middle, tail: tail ?? null };
      byEntry.set(entry, found);
    }
    return found;
  }

  /**
   * `GET /api/addons` as JSON. The catalogue and each filter's result live in memory until the
   * next content write; the answer is assembled once per filter, language and counter version.
   */
  async listJson(filter: CatalogueFilter, lang: Lang): Promise<Buffer> {
    const generation = await this.current();
    const { catalogue } = generation;
    return this.rendered(generation, `list|${Catalogue.keyOf(filter)}|${lang}`, async () => {
      const selected = catalogue.select(filter);
      const counters = await this.countersFor(generation, selected);
      const items = selected.map((entry) => {
        const f = this.fragment(catalogue, entry, lang);
        const total = counters.totals.get(entry.addon.id) ?? entry.addon.totalDownloads;
        const head = `${f.head}"totalDownloads":${total}${f.middle}`;
        if (f.tail === null || entry.latest === null) return head;
        const count = counters.releases.get(entry.latest.id) ?? entry.latest.downloadCount;
        return `${head}"downloadCount":${count}${f.tail}`;
      });
      return `[${items.join(',')}]`;
    });
  }

  /** `GET /api/addons/{idOrSlug}` as JSON, rendered from the database once per generation. */
  async detailJson(idOrSlug: string, lang: Lang): Promise<Buffer> {
    const generation = await this.current();
    return this.rendered(generation, `detail|${idOrSlug}|${lang}`, async () =>
      JSON.stringify(await this.detail(idOrSlug, lang)),
    );
  }

  /** One addon with its releases: the published ones, or for administrators every one (scheduled too). */
  async detail(idOrSlug: string, lang: Lang, audience: 'public' | 'admin' = 'public'): Promise<Addon> {
    const row = await repo.findAddon(this.db, idOrSlug);
    if (!row) throw notFound(`addon not found: ${idOrSlug}`);
    const at = nowIso();
    const releases = await repo.releasesOf(this.db, row.id, audience === 'admin' ? null : at);
    const screenshots = await repo.screenshotsOf(this.db, row.id);
    const latestId = effectiveLatest(releases.filter((r) => isPublished(r.publishAt, Date.parse(at))))?.id;
    return toAddon(row, { releases, latestId, releaseCount: releases.length }, screenshots, lang);
  }

  /** `GET /api/releases` as JSON, rendered from the database once per generation. */
  async releasesJson(addonId: string | undefined, lang: Lang): Promise<Buffer> {
    const generation = await this.current();
    return this.rendered(generation, `releases|${addonId ?? ''}|${lang}`, async () =>
      JSON.stringify(await this.releases(addonId, lang)),
    );
  }

  async releases(addonId: string | undefined, lang: Lang): Promise<ReleaseListItem[]> {
    const rows = await repo.releasesOf(this.db, addonId, nowIso());
    const addons = await repo.addonSummaries(
      this.db,
      rows.map((r) => r.addonId),
    );
    // Rows are newest first, so the first seen per addon is its newest.
    const latest = new Map<string, string>();
    for (const row of rows) {
      if (row.isLatest === 1) latest.set(row.addonId, row.id);
    }
    for (const row of rows) {
      if (!latest.has(row.addonId)) latest.set(row.addonId, row.id);
    }
    return rows.flatMap((row) => {
      const addon = addons.get(row.addonId);
      return addon ? [toReleaseListItem(row, addon, lang, latest.get(row.addonId))] : [];
    });
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
    const addon = await repo.findAddonById(this.db, release.addonId);
    const fallback = `${addon?.slug ?? 'addon'}-${release.version}`;
    return {
      type: 'local',
      filePath: release.filePath,
      fileName: await this.ctx.downloads.fileName(release.filePath, fallback),
      sha256: release.sha256,
    };
  }

  /** One counted download: the release's count and the addon's total, then the counter version. */
  async countDownload(release: ReleaseRow): Promise<void> {
    await this.ctx.downloads.countRelease(release.id, release.addonId);
    await repo.bumpCounterVersion(this.db);
  }

  /* ---------- writes ---------- */

  /** Runs a write and, once it committed, tells every instance's caches (and this one's catalogue). */
  private async write<T>(work: (trx: typeof this.db) => Promise<T>): Promise<T> {
    const result = await this.ctx.cache.commit(work);
    this.epoch += 1;
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
    };
    await this.write(async (trx) => {
      if (await repo.findAddonBySlug(trx, slug)) throw conflict(`slug already exists: ${slug}`);
      await trx.insertInto('addons').values(row).execute();
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
    return this.detail(id, lang);
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
    };
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, row.addonId, this.ctx.engine))) {
        throw notFound(`addon not found: ${row.addonId}`);
      }
      await trx.insertInto('releases').values(row).execute();
      await repo.moveLatest(trx, row.addonId, row.id);
      await trx.updateTable('addons').set({ updatedAt: nowIso() }).where('id', '=', row.addonId).execute();
    });
    return this.releaseItem(row.id, lang);
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
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, current.addonId, this.ctx.engine))) throw notFound(`release not found: ${id}`);
      if (Object.keys(fields).length > 0) await trx.updateTable('releases').set(fields).where('id', '=', id).execute();
      if (body.isLatest === true) await repo.moveLatest(trx, current.addonId, id);
    });
    return this.releaseItem(id, lang);
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
