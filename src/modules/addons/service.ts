import type { Static } from 'typebox';
import type { AppContext } from '../../context.js';
import type { AddonRow, ReleaseRow, ReleaseUpdate, ScreenshotRow } from '../../db/schema.js';
import { CHANNEL } from '../../domain/channel.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import { type Lang, localize } from '../../domain/lang.js';
import { isPublished } from '../../domain/rollout.js';
import { bilingualColumns, bilingualWrite, requiredBilingual, requiredBilingualColumns } from '../../http/bilingual.js';
import { badRequest, conflict, notFound } from '../../http/errors.js';
import {
  type Cursors,
  DEFAULT_PAGE_SIZE,
  nextPageLink,
  type Ordered,
  pageOf,
  sharedCursors,
} from '../../http/paging.js';
import { etagOfParts, RenderedJson } from '../../http/rendered.js';
import { publishAtColumn } from '../../http/schemas.js';
import { checkSlug } from '../../http/slug.js';
import { downloadFields } from '../downloads/fields.js';
import { fileSignatureColumn, requirePublisherSignature } from '../downloads/file-signature.js';
import { releaseTrustedComment } from 'patchwell-client/minisign';
import type { DownloadTarget } from '../downloads/service.js';
import { type ElementRenderer, jsonArray, ListBlocks } from './blocks.js';
import { Counters } from './counters.js';
import { resorted, type Sorted, sortedBy } from './order.js';
import {
  buildCatalogue,
  Catalogue,
  type CatalogueEntry,
  type CatalogueFilter,
  normalizeForSearch,
} from './catalogue.js';
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
import { relevance } from './search.js';
import type {
  AddonCreateBody,
  AddonUpdateBody,
  ReleaseCreateBody,
  ReleaseUpdateBody,
  ScreenshotCreateBody,
  ScreenshotUpdateBody,
} from './schemas.js';

/** The counters of a catalogue and when they were read (ms, taken before the read began). */
interface Snapshot {
  readonly catalogue: Catalogue;
  readonly counters: Counters;
  readAt: number;
}

/**
 * Answers rendered from one catalogue (content version) and one counter snapshot, by request.
 * A content write or a newer snapshot starts a new generation.
 */
interface Generation {
  readonly catalogue: Catalogue;
  readonly counters: Counters;
  readonly rendered: Map<string, Promise<RenderedJson>>;
  /** Bytes held by each settled answer of `rendered`. */
  readonly sizes: Map<string, number>;
  renderedBytes: number;
}

const MAX_RENDERED = 2_000;
/**
 * Memory kept for rendered answers per generation (clients choose search terms freely); a large
 * answer's blocks (and their deflate segments) are counted by `ListBlocks`.
 */
const MAX_RENDERED_BYTES = 128 * 1024 * 1024;
const MAX_SORTED = 64;

/**
 * Reads use a counter snapshot while it is younger than this; an older one is refreshed in the
 * background (one read of the counter version, then the counters only if it moved), and served
 * meanwhile while younger than `COUNTERS_STALE_MS`. So counters show at most about 1.5 s late,
 * within the contract's 2 s, and the database sees at most one refresh a second per instance.
 */
const COUNTERS_FRESH_MS = 1_000;
const COUNTERS_STALE_MS = 1_500;

export type AddonSort = 'updated' | 'downloads' | 'name' | 'created' | 'relevance';

/** A list request's language and page (null: the whole list, as the spec has it). */
export interface PagedRequest {
  readonly lang: Lang;
  /** `limit`/`cursor` as given; null when neither is. */
  readonly page: { limit: number | undefined; cursor: string | undefined } | null;
  /** Base of the `Link` URL (see `baseUrl`) and the request's own URL (path and query). */
  readonly base: string;
  readonly url: string;
}

/** `GET /api/addons`: its filter and sort too. */
export interface ListRequest extends PagedRequest {
  readonly filter: CatalogueFilter;
  readonly sort: AddonSort;
}

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

/**
 * What is kept per catalogue across counter snapshots: whole lists' blocks, and sorted selections
 * (other than the catalogue's own order) by filter, sort and language, with the counters they
 * were sorted by (null: an order that does not depend on them).
 */
interface Derived {
  readonly catalogue: Catalogue;
  readonly lists: ListBlocks;
  readonly sorted: Map<string, Sorted & { readonly counters: Counters | null }>;
}

