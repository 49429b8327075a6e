/**
 * The catalogue's read model: the catalogue of the current content version, counter snapshots,
 * the answers rendered from them (one generation per catalogue and snapshot), what is derived
 * across snapshots, and the list cursors. The writes (`AddonService`) call `invalidate()` once
 * they committed.
 */
import type { AppContext } from '../../context.js';
import { nowIso } from '../../domain/clock.js';
import { type Lang, localize } from '../../domain/lang.js';
import { isPublished } from '../../domain/rollout.js';
import { notFound } from '../../http/errors.js';
import {
  type Cursors,
  DEFAULT_PAGE_SIZE,
  nextPageLink,
  type Ordered,
  pageOf,
  sharedCursors,
} from '../../http/paging.js';
import { etagOfParts, RenderedJson } from '../../http/rendered.js';
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
import { type Addon, effectiveLatest, type ReleaseListItem, toAddon, toReleaseListItem } from './mapper.js';
import * as repo from './repository.js';
import { relevance } from './search.js';

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

export class CatalogueReader {
  private generation: Generation | null = null;
  /** The catalogue load in flight, joined by concurrent reads until a write invalidates it. */
  private loading: { promise: Promise<Catalogue> } | null = null;
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

  /**
   * After a committed catalogue write on this instance: a load begun before it is not joined (the
   * cache's `commit()` has already dropped the catalogue it held, on every instance).
   */
  invalidate(): void {
    this.loading = null;
  }

  /** The catalogue of the current content version, loaded once per content write (on any instance). */
  private catalogue(): Promise<Catalogue> {
    return this.ctx.cache.get('addons:catalogue', () => {
      // One load at a time, not one per waiting request; a load begun before a write here is not joined.
      if (this.loading === null) {
        const loading = { promise: this.loadCatalogue() };
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
}
