import type { AppContext } from '../../context.js';
import type { AddonRow } from '../../db/schema.js';
import { type Lang, localize } from '../../domain/lang.js';
import { nowIso } from '../../domain/clock.js';
import { notFound } from '../../http/errors.js';
import { dependenciesOf, effectiveLatest, type ReleaseDependency } from './mapper.js';
import * as repo from './repository.js';

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
      for (const addon of addons) {
        const list = byAddon.get(addon.id) ?? [];
        const entry = { addon, releases: list, latest: effectiveLatest(list) ?? null };
        bySlug.set(addon.slug, entry);
        byId.set(addon.id, entry);
      }
      for (const [hash, release] of byHash) if (!byId.has(release.addonId)) byHash.delete(hash);
      return { bySlug, byId, byHash };
    });
  }

  async check(installed: readonly InstalledEntry[], lang: Lang, base: string): Promise<UpdateResult[]> {
    const index = await this.index();
    return installed.map((query) => {
      const hashed = 'sha256' in query ? index.byHash.get(query.sha256.toLowerCase()) : undefined;
      const entry = 'sha256' in query ? hashed && index.byId.get(hashed.addonId) : index.bySlug.get(query.slug);
      if (entry === undefined) return { query, addon: null, installed: null, updateAvailable: false, latest: null };
      const mine = 'sha256' in query ? hashed : entry.releases.find((r) => r.version === query.version);
      const { latest } = entry;
      const updateAvailable =
        latest !== null &&
        (mine === undefined
          ? 'version' in query && latest.version !== query.version
          : mine.id !== latest.id && mine.createdAt <= latest.createdAt);
      return {
        query,
        addon: refOf(entry.addon, lang),
        installed: mine === undefined ? null : fileOf(mine, base),
        updateAvailable,
        latest: latest === null ? null : fileOf(latest, base),
      };
    });
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