/** Answers at least this large are kept in parts and streamed (see `RenderedJson`). */
const LARGE_ANSWER_BYTES = 8 * 1024 * 1024;

/**
 * Memory kept for whole-list blocks per instance (see `ListBlocks`): the whole list of 100,000
 * addons in one language (about 190 MB) and the lists of many searches.
 */
const MAX_BLOCK_BYTES = 256 * 1024 * 1024;

export class AddonService {
  private generation: Generation | null = null;
  /** Counts this instance's committed catalogue writes, so a load begun before one is not reused. */
  private epoch = 0;
  private loading: { epoch: number; promise: Promise<Catalogue> } | null = null;
  private snapshot: Snapshot | null = null;
  private refreshing: { readonly catalogue: Catalogue; readonly promise: Promise<Counters> } | null = null;
  /** The shared cursor key, read (or created) once. */
  private readonly cursorCodec: () => Promise<Cursors>;
  /** What is derived from the current catalogue across counter snapshots (see `derived`). */
  private derivedState: Derived | null = null;

  constructor(private readonly ctx: AppContext) {
    this.cursorCodec = sharedCursors(ctx.db, 'catalogue-cursor');
  }

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
    // Read first: the rows read next hold every count up to it (see `Counters`).
    const counterVersion = await repo.counterVersion(this.db);
    const addons = await repo.listAddons(this.db);
    const at = nowIso();
    const flagged = await repo.flaggedLatestReleases(this.db, at);
    const counts = await repo.releaseCounts(this.db, at);
    const screenshots = await repo.allScreenshots(this.db);
    const flaggedAddons = new Set(flagged.map((r) => r.addonId));
    const unflagged = addons.filter((a) => (counts.get(a.id) ?? 0) > 0 && !flaggedAddons.has(a.id)).map((a) => a.id);
    const newest = unflagged.length > 0 ? await repo.newestReleases(this.db, unflagged, at) : [];
    return buildCatalogue(addons, [...flagged, ...newest], counts, screenshots, counterVersion);
  }

  /** The counters of `catalogue` to show now (see `COUNTERS_FRESH_MS`). */
  private counters(catalogue: Catalogue): Promise<Counters> {
    const held = this.snapshot?.catalogue === catalogue ? this.snapshot : null;
    const age = held === null ? Infinity : Date.now() - held.readAt;
    if (held !== null && age < COUNTERS_FRESH_MS) return Promise.resolve(held.counters);
    if (this.refreshing?.catalogue !== catalogue) {
      const refreshing = {
        catalogue,
        promise: this.refreshCounters(catalogue).finally(() => {
          if (this.refreshing === refreshing) this.refreshing = null;
        }),
      };
      this.refreshing = refreshing;
    }
    return held !== null && age < COUNTERS_STALE_MS ? Promise.resolve(held.counters) : this.refreshing.promise;
  }

  /**
   * Rereads the counter version and, when it moved, the rows counted since the version held (an
   * index on `counter_seq`), so a refresh costs in proportion to the downloads since the last one,
   * not to the catalogue. A new catalogue starts from the version it was loaded at.
   */
  private async refreshCounters(catalogue: Catalogue): Promise<Counters> {
    const readAt = Date.now();
    const version = await repo.counterVersion(this.db);
    const held =
      this.snapshot?.catalogue === catalogue ? this.snapshot.counters : Counters.of(catalogue.counterVersion);
    const counters =
      version === held.version ? held : held.after(version, await repo.countersAfter(this.db, held.version));
    // A slower refresh that read an older version must not replace a newer snapshot.
    const current = this.snapshot;
    if (current === null || current.catalogue !== catalogue || current.counters.version <= version) {
      this.snapshot = { catalogue, counters, readAt };
    }
    return counters;
  }

  /** The generation of the current catalogue and counters. */
  private async current(): Promise<Generation> {
    const catalogue = await this.catalogue();
    const counters = await this.counters(catalogue);
    const held = this.generation;
    if (held && held.catalogue === catalogue && held.counters === counters) return held;
    const fresh: Generation = {
      catalogue,
      counters,
      rendered: new Map(),
      sizes: new Map(),
      renderedBytes: 0,
    };
    // A slow request that read older counters must not replace a newer generation.
    if (!held || held.catalogue !== catalogue || held.counters.version <= counters.version) this.generation = fresh;
    return fresh;
  }

  /** A rendered answer of the generation, made once (concurrent requests share it) and kept within the memory budget. */
  private rendered(
    generation: Generation,
    key: string,
    render: () => RenderedJson | Promise<RenderedJson>,
  ): Promise<RenderedJson> {
    const kept = generation.rendered.get(key);
    if (kept !== undefined) return kept;
    const made = Promise.resolve().then(render);
    const { rendered, sizes } = generation;
    rendered.set(key, made);
    made.then(
      (answer) => {
        if (rendered.get(key) !== made) return;
        const size = answer.bytes;
        if (size > MAX_RENDERED_BYTES) {
          rendered.delete(key);
          return;
        }
        sizes.set(key, size);
        generation.renderedBytes += size;
        for (const oldest of rendered.keys()) {
          if (rendered.size <= MAX_RENDERED && generation.renderedBytes <= MAX_RENDERED_BYTES) break;
          if (oldest === key) continue;
          rendered.delete(oldest);
          generation.renderedBytes -= sizes.get(oldest) ?? 0;
          sizes.delete(oldest);
        }
      },
      () => rendered.delete(key),
    );
    return made;
  }

  /**
   * A rendered list from its parts: small ones in one buffer; large ones kept in parts (their
   * blocks, see `ListBlocks`), with their validator made now, over the parts (the signer digests
   * the parts it streams, see `Signer`).
   */
  private renderedOf(parts: Buffer[], headers: Record<string, string> = {}): RenderedJson {
    const length = parts.reduce((n, part) => n + part.length, 0);
    if (length < LARGE_ANSWER_BYTES) return RenderedJson.of(Buffer.concat(parts, length), headers);
    return new RenderedJson(parts, headers, { etag: etagOfParts(parts) });
  }

  /** The selection of a list request in its order. */
  private ordered(generation: Generation, request: ListRequest): Ordered<CatalogueEntry> {
    const { counters, catalogue } = generation;
    const total = (e: CatalogueEntry) => counters.total(e.addon.id, e.addon.totalDownloads);
    const name = (e: CatalogueEntry) => localize('name', e.addon.nameZh, e.addon.nameEn, request.lang).name;
    const keys: Record<AddonSort, { descending: boolean; key: (e: CatalogueEntry) => string | number }> = {
      updated: { descending: true, key: (e) => e.addon.updatedAt },
      created: { descending: true, key: (e) => e.addon.createdAt },
      downloads: { descending: true, key: total },
      name: { descending: false, key: (e) => normalizeForSearch(name(e)) },
      // Score first, then the contract's order (updatedAt descending, id ascending) among equals.
      relevance: {
        descending: true,
        key: (e) => `${String(relevance(e, request.filter.terms)).padStart(6, '0')}|${e.addon.updatedAt}`,
      },
    };
    const { descending, key } = keys[request.sort];
    const position = (e: CatalogueEntry) => ({ key: key(e), id: e.addon.id });
    const selected = catalogue.select(request.filter);
    // The catalogue is in `updated` order already; other orders are sorted once per catalogue, and
    // by downloads reordered once per counter snapshot (see `resorted`).
    const { sorted } = this.derived(catalogue);
    const sortKey = `${Catalogue.keyOf(request.filter)}|${request.sort}|${request.sort === 'name' ? request.lang : ''}`;
    const byCounters = request.sort === 'downloads' ? counters : null;
    let held = sorted.get(sortKey);
    if (held?.counters !== byCounters) {
      const order = held === undefined ? sortedBy(selected, key, descending) : resorted(held, key, descending);
      held = { ...order, counters: byCounters };
      sorted.delete(sortKey);
      if (sorted.size >= MAX_SORTED) sorted.delete(sorted.keys().next().value as string);
      sorted.set(sortKey, held);
    }
    return { items: held.items, descending, position };
  }

  /** What is derived from `catalogue` (a new catalogue starts anew). */
  private derived(catalogue: Catalogue): Derived {
    if (this.derivedState?.catalogue !== catalogue) {
      this.derivedState = { catalogue, lists: new ListBlocks(MAX_BLOCK_BYTES), sorted: new Map() };
    }
    return this.derivedState;
  }

  /**
   * List elements (the addon with its latest release and the snapshot's counters). The stamp is the
   * addon's total: every count an element shows moves it (a download of its latest release too).
   */
  private addonElements(generation: Generation, lang: Lang): ElementRenderer<CatalogueEntry> {
    const { counters } = generation;
    const total = (entry: CatalogueEntry) => counters.total(entry.addon.id, entry.addon.totalDownloads);
    const count = (entry: CatalogueEntry) =>
      entry.latest === null ? null : counters.releaseCount(entry.latest.id, entry.latest.downloadCount);
    return {
      identity: (entry) => entry,
      stamp: total,
      render: (entry) => {
        const latest = entry.latest === null ? null : { ...entry.latest, downloadCount: count(entry) ?? 0 };
        const element = toAddon(
          { ...entry.addon, totalDownloads: total(entry) },
          { releases: latest ? [latest] : [], latestId: latest?.id, releaseCount: entry.releaseCount },
          entry.screenshots,
          lang,
        );
        return JSON.stringify(element);
      },
    };
  }

  /**
   * `GET /api/addons`. The catalogue and each filter's result live in memory until the next
   * content write; each answer is rendered once per generation (content version and counter
   * snapshot). With `limit` or `cursor`, one page and its `Link`/`X-Total-Count` headers.
   */
  async list(request: ListRequest): Promise<RenderedJson> {
    const generation = await this.current();
    const scope = `addons|${Catalogue.keyOf(request.filter)}|${request.sort}|${request.sort === 'name' ? request.lang : ''}`;
    return this.answer(
      generation,
      scope,
      request,
      () => this.ordered(generation, request),
      this.addonElements(generation, request.lang),
    );
  }

  /** A list answer: whole (`page` null), or one page of it after the request's cursor. */
  private async answer<T>(
    generation: Generation,
    scope: string,
    request: PagedRequest,
    ordered: () => Ordered<T> | Promise<Ordered<T>>,
    elements: ElementRenderer<T>,
  ): Promise<RenderedJson> {
    const { page } = request;
    if (page === null) {
      const key = `${scope}|${request.lang}`;
      return this.rendered(generation, key, async () => {
        const { items } = await ordered();
        return this.renderedOf(this.derived(generation.catalogue).lists.parts(key, items, elements));
      });
    }
    const cursors = await this.cursorCodec();
    const asked = cursors.request(scope, page.cursor, page.limit, DEFAULT_PAGE_SIZE);
    const key = `${scope}|${request.lang}|${asked.limit}|${JSON.stringify(asked.after)}|${request.base}${request.url}`;
    return this.rendered(generation, key, async () => {
      const list = await ordered();
      const { items, next } = pageOf(list, asked);
      const headers: Record<string, string> = { 'X-Total-Count': String(list.items.length) };
      if (next !== null) {
        headers.Link = nextPageLink(request.base, request.url, cursors.encode(scope, next, asked.limit));
      }
      return this.renderedOf(
        jsonArray(items, (item) => Buffer.from(elements.render(item))),
        headers,
      );
    });
  }

  /** `GET /api/addons/{idOrSlug}`, rendered from the database once per generation. */
  async detailJson(idOrSlug: string, lang: Lang): Promise<RenderedJson> {
    const generation = await this.current();
    return this.rendered(generation, `detail|${idOrSlug}|${lang}`, async () =>
      RenderedJson.of(Buffer.from(JSON.stringify(await this.detail(idOrSlug, lang)))),
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
  /** `GET /api/releases`, read from the database once per generation (newest first), whole or by page. */
  async releaseList(addonId: string | undefined, request: PagedRequest): Promise<RenderedJson> {
    const generation = await this.current();
    const ordered = async (): Promise<Ordered<ReleaseListItem>> => ({
      items: await this.releases(addonId, request.lang),
      descending: true,
      idsDescending: true,
      position: (r) => ({ key: r.createdAt, id: r.id }),
    });
    return this.answer(generation, `releases|${addonId ?? ''}|${request.lang}`, request, ordered, {
      identity: (r) => r.id,
      stamp: (r) => r.downloadCount,
      render: (r) => JSON.stringify(r),
    });
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
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, row.addonId, this.ctx.engine))) {
        throw notFound(`addon not found: ${row.addonId}`);
      }
      await trx.insertInto('releases').values(row).execute();
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
    await this.write(async (trx) => {
      if (!(await repo.lockAddon(trx, current.addonId, this.ctx.engine))) throw notFound(`release not found: ${id}`);
      if (Object.keys(fields).length > 0) await trx.updateTable('releases').set(fields).where('id', '=', id).execute();
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
