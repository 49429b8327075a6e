/** Counters read from the database: addons' totals and releases' counts, by id. */
interface CounterMaps {
  readonly totals: ReadonlyMap<string, number>;
  readonly releases: ReadonlyMap<string, number>;
}

/** Rows counted since a counter version, as `countersAfter` reads them. */
export interface CountedRows {
  readonly totals: readonly { id: string; totalDownloads: number }[];
  readonly releases: readonly { id: string; downloadCount: number }[];
}

/** Changes kept apart from the folded ones up to this many; then they are folded in (one copy). */
const FOLD_AT = 4_096;

const NONE: CounterMaps = { totals: new Map(), releases: new Map() };

/**
 * Download counters as of one counter version, on top of a catalogue's rows: a catalogue is loaded
 * at a counter version (read before its rows), so its rows hold every count up to it, and the
 * counters need only the rows counted since. Those are kept in two layers: the recent changes
 * (copied on each refresh, so a snapshot never changes under a reader) and the older ones folded
 * together once the recent ones grow past `FOLD_AT`. A refresh then copies what changed lately,
 * not a map of the whole catalogue.
 */
export class Counters {
  private constructor(
    readonly version: number,
    private readonly folded: CounterMaps,
    private readonly recent: CounterMaps,
  ) {}

  /** The counters of a catalogue loaded at counter version `version`: its rows' own. */
  static of(version: number): Counters {
    return new Counters(version, NONE, NONE);
  }

  /** These counters with the rows counted up to `version` since these were read. */
  after(version: number, counted: CountedRows): Counters {
    const totals = new Map(this.recent.totals);
    const releases = new Map(this.recent.releases);
    for (const row of counted.totals) totals.set(row.id, row.totalDownloads);
    for (const row of counted.releases) releases.set(row.id, row.downloadCount);
    if (totals.size + releases.size < FOLD_AT) return new Counters(version, this.folded, { totals, releases });
    const fold = (older: ReadonlyMap<string, number>, newer: ReadonlyMap<string, number>) => {
      const merged = new Map(older);
      for (const [id, value] of newer) merged.set(id, value);
      return merged;
    };
    return new Counters(
      version,
      { totals: fold(this.folded.totals, totals), releases: fold(this.folded.releases, releases) },
      NONE,
    );
  }

  /** An addon's total download count, or `loaded` (its catalogue row's) when none was counted since. */
  total(addonId: string, loaded: number): number {
    return this.recent.totals.get(addonId) ?? this.folded.totals.get(addonId) ?? loaded;
  }

  /** A release's download count, or `loaded` when none was counted since. */
  releaseCount(releaseId: string, loaded: number): number {
    return this.recent.releases.get(releaseId) ?? this.folded.releases.get(releaseId) ?? loaded;
  }
}
