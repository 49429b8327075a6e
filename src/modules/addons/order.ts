import type { CatalogueEntry } from './catalogue.js';

/* Sorted selections of the catalogue (`sort=downloads|name|created|relevance`), see the service. */

export type SortKey = string | number;

/** Entries in the order of their keys (then ids, ascending), with the key each was sorted by. */
export interface Sorted {
  readonly items: readonly CatalogueEntry[];
  readonly keys: readonly SortKey[];
}

/** Whether (key `ka`, id `ia`) comes before (`kb`, `ib`): by key, then by id ascending. */
function precedes(ka: SortKey, ia: string, kb: SortKey, ib: string, descending: boolean): boolean {
  if (ka !== kb) return descending ? ka > kb : ka < kb;
  return ia < ib;
}

/** `entries` sorted by `key` (then by id, ascending). */
export function sortedBy(
  entries: readonly CatalogueEntry[],
  key: (e: CatalogueEntry) => SortKey,
  descending: boolean,
): Sorted {
  const keyed = entries.map((e) => ({ e, k: key(e) }));
  keyed.sort((a, b) => (a.e === b.e ? 0 : precedes(a.k, a.e.addon.id, b.k, b.e.addon.id, descending) ? -1 : 1));
  return { items: keyed.map((x) => x.e), keys: keyed.map((x) => x.k) };
}

/**
 * `held` in the order of new keys: the entries whose key did not change keep their order, and only
 * the others (the addons downloaded since) are sorted and merged back in, so a new counter snapshot
 * costs a pass over the selection instead of a sort of it (tens of ms at 100,000 addons).
 */
export function resorted(held: Sorted, key: (e: CatalogueEntry) => SortKey, descending: boolean): Sorted {
  const kept: CatalogueEntry[] = [];
  const keptKeys: SortKey[] = [];
  const moved: CatalogueEntry[] = [];
  held.items.forEach((e, i) => {
    if (key(e) === held.keys[i]) {
      kept.push(e);
      keptKeys.push(held.keys[i] as SortKey);
    } else {
      moved.push(e);
    }
  });
  const changed = sortedBy(moved, key, descending);
  const items: CatalogueEntry[] = [];
  const keys: SortKey[] = [];
  let i = 0;
  let j = 0;
  while (i < kept.length || j < changed.items.length) {
    const a = kept[i];
    const b = changed.items[j];
    const fromKept =
      b === undefined ||
      (a !== undefined &&
        precedes(keptKeys[i] as SortKey, a.addon.id, changed.keys[j] as SortKey, b.addon.id, descending));
    items.push((fromKept ? a : b) as CatalogueEntry);
    keys.push((fromKept ? keptKeys[i++] : changed.keys[j++]) as SortKey);
  }
  return { items, keys };
}
