import { BigramIndex } from './search.js';
import type { AddonRow, ReleaseRow, ScreenshotRow } from '../../db/schema.js';

/** One addon of the in-memory catalogue, with what its list element shows. */
export interface CatalogueEntry {
  readonly addon: AddonRow;
  /** The latest release of the channel (flagged, else the newest), or null. */
  readonly latest: ReleaseRow | null;
  readonly releaseCount: number;
  readonly screenshots: readonly ScreenshotRow[];
  /** Names and summaries in both languages, normalised for matching (see `searchTerms`). */
  readonly searchText: string;
  /** Both names, normalised (relevance ranking). */
  readonly names: readonly string[];
}

export interface CatalogueFilter {
  /** false: drafts too. */
  readonly publishedOnly: boolean;
  readonly category: string | undefined;
  readonly terms: readonly string[];
}

/** Case- and width-insensitive form used on both sides of a search (the same on every engine). */
export function normalizeForSearch(text: string): string {
  return text.normalize('NFKC').toLowerCase();
}

/** The terms of a `search` value: whitespace-separated, normalised; empty when there is nothing to match. */
export function searchTerms(search: string | undefined): string[] {
  if (search === undefined) return [];
  return normalizeForSearch(search)
    .split(/\s+/u)
    .filter((t) => t !== '');
}

export function searchTextOf(addon: Pick<AddonRow, 'nameZh' | 'nameEn' | 'summaryZh' | 'summaryEn'>): string {
  // Terms hold no whitespace, so a term cannot match across the newline between two fields.
  return normalizeForSearch([addon.nameZh, addon.nameEn, addon.summaryZh, addon.summaryEn].join('\n'));
}

/** Keeps at most this many filter results per catalogue (clients choose search terms freely). */
const MAX_REMEMBERED = 1_000;

/**
 * The addon catalogue of one content version, in list order (`updatedAt` descending), held in
 * memory and rebuilt after a content write. Filter results are remembered, so a repeated query
 * costs a map lookup; a new search asks a bigram index built on the first search (see
 * `BigramIndex`), never the database. Counters are not part of it (see the service).
 */
export class Catalogue {
  private readonly results = new Map<string, readonly CatalogueEntry[]>();
  private index: BigramIndex | null = null;

  constructor(
    readonly entries: readonly CatalogueEntry[],
    /** The counter version read before the rows: they hold every count up to it (see `Counters`). */
    readonly counterVersion: number,
  ) {}

  static keyOf(filter: CatalogueFilter): string {
    return JSON.stringify([filter.publishedOnly, filter.category ?? null, filter.terms]);
  }

  select(filter: CatalogueFilter): readonly CatalogueEntry[] {
    const key = Catalogue.keyOf(filter);
    let found = this.results.get(key);
    if (found === undefined) {
      const candidates =
        filter.terms.length === 0
          ? this.entries
          : (this.index ??= new BigramIndex(this.entries.map((e) => e.searchText)))
              .matching(filter.terms)
              .map((i) => this.entries[i] as CatalogueEntry);
      found = candidates.filter(
        (e) =>
          (!filter.publishedOnly || e.addon.published === 1) &&
          (filter.category === undefined || e.addon.category === filter.category),
      );
      if (this.results.size >= MAX_REMEMBERED) this.results.delete(this.results.keys().next().value as string);
      this.results.set(key, found);
    }
    return found;
  }
}

/**
 * One string per distinct value: each row read holds its own copy of every string, so values that
 * repeat across rows (an addon's id in its releases and screenshots, categories, versions of the
 * game) are made to share one, which saves tens of MB at 100,000 addons.
 */
function interner(): (value: string) => string {
  const seen = new Map<string, string>();
  return (value) => {
    const held = seen.get(value);
    if (held !== undefined) return held;
    seen.set(value, value);
    return value;
  };
}

/**
 * Builds the catalogue from rows (which it keeps, sharing their repeated strings); `latest` holds
 * one release per addon that has any.
 */
export function buildCatalogue(
  addons: readonly AddonRow[],
  latest: readonly ReleaseRow[],
  releaseCounts: ReadonlyMap<string, number>,
  screenshots: readonly ScreenshotRow[],
  counterVersion: number,
): Catalogue {
  const shared = interner();
  for (const addon of addons) {
    addon.id = shared(addon.id);
    addon.category = shared(addon.category);
  }
  for (const release of latest) {
    release.addonId = shared(release.addonId);
    release.downloadType = shared(release.downloadType) as ReleaseRow['downloadType'];
    release.gameVersion = shared(release.gameVersion);
    release.wowVersion = shared(release.wowVersion);
    release.dependencies = shared(release.dependencies);
  }
  for (const shot of screenshots) shot.addonId = shared(shot.addonId);
  const latestByAddon = new Map(latest.map((r) => [r.addonId, r]));
  const shotsByAddon = new Map<string, ScreenshotRow[]>();
  for (const shot of screenshots) {
    const list = shotsByAddon.get(shot.addonId);
    if (list) list.push(shot);
    else shotsByAddon.set(shot.addonId, [shot]);
  }
  return new Catalogue(
    addons.map((addon) => ({
      addon,
      latest: latestByAddon.get(addon.id) ?? null,
      releaseCount: releaseCounts.get(addon.id) ?? 0,
      screenshots: shotsByAddon.get(addon.id) ?? [],
      searchText: searchTextOf(addon),
      names: [normalizeForSearch(addon.nameZh), normalizeForSearch(addon.nameEn)],
    })),
    counterVersion,
  );
}
