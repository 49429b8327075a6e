import type { AppContext } from '../../context.js';
import type { AddonRow } from '../../db/schema.js';
import { type Lang, localize } from '../../domain/lang.js';
import { nowIso } from '../../domain/clock.js';
import { notFound } from '../../http/errors.js';
import { dependenciesOf, effectiveLatest, type ReleaseDependency } from './mapper.js';
import * as repo from './repository.js';
import { CHANGELOG_LIMITS } from './schemas.js';

/** What an addon manager sends for one installed addon: its slug and version, or its file's hash. */
export type InstalledEntry = { slug: string; version: string } | { sha256: string };

type IndexedRelease = repo.ReleaseFileRow;

interface IndexedAddon {
  readonly addon: Pick<AddonRow, 'id' | 'slug' | 'nameZh' | 'nameEn'>;
  /** Published releases of the channel, newest first. */
  readonly releases: readonly IndexedRelease[];
  readonly latest: IndexedRelease | null;
}

/** Published addons and their published releases by slug and by file hash, per content version. */
interface ReleaseIndex {
  readonly bySlug: ReadonlyMap<string, IndexedAddon>;
  readonly byId: ReadonlyMap<string, IndexedAddon>;
  readonly byHash: ReadonlyMap<string, IndexedRelease>;
  /** The published releases of published addons, by id, with their addon. */
  readonly byRelease: ReadonlyMap<string, { release: IndexedRelease; addon: IndexedAddon['addon'] }>;
}

export interface ReleaseFile {
  id: string;
  version: string;
  downloadUrl: string;
  sha256: string | null;
  fileSize: number;
  createdAt: string;
  dependencies: ReleaseDependency[];
  fileSignature?: string;
}

export interface AddonRef {
  id: string;
  slug: string;
  name: string;
  nameZh: string;
  nameEn: string;
}

export interface UpdateResult {
  query: InstalledEntry;
  addon: AddonRef | null;
  installed: ReleaseFile | null;
  updateAvailable: boolean;
  latest: ReleaseFile | null;
  /** Only when asked (`changelogs: true`): the releases above the installed one, newest first. */
  changelogs?: ChangelogEntry[];
  /** Only when asked: how many releases above the installed one the answer's bounds left out. */
  changelogsOmitted?: number;
}

export interface ChangelogEntry {
  version: string;
  changelog: string;
  createdAt: string;
}

/** Releases whose changelogs are read per query (the read stops once the answer's bounds are met). */
const CHANGELOGS_PER_QUERY = 50;

/** An answered entry; with changelogs asked and an update, the releases above the installed one (newest first). */
interface Checked {
  result: UpdateResult;
  above: readonly IndexedRelease[];
}

/**
 * Addon managers' calls: which of an installed folder's addons have updates, and which release a
 * file is. Answered from an index of published addons and releases held in memory per content
 * version (loaded with one query per table), never one query per entry.
 */
export class AddonUpdates {
  constructor(private readonly ctx: AppContext) {}

  private index(): Promise<ReleaseIndex> {
    return this.ctx.cache.get('addons:release-index', async () => {
      const at = nowIso();
      const addons = await repo.publishedAddonRefs(this.ctx.db);
      const releases = await repo.publishedReleaseFiles(this.ctx.db, at);
      const byAddon = new Map<string, IndexedRelease[]>();
      const byHash = new Map<string, IndexedRelease>();
      for (const release of releases) {
        const list = byAddon.get(release.addonId);
        if (list) list.push(release);
        else byAddon.set(release.addonId, [release]);
        // The oldest release keeps a hash that several share (re-uploads of one file).
        if (release.sha256 !== null) byHash.set(release.sha256, release);
      }
      const bySlug = new Map<string, IndexedAddon>();
      const byId = new Map<string, IndexedAddon>();
      const byRelease = new Map<string, { release: IndexedRelease; addon: IndexedAddon['addon'] }>();
      for (const addon of addons) {
        const list = byAddon.get(addon.id) ?? [];
        const entry = { addon, releases: list, latest: effectiveLatest(list) ?? null };
        bySlug.set(addon.slug, entry);
        byId.set(addon.id, entry);
        for (const release of list) byRelease.set(release.id, { release, addon });
      }
      for (const [hash, release] of byHash) if (!byId.has(release.addonId)) byHash.delete(hash);
      return { bySlug, byId, byHash, byRelease };
    });
  }

  /**
   * Each installed entry, in order: its addon, installed and latest release, whether it has an update;
   * with `changelogs`, also the changelogs of the releases above the installed one (`withChangelogs`).
   */
  async check(
    installed: readonly InstalledEntry[],
    lang: Lang,
    base: string,
    changelogs = false,
  ): Promise<UpdateResult[]> {
    const index = await this.index();
    const checked = installed.map((query): Checked => {
      const hashed = 'sha256' in query ? index.byHash.get(query.sha256.toLowerCase()) : undefined;
      const entry = 'sha256' in query ? hashed && index.byId.get(hashed.addonId) : index.bySlug.get(query.slug);
      if (entry === undefined) {
        return { result: { query, addon: null, installed: null, updateAvailable: false, latest: null }, above: [] };
      }
      const mine = 'sha256' in query ? hashed : entry.releases.find((r) => r.version === query.version);
      const { latest } = entry;
      const updateAvailable =
        latest !== null &&
        (mine === undefined
          ? 'version' in query && latest.version !== query.version
          : mine.id !== latest.id && mine.createdAt <= latest.createdAt);
      const result = {
        query,
        addon: refOf(entry.addon, lang),
        installed: mine === undefined ? null : fileOf(mine, base),
        updateAvailable,
        latest: latest === null ? null : fileOf(latest, base),
      };
      const above = changelogs && updateAvailable && latest !== null ? releasesAbove(entry, latest, mine) : [];
      return { result, above };
    });
    return changelogs ? this.withChangelogs(checked, lang) : checked.map(({ result }) => result);
  }

  /**
   * The results with `changelogs` (the releases above the installed one, newest first) and
   * `changelogsOmitted`. Within `CHANGELOG_LIMITS`: at most `perAddon` releases of each addon, and
   * in the whole answer, in the order of the results, entries until one would pass `entries` or
   * `bytes`: from there on, none (each result carries a newest-first prefix of its releases).
   */
  private async withChangelogs(checked: readonly Checked[], lang: Lang): Promise<UpdateResult[]> {
    const carried: ChangelogEntry[][] = checked.map(() => []);
    const wanted = checked.flatMap(({ above }, at) =>
      above.slice(0, CHANGELOG_LIMITS.perAddon).map((release) => ({ at, release })),
    );
    let entries = 0;
    let bytes = 0;
    reading: for (let from = 0; from < wanted.length; from += CHANGELOGS_PER_QUERY) {
      const part = wanted.slice(from, from + CHANGELOGS_PER_QUERY);
      const texts = await repo.releaseChangelogs(
        this.ctx.db,
        part.map(({ release }) => release.id),
      );
      for (const { at, release } of part) {
        // A release deleted since the index was read ends the changelogs as the bounds do.
        const text = texts.get(release.id);
        if (text === undefined) break reading;
        const { changelog } = localize('changelog', text.changelogZh, text.changelogEn, lang);
        const entry = { version: release.version, changelog, createdAt: release.createdAt };
        bytes += Buffer.byteLength(JSON.stringify(entry));
        if (entries === CHANGELOG_LIMITS.entries || bytes > CHANGELOG_LIMITS.bytes) break reading;
        entries += 1;
        carried[at]!.push(entry);
      }
    }
    return checked.map(({ result, above }, at) => ({
      ...result,
      changelogs: carried[at]!,
      changelogsOmitted: above.length - carried[at]!.length,
    }));
  }

  /**
   * The folders of published releases (of published addons) with these fingerprints: by fingerprint in
   * the order asked (each once), then newest release first, then by folder.
   */
  async folderMatches(fingerprints: readonly string[]): Promise<FolderMatchAnswer[]> {
    const asked = [...new Set(fingerprints)];
    const index = await this.index();
    type Found = { folder: string; release: IndexedRelease; addon: IndexedAddon['addon'] };
    const found = new Map<string, Found[]>();
    for (const row of await this.ctx.fingerprints.matches(asked)) {
      const published = index.byRelease.get(row.releaseId);
      if (published === undefined) continue;
      const match = { folder: row.folder, ...published };
      const list = found.get(row.fingerprint);
      if (list) list.push(match);
      else found.set(row.fingerprint, [match]);
    }
    const releaseIds = [...new Set([...found.values()].flatMap((list) => list.map((m) => m.release.id)))];
    const folders = await this.ctx.fingerprints.foldersOf(releaseIds);
    return asked.flatMap((fingerprint) =>
      (found.get(fingerprint) ?? [])
        .sort((a, b) => newerFirst(a.release, b.release) || (a.folder < b.folder ? -1 : a.folder > b.folder ? 1 : 0))
        .map(({ folder, release, addon }) => ({
          fingerprint,
          folder,
          addon: { id: addon.id, slug: addon.slug },
          release: { id: release.id, version: release.version, folders: folders.get(release.id) ?? [] },
        })),
    );
  }

  /** The published release whose file has this hash, with its addon. */
  async byHash(sha256: string, lang: Lang, base: string): Promise<{ addon: AddonRef; release: ReleaseFile }> {
    const index = await this.index();
    const release = index.byHash.get(sha256.toLowerCase());
    const entry = release && index.byId.get(release.addonId);
    if (release === undefined || entry === undefined) throw notFound(`no published release has the file ${sha256}`);
    return { addon: refOf(entry.addon, lang), release: fileOf(release, base) };
  }
}

export interface FolderMatchAnswer {
  fingerprint: string;
  folder: string;
  addon: { id: string; slug: string };
  release: { id: string; version: string; folders: string[] };
}

/**
 * The releases of `entry` above the installed one up to `latest`, newest first: from `latest` down to
 * the installed release, without it. Only `latest` when the installed release is not in the catalogue
 * (where it stood is unknown), or when it sorts above `latest` (one creation time, a later id).
 */
function releasesAbove(
  entry: IndexedAddon,
  latest: IndexedRelease,
  mine: IndexedRelease | undefined,
): readonly IndexedRelease[] {
  const from = entry.releases.indexOf(latest);
  const to = mine === undefined ? -1 : entry.releases.indexOf(mine);
  return entry.releases.slice(from, Math.max(to, from + 1));
}

/** `a` before `b` when it is the newer release (the order of the index's lists). */
function newerFirst(a: IndexedRelease, b: IndexedRelease): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? 1 : -1;
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

function refOf(addon: IndexedAddon['addon'], lang: Lang): AddonRef {
  return { id: addon.id, slug: addon.slug, ...localize('name', addon.nameZh, addon.nameEn, lang) };
}

function fileOf(release: IndexedRelease, base: string): ReleaseFile {
  return {
    id: release.id,
    version: release.version,
    downloadUrl: `${base}/api/download/${encodeURIComponent(release.id)}`,
    sha256: release.sha256,
    fileSize: release.fileSize,
    createdAt: release.createdAt,
    dependencies: dependenciesOf(release),
    ...(release.fileSignature !== null ? { fileSignature: release.fileSignature } : {}),
  };
}
