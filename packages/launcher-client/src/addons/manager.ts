/**
 * `AddonManager`: installs, updates and removes addons in `GAME/Interface/AddOns`, from answers and
 * files the `UpdateManager` verified, keeping a manifest per installed addon in its state folder.
 *
 * Every change is a swap, never an edit in place: the release is extracted into a work folder beside
 * `Interface/AddOns` (same file system), checked, then the old folders are renamed aside, the new ones
 * renamed in, the manifest written, and the old folders deleted. The swap is recorded in the state
 * folder (`addons-operation.json`) before it starts; a failure renames everything back, and a process
 * killed midway is rolled back (or, once the swap completed, finished) at the next operation's start.
 * Nothing else in the game folder is touched: not `WTF`, not a folder of `Interface/AddOns` that no
 * manifest names, except one an install replaces (kept aside, restorable, until the install completes).
 *
 * On a player's real machine (`disk/guard.ts`): every change holds the state folder's lock (`BusyError`
 * while another operation runs; `list` and `outdated` then answer from the manifests without
 * recovering anything); `Interface`, `Interface/AddOns`, the work folder and every folder moved in or
 * aside are checked before the first write and the first rename (a link or a mount point there is
 * `UnsafePathError`), and every rename and delete goes through the guard; the renames are flushed to
 * disk before the manifest and the record say the swap is done. Before the first rename every folder
 * to be moved aside is checked replaceable (`FolderGuard.replaceable`): one the game holds (it, or a
 * file in it) stops the change with `InUseError` naming it, the installed addon untouched. A swap
 * that cannot be finished or undone now (a folder still held) leaves `list` answering (the swap
 * named by `underWay`); a work folder that cannot be removed is a warning, removed next time.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { AddonPins, parseAddonSpec } from './pins.js';
import { chooseAdoptions, type FoundFolder, fingerprintFolder } from './scan.js';
import { type ArchiveLimits, badSegment, DEFAULT_ARCHIVE_LIMITS, extractArchive, foldName } from '../disk/archive.js';
import { type AutomaticReason, DEFAULT_KEEP, recoverRestore, snapshotBeforeChange } from '../backups/snapshots.js';
import { FolderGuard, sharingViolation, whenUnlocked, withLock } from '../disk/guard.js';
import type { AddonAnswer, AddonReleaseFile, InstalledAddon, UpdateManager } from '../update/manager.js';
import type { Progress } from '../net/download.js';
import {
  AbortedError,
  ArchiveError,
  ConflictError,
  LauncherClientError,
  NotFoundError,
  StateError,
  IntegrityError,
  InUseError,
  UsageError,
} from '../errors.js';
import { removeDurably } from '../disk/state.js';

/** A dependency as releases list it. */
export type AddonDependency = AddonAnswer['releases'][number]['dependencies'][number];

/** What the state folder keeps of an installed addon (`addons/<slug>.json`). */
export interface AddonManifest {
  readonly slug: string;
  readonly version: string;
  readonly releaseId: string;
  readonly sha256: string;
  /** Its folders in `Interface/AddOns`. */
  readonly folders: readonly string[];
  /** Its files, relative to `Interface/AddOns`, `/`-separated. */
  readonly files: readonly string[];
  readonly dependencies: readonly AddonDependency[];
  readonly installedAt: string;
}

/** A release to install: what downloading needs, and what it depends on. */
export type AddonRelease = AddonReleaseFile & { readonly dependencies: readonly AddonDependency[] };

export type AddonProgress =
  | ({ readonly phase: 'download'; readonly slug: string } & Progress)
  | { readonly phase: 'extract'; readonly slug: string }
  | { readonly phase: 'swap'; readonly slug: string; readonly folder: string };

export interface AddonManagerOptions {
  /** Answers, downloads and the state folder are this manager's (one verifier, one downloader). */
  readonly updates: UpdateManager;
  /** The game folder: addons live in `<gameDir>/Interface/AddOns`. */
  readonly gameDir: string;
  /** Bounds of an archive (default 20 000 entries, 2 GiB unpacked). */
  readonly limits?: Partial<ArchiveLimits>;
}

export interface AddonOperationOptions {
  readonly onProgress?: (progress: AddonProgress) => void;
  readonly signal?: AbortSignal;
  /** Automatic settings snapshots kept after the one taken before a change (default 20). */
  readonly keep?: number;
}

/** An installed addon as `list` answers it: its manifest, with `pinned: true` when it is pinned. */
export type ListedAddon = AddonManifest & { readonly pinned?: true };

/** An installed addon with newer releases, and their changelogs, newest first. */
export interface OutdatedAddon {
  readonly slug: string;
  readonly from: string;
  readonly to: string;
  readonly changelogs: { version: string; changelog: string; createdAt: string }[];
}

/** What `scan` found: the addons adopted, and the folders no release of the catalogue explains. */
export interface ScanReport {
  readonly adopted: InstalledSummary[];
  readonly unknown: string[];
}

export interface InstalledSummary {
  readonly slug: string;
  readonly version: string;
  readonly folders: readonly string[];
}

export interface UpdateReport {
  readonly updated: { slug: string; from: string; to: string }[];
  readonly upToDate: string[];
  /** Pinned addons, left as they are (only when there is one: without pins, the report is as before). */
  readonly pinned?: string[];
  readonly failed: { slug: string; kind: string; error: string }[];
}

/** A swap under way, as the state folder records it. */
interface SwapRecord {
  readonly slug: string;
  /** The work folder (`new/` staged folders, `old/` folders moved aside). */
  readonly work: string;
  /** `staging`: extracting; `swapping`: renaming; `done`: only the work folder is left to delete. */
  readonly phase: 'staging' | 'swapping' | 'done';
  /** Folders of `Interface/AddOns` moved to `work/old`, all before any of `moveIn`. */
  readonly moveAside: readonly string[];
  /** Folders of `work/new` moved into `Interface/AddOns`. */
  readonly moveIn: readonly string[];
  readonly before: AddonManifest | null;
  readonly after: AddonManifest | null;
}

const RECORD = 'addons-operation.json';
const MANIFESTS = 'addons';
const SLUG = /^[a-z0-9][a-z0-9._-]{0,63}$/;
/** The catalogue's most installed entries per `POST /api/addons/updates`. */
const UPDATES_PER_REQUEST = 500;
/** The most fingerprints per `POST /api/addons/fingerprints`. */
const FINGERPRINTS_PER_REQUEST = 5000;
const versions = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

/** Negative, zero or positive as version `a` is below, equal to or above `b` (`1.10` above `1.9`). */
export function compareVersions(a: string, b: string): number {
  return versions.compare(a, b);
}

/** Whether two folder names are one on a case-insensitive file system. */
const sameName = (a: string, b: string) => foldName(a) === foldName(b);

async function exists(file: string): Promise<boolean> {
  try {
    await fs.promises.lstat(file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

function failureOf(slug: string, err: unknown): UpdateReport['failed'][number] {
  const kind = err instanceof LauncherClientError ? err.kind : 'internal';
  return { slug, kind, error: err instanceof Error ? err.message : String(err) };
}

export class AddonManager {
  private readonly updates: UpdateManager;
  readonly addonsDir: string;
  private readonly workRoot: string;
  private readonly limits: ArchiveLimits;
  private readonly pins: AddonPins;
  private readonly gameDir: string;

  constructor(options: AddonManagerOptions) {
    this.updates = options.updates;
    const game = path.resolve(options.gameDir);
    this.gameDir = game;
    this.addonsDir = path.join(game, 'Interface', 'AddOns');
    this.pins = new AddonPins(options.updates.state);
    // Beside Interface/AddOns, so that every swap is a rename on one file system.
    this.workRoot = path.join(game, 'Interface', '.patchwell-work');
    this.limits = { ...DEFAULT_ARCHIVE_LIMITS, ...options.limits };
  }

  private get stateDir(): string {
    return this.updates.state.dir;
  }

  /** The installed addons, by slug, each with whether it is pinned. */
  async list(): Promise<ListedAddon[]> {
    await whenUnlocked(this.stateDir, 'addons-list', () => this.recover()).catch((err: unknown) => {
      // A swap a held folder keeps half done is named by `underWay`; the manifests still answer.
      if (!(err instanceof InUseError)) throw err;
    });
    const pins = await this.pins.read();
    return [...(await this.manifests()).values()].map((m) => (pins.has(m.slug) ? { ...m, pinned: true } : m));
  }

  /** The addon change a run left half done (finished or undone by the next change), or null. */
  async underWay(): Promise<{ slug: string; phase: SwapRecord['phase'] } | null> {
    const record = await this.updates.state.readJson<SwapRecord | null>(RECORD, null);
    return record && { slug: record.slug, phase: record.phase };
  }

  /**
   * Installs each addon's latest release, or with `SLUG@VERSION` that release of the signed detail
   * (and pins the addon at it; `SLUG` alone unpins), its required dependencies first (each at least
   * its `minVersion`; one already installed at such a version is kept). Before the first change,
   * `WTF` is snapshotted (`snapshotBeforeChange`). Answers what was installed or found installed,
   * dependencies included, in the order installed.
   */
  async install(specs: readonly string[], options: AddonOperationOptions = {}): Promise<InstalledSummary[]> {
    const parsed = specs.map(parseAddonSpec);
    for (const { slug } of parsed) AddonManager.checkSlug(slug);
    return withLock(this.stateDir, 'addons-install', () => this.installLocked(parsed, options));
  }

  private async installLocked(
    parsed: readonly { slug: string; version: string | null }[],
    options: AddonOperationOptions,
  ): Promise<InstalledSummary[]> {
    await this.recover();
    const installed = await this.manifests();
    const roots = [];
    for (const { slug, version } of parsed) {
      roots.push(version === null ? { slug } : { slug, release: await this.releaseOf(slug, version) });
    }
    const plan = await this.plan(roots, installed);
    if (plan.some(({ slug, release }) => installed.get(slug)?.releaseId !== release.id)) {
      await this.snapshot('addons-install', options);
    }
    const done: InstalledSummary[] = [];
    for (const { slug, release } of plan) {
      const before = installed.get(slug) ?? null;
      const manifest =
        before?.releaseId === release.id
          ? before
          : await this.installRelease(slug, release, before, installed, options);
      installed.set(slug, manifest);
      done.push({ slug, version: manifest.version, folders: manifest.folders });
    }
    for (const { slug, version } of parsed) await this.pins.set(slug, version);
    return done;
  }

  /** Pins an installed addon at its installed version: `update` leaves it alone. */
  async pin(slug: string): Promise<InstalledSummary> {
    return withLock(this.stateDir, 'addons-pin', async () => {
      const manifest = await this.installedManifest(slug);
      await this.pins.set(slug, manifest.version);
      return { slug, version: manifest.version, folders: manifest.folders };
    });
  }

  /** Lets an installed addon follow the newest release again. */
  async unpin(slug: string): Promise<void> {
    await withLock(this.stateDir, 'addons-unpin', async () => {
      await this.installedManifest(slug);
      await this.pins.set(slug, null);
    });
  }

  /**
   * The named installed addons (all when none are named) that have a newer release, each with the
   * changelog of every release above the installed one up to the newest, newest first: one
   * `POST /api/addons/updates` asking for the changelogs too (per 500 addons). Only for an addon whose
   * answer carries none (a service older than that question) or not all (the answer's bounds left
   * some out) are they read from its signed detail (`GET /api/addons/{slug}`).
   */
  async outdated(slugs?: readonly string[]): Promise<OutdatedAddon[]> {
    for (const slug of slugs ?? []) AddonManager.checkSlug(slug);
    await whenUnlocked(this.stateDir, 'addons-outdated', () => this.recover());
    const installed = await this.manifests();
    const targets = slugs === undefined ? [...installed.values()] : [];
    for (const slug of slugs ?? []) targets.push(await this.installedManifest(slug, installed));
    const outdated: OutdatedAddon[] = [];
    for (let at = 0; at < targets.length; at += UPDATES_PER_REQUEST) {
      const batch = targets.slice(at, at + UPDATES_PER_REQUEST);
      const { results } = await this.updates.checkAddons(
        batch.map((m) => ({ slug: m.slug, version: m.version })),
        undefined,
        { changelogs: true },
      );
      for (const manifest of batch) {
        const result = results.find((r) => 'slug' in r.query && r.query.slug === manifest.slug);
        const latest = result?.latest ?? null;
        if (result?.updateAvailable !== true || latest === null || latest.id === manifest.releaseId) continue;
        const { changelogs, changelogsOmitted } = result;
        outdated.push({
          slug: manifest.slug,
          from: manifest.version,
          to: latest.version,
          changelogs:
            Array.isArray(changelogs) && changelogsOmitted === 0
              ? changelogs
              : await this.detailChangelogs(manifest, latest.version),
        });
      }
    }
    return outdated;
  }

  /** The changelogs of the releases above `manifest`'s version up to `to`, newest first, from the signed detail. */
  private async detailChangelogs(manifest: AddonManifest, to: string): Promise<OutdatedAddon['changelogs']> {
    const addon = await this.updates.addon(manifest.slug);
    return (addon?.releases ?? [])
      .filter((r) => compareVersions(r.version, manifest.version) > 0 && compareVersions(r.version, to) <= 0)
      .sort((a, b) => compareVersions(b.version, a.version))
      .map((r) => ({ version: r.version, changelog: r.changelog, createdAt: r.createdAt }));
  }

  /**
   * Adopts addons unpacked by hand: fingerprints every folder of `Interface/AddOns` that no manifest
   * names, asks the catalogue (`POST /api/addons/fingerprints`, 5,000 per request) which releases'
   * folders they are, and writes a manifest for each addon whose folders found all match one release
   * of it (see `scan.ts`). Nothing is downloaded, nothing in the game folder changes.
   */
  async scan(signal?: AbortSignal): Promise<ScanReport> {
    return withLock(this.stateDir, 'addons-scan', () => this.scanLocked(signal));
  }

  private async scanLocked(signal: AbortSignal | undefined): Promise<ScanReport> {
    await this.recover();
    const installed = await this.manifests();
    const claimed = [...installed.values()].flatMap((m) => m.folders);
    const found: FoundFolder[] = [];
    for (const name of (await this.presentFolders()).sort()) {
      if (badSegment(name) !== null || claimed.some((f) => sameName(f, name))) continue;
      const dir = path.join(this.addonsDir, name);
      if ((await fs.promises.lstat(dir)).isDirectory()) found.push(await fingerprintFolder(dir));
    }
    const matches = [];
    for (let at = 0; at < found.length; at += FINGERPRINTS_PER_REQUEST) {
      const asked = found.slice(at, at + FINGERPRINTS_PER_REQUEST);
      const answer = await this.updates.matchFolders(
        asked.map((f) => f.fingerprint),
        signal,
      );
      if (!Array.isArray(answer.matches)) throw new IntegrityError('the fingerprint answer has no matches');
      matches.push(...answer.matches);
    }
    const { adoptions, unknown } = chooseAdoptions(found, matches);
    const adopted: InstalledSummary[] = [];
    for (const adoption of adoptions) {
      const release = SLUG.test(adoption.slug)
        ? (await this.updates.addon(adoption.slug))?.releases.find((r) => r.id === adoption.releaseId)
        : undefined;
      if (release === undefined || installed.has(adoption.slug)) {
        unknown.push(...adoption.folders);
        continue;
      }
      await this.writeManifest({
        slug: adoption.slug,
        version: release.version,
        releaseId: release.id,
        sha256: (release.sha256 ?? '').toLowerCase(),
        folders: adoption.folders,
        files: adoption.folders.flatMap((folder) =>
          found.find((f) => f.folder === folder)!.files.map((file) => `${folder}/${file}`),
        ),
        dependencies: release.dependencies,
        installedAt: new Date().toISOString(),
      });
      adopted.push({ slug: adoption.slug, version: release.version, folders: adoption.folders });
    }
    return { adopted, unknown: unknown.sort() };
  }

  /**
   * Asks the catalogue once (`POST /api/addons/updates`) about the named installed addons (all when
   * none are named) and replaces each that has a newer release; one failing is reported in `failed`
   * and left as it was, the others are still updated.
   */
  async update(slugs?: readonly string[], options: AddonOperationOptions = {}): Promise<UpdateReport> {
    for (const slug of slugs ?? []) AddonManager.checkSlug(slug);
    return withLock(this.stateDir, 'addons-update', () => this.updateLocked(slugs, options));
  }

  private async updateLocked(
    slugs: readonly string[] | undefined,
    options: AddonOperationOptions,
  ): Promise<UpdateReport> {
    await this.recover();
    const installed = await this.manifests();
    const pins = await this.pins.read();
    const report: UpdateReport = { updated: [], upToDate: [], failed: [] };
    const pinned: string[] = [];
    const targets: AddonManifest[] = [];
    for (const slug of slugs ?? [...installed.keys()]) {
      const manifest = installed.get(slug);
      if (manifest === undefined) report.failed.push(failureOf(slug, new NotFoundError(`${slug} is not installed`)));
      else if (pins.has(slug)) pinned.push(slug);
      else targets.push(manifest);
    }
    let snapshotted = false;
    for (let at = 0; at < targets.length; at += UPDATES_PER_REQUEST) {
      const batch = targets.slice(at, at + UPDATES_PER_REQUEST);
      const query: InstalledAddon[] = batch.map((m) => ({ slug: m.slug, version: m.version }));
      const { results } = await this.updates.checkAddons(query);
      for (const manifest of batch) {
        // Matched by its query, not by position.
        const result = results.find((r) => 'slug' in r.query && r.query.slug === manifest.slug);
        const latest = result?.latest ?? null;
        if (result?.updateAvailable !== true || latest === null || latest.id === manifest.releaseId) {
          report.upToDate.push(manifest.slug);
          continue;
        }
        try {
          const plan = await this.plan([{ slug: manifest.slug, release: latest }], installed);
          if (!snapshotted) await this.snapshot('addons-update', options);
          snapshotted = true;
          for (const step of plan) {
            const before = installed.get(step.slug) ?? null;
            if (before?.releaseId === step.release.id) continue;
            installed.set(step.slug, await this.installRelease(step.slug, step.release, before, installed, options));
          }
          report.updated.push({ slug: manifest.slug, from: manifest.version, to: latest.version });
        } catch (err) {
          if (err instanceof AbortedError) throw err;
          report.failed.push(failureOf(manifest.slug, err));
        }
      }
    }
    const { updated, upToDate, failed } = report;
    return pinned.length === 0 ? report : { updated, upToDate, pinned, failed };
  }

  /**
   * Deletes exactly the folders each addon's manifest lists, and its manifest. Refused
   * (`ConflictError`) when another installed addon needs one of them, unless `force`.
   */
  async remove(slugs: readonly string[], options: AddonOperationOptions & { force?: boolean } = {}): Promise<string[]> {
    for (const slug of slugs) AddonManager.checkSlug(slug);
    return withLock(this.stateDir, 'addons-remove', () => this.removeLocked(slugs, options));
  }

  private async removeLocked(slugs: readonly string[], options: AddonOperationOptions & { force?: boolean }) {
    await this.recover();
    const installed = await this.manifests();
    const removing = new Set(slugs);
    for (const slug of removing) {
      if (!installed.has(slug)) throw new NotFoundError(`${slug} is not installed`);
      const needing = [...installed.values()].filter(
        (m) => !removing.has(m.slug) && m.dependencies.some((d) => d.slug === slug && !d.optional),
      );
      if (needing.length > 0 && options.force !== true) {
        throw new ConflictError(`${needing.map((m) => m.slug).join(', ')} needs ${slug} (remove it with --force)`);
      }
    }
    await this.snapshot('addons-remove', options);
    const removed: string[] = [];
    for (const slug of removing) {
      const before = installed.get(slug)!;
      const present = [];
      for (const folder of before.folders) if (await exists(path.join(this.addonsDir, folder))) present.push(folder);
      const work = await this.begin(slug, before);
      await this.swap({ slug, work, phase: 'swapping', moveAside: present, moveIn: [], before, after: null }, options);
      await this.pins.set(slug, null);
      removed.push(slug);
    }
    return removed;
  }

  /** Snapshots `WTF` before a change (only when it changed since the last snapshot). */
  private async snapshot(reason: AutomaticReason, options: AddonOperationOptions): Promise<void> {
    await snapshotBeforeChange(this.updates.state, this.gameDir, reason, options.keep ?? DEFAULT_KEEP);
  }

  /** The manifest of an installed addon (`NotFoundError` when it is not installed). */
  private async installedManifest(slug: string, known?: ReadonlyMap<string, AddonManifest>): Promise<AddonManifest> {
    AddonManager.checkSlug(slug);
    if (known === undefined) await this.recover();
    const manifest = (known ?? (await this.manifests())).get(slug);
    if (manifest === undefined) throw new NotFoundError(`${slug} is not installed`);
    return manifest;
  }

  /** Release `version` of `slug` from its verified detail (`NotFoundError` when the catalogue lacks it). */
  private async releaseOf(slug: string, version: string): Promise<AddonRelease> {
    const addon = await this.updates.addon(slug);
    if (addon === null) throw new NotFoundError(`the catalogue has no addon ${slug}`);
    const release = addon.releases.find((r) => r.version === version);
    if (release === undefined) throw new NotFoundError(`the catalogue has no version ${version} of ${slug}`);
    return release;
  }

  private static checkSlug(slug: string): void {
    if (!SLUG.test(slug)) throw new UsageError(`${JSON.stringify(slug)} is not an addon slug`);
  }

  /**
   * The releases to install for `roots` (each with its release when known, else the catalogue's
   * latest), required dependencies before their dependents; a dependency installed at its
   * `minVersion` or above is left out. A cycle, or a dependency the catalogue lacks, is an error naming it.
   */
  private async plan(
    roots: readonly { slug: string; release?: AddonRelease }[],
    installed: ReadonlyMap<string, AddonManifest>,
  ): Promise<{ slug: string; release: AddonRelease }[]> {
    const plan: { slug: string; release: AddonRelease }[] = [];
    const visit = async (slug: string, chain: readonly string[], known?: AddonRelease): Promise<void> => {
      if (chain.includes(slug)) throw new ConflictError(`dependency cycle: ${[...chain, slug].join(' → ')}`);
      const neededBy = chain.at(-1);
      const planned = plan.find((p) => p.slug === slug);
      const release = planned?.release ?? known ?? (await this.latestRelease(slug, neededBy));
      if (planned !== undefined) return;
      for (const dep of release.dependencies) {
        if (dep.optional) continue;
        AddonManager.checkSlug(dep.slug);
        const have = installed.get(dep.slug);
        if (have !== undefined && (dep.minVersion === null || compareVersions(have.version, dep.minVersion) >= 0)) {
          continue;
        }
        await visit(dep.slug, [...chain, slug]);
        const chosen = plan.find((p) => p.slug === dep.slug)!.release;
        if (dep.minVersion !== null && compareVersions(chosen.version, dep.minVersion) < 0) {
          throw new NotFoundError(
            `${slug} needs ${dep.slug} ${dep.minVersion} or later; the catalogue's latest is ${chosen.version}`,
          );
        }
      }
      plan.push({ slug, release });
    };
    for (const root of roots) await visit(root.slug, [], root.release);
    return plan;
  }

  /** The latest release of `slug` from a verified `GET /api/addons/{slug}`. */
  private async latestRelease(slug: string, neededBy: string | undefined): Promise<AddonRelease> {
    const addon = await this.updates.addon(slug);
    const needed = neededBy === undefined ? '' : `${neededBy} needs ${slug}: `;
    if (addon === null) throw new NotFoundError(`${needed}the catalogue has no addon ${slug}`);
    const release = addon.releases.find((r) => r.isLatest) ?? addon.releases[0];
    if (release === undefined) throw new NotFoundError(`${needed}${slug} has no release`);
    return release;
  }

  /** Downloads, checks, extracts and swaps in one release; answers its manifest. */
  private async installRelease(
    slug: string,
    release: AddonRelease,
    before: AddonManifest | null,
    installed: ReadonlyMap<string, AddonManifest>,
    options: AddonOperationOptions,
  ): Promise<AddonManifest> {
    const { onProgress, signal } = options;
    const zip = await this.updates.downloadRelease(slug, release, {
      ...(signal === undefined ? {} : { signal }),
      ...(onProgress === undefined
        ? {}
        : { onProgress: (p: Progress) => onProgress({ phase: 'download', slug, ...p }) }),
    });
    const work = await this.begin(slug, before);
    let after: AddonManifest;
    let moveAside: string[];
    try {
      // Held in this install's own work folder: a prune of the downloads (after a confirmed launcher
      // install, perhaps in another process) cannot take the archive away mid-install.
      const held = path.join(work, 'archive.zip');
      await fs.promises.link(zip, held).catch(() => fs.promises.copyFile(zip, held));
      onProgress?.({ phase: 'extract', slug });
      const staged = path.join(work, 'new');
      const archive = await extractArchive(held, staged, this.limits, signal);
      await AddonManager.checkStaged(staged, archive.files, archive.bytes);
      for (const folder of archive.folders) {
        const owner = [...installed.values()].find(
          (m) => m.slug !== slug && m.folders.some((f) => sameName(f, folder)),
        );
        if (owner !== undefined) {
          throw new ConflictError(`${slug} and ${owner.slug} both claim the folder Interface/AddOns/${folder}`);
        }
      }
      const present = await this.presentFolders();
      moveAside = present.filter(
        (name) =>
          (before?.folders ?? []).some((f) => sameName(f, name)) || archive.folders.some((f) => sameName(f, name)),
      );
      after = {
        slug,
        version: release.version,
        releaseId: release.id,
        sha256: (release.sha256 ?? '').toLowerCase(),
        folders: archive.folders,
        files: archive.files,
        dependencies: release.dependencies,
        installedAt: new Date().toISOString(),
      };
    } catch (err) {
      await this.rollback({ slug, work, phase: 'staging', moveAside: [], moveIn: [], before, after: null });
      // A refused archive (by its content, or for a folder another addon has) is deleted from the
      // downloads; a cut-off extraction, or a failure of this machine, keeps it for the next try.
      if (err instanceof ArchiveError || err instanceof ConflictError) {
        await fs.promises.rm(path.dirname(zip), { recursive: true, force: true });
      }
      throw err;
    }
    await this.swap({ slug, work, phase: 'swapping', moveAside, moveIn: after.folders, before, after }, options);
    // Installed: the archive is not needed again (the manifest lists what it held).
    await fs.promises.rm(path.dirname(zip), { recursive: true, force: true });
    return after;
  }

  /** Every staged file is there, a regular file, and they add up to the archive's size. */
  private static async checkStaged(staged: string, files: readonly string[], bytes: number): Promise<void> {
    let total = 0;
    for (const file of files) {
      const stat = await fs.promises.lstat(path.join(staged, ...file.split('/')));
      if (!stat.isFile()) throw new ArchiveError(`${file} was not extracted as a file`);
      total += stat.size;
    }
    if (total !== bytes) throw new ArchiveError(`the archive extracted to ${total} bytes, it declares ${bytes}`);
  }

  /** The folders now in `Interface/AddOns` (none when there is no such folder yet). */
  private async presentFolders(): Promise<string[]> {
    try {
      return await fs.promises.readdir(this.addonsDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  /**
   * Records a swap of `slug` as begun (so a kill from here on is undone) and makes its work folder;
   * first, `Interface`, `Interface/AddOns` and the work folder are checked (no link, no mount point).
   */
  private async begin(slug: string, before: AddonManifest | null): Promise<string> {
    const work = path.join(this.workRoot, randomUUID());
    const guard = this.guard();
    guard.check(this.addonsDir, 'folder');
    guard.check(work, 'folder');
    await this.writeRecord({ slug, work, phase: 'staging', moveAside: [], moveIn: [], before, after: null });
    await fs.promises.mkdir(path.join(work, 'old'), { recursive: true });
    return work;
  }

  /** Renames the old folders aside and the new ones in, writes the manifest; any failure undoes it all. */
  private async swap(record: SwapRecord, options: AddonOperationOptions): Promise<void> {
    await this.writeRecord(record);
    const guard = this.guard();
    try {
      // Before the first rename: no folder moved is a link, none moved aside (to be deleted) holds a
      // mount point or is held by another process (the game).
      for (const folder of record.moveIn) guard.check(path.join(this.addonsDir, folder), 'folder');
      for (const folder of record.moveAside) await guard.checkTree(path.join(this.addonsDir, folder));
      await guard.replaceable(record.moveAside.map((folder) => path.join(this.addonsDir, folder)));
      if (record.moveIn.length > 0) await fs.promises.mkdir(this.addonsDir, { recursive: true });
      for (const folder of record.moveAside) {
        options.onProgress?.({ phase: 'swap', slug: record.slug, folder });
        AddonManager.checkAborted(options.signal);
        await guard.move(path.join(this.addonsDir, folder), path.join(record.work, 'old', folder));
      }
      for (const folder of record.moveIn) {
        options.onProgress?.({ phase: 'swap', slug: record.slug, folder });
        AddonManager.checkAborted(options.signal);
        await guard.move(path.join(record.work, 'new', folder), path.join(this.addonsDir, folder));
      }
      await guard.flush();
      if (record.after !== null) await this.writeManifest(record.after);
      else await this.removeManifest(record.slug);
      await this.writeRecord({ ...record, phase: 'done' });
    } catch (err) {
      await this.rollback(record);
      throw err;
    }
    await this.finish(record);
  }

  private static checkAborted(signal: AbortSignal | undefined): void {
    if (signal?.aborted) throw new AbortedError('the change was cancelled; the previous version is back');
  }

  /** Puts back what `record` says may have moved, and the manifest it had before. */
  private async rollback(record: SwapRecord): Promise<void> {
    const guard = this.guard();
    for (const folder of record.moveIn) {
      const staged = path.join(record.work, 'new', folder);
      const live = path.join(this.addonsDir, folder);
      // Renamed whole: not in `new` any more means it is in Interface/AddOns.
      if (!(await exists(staged)) && (await exists(live))) await guard.move(live, staged);
    }
    for (const folder of record.moveAside) {
      const aside = path.join(record.work, 'old', folder);
      if (await exists(aside)) await guard.move(aside, path.join(this.addonsDir, folder));
    }
    await guard.flush();
    if (record.before !== null) await this.writeManifest(record.before);
    else await this.removeManifest(record.slug);
    await this.finish(record);
  }

  private async finish(record: SwapRecord): Promise<void> {
    await this.guard().removeWork(record.work);
    await removeDurably(this.recordFile);
    await this.removeWorkRoot();
  }

  /** `Interface/.patchwell-work` removed when empty. */
  private async removeWorkRoot(): Promise<void> {
    try {
      await fs.promises.rmdir(this.workRoot);
    } catch (err) {
      // Another work folder is there (not ours to delete, or one left behind), or none is left at all.
      if (
        !['ENOTEMPTY', 'EEXIST', 'ENOENT'].includes((err as NodeJS.ErrnoException).code ?? '') &&
        !sharingViolation(err)
      )
        throw err;
    }
  }

  /** The guard of one step of a change, its warnings the state folder's. */
  private guard(): FolderGuard {
    return new FolderGuard(this.gameDir, this.updates.state.warn);
  }

  /** Finishes (once swapped) or rolls back the restore or the swap a killed process left recorded. */
  private async recover(): Promise<void> {
    await recoverRestore(this.updates.state, this.gameDir);
    const record = await this.updates.state.readJson<SwapRecord | null>(RECORD, null);
    if (record === null) {
      // Work folders a finished change could not remove (a file in one was held) go now.
      let left: string[] = [];
      try {
        left = await fs.promises.readdir(this.workRoot);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
      const guard = this.guard();
      for (const entry of left) await guard.removeWork(path.join(this.workRoot, entry));
      if (left.length > 0) await this.removeWorkRoot();
      return;
    }
    if (typeof record.work !== 'string' || path.dirname(record.work) !== this.workRoot) {
      throw new StateError(`${this.recordFile} names a swap of another game folder (${String(record.work)})`);
    }
    AddonManager.checkFolders(this.recordFile, [...record.moveAside, ...record.moveIn]);
    if (record.phase === 'done') await this.finish(record);
    else await this.rollback(record);
  }

  /** Folder names from the state folder are used only when they name a folder of Interface/AddOns. */
  private static checkFolders(file: string, folders: unknown): void {
    if (!Array.isArray(folders) || folders.some((f) => typeof f !== 'string' || badSegment(f) !== null)) {
      throw new StateError(`${file} names a folder outside Interface/AddOns`);
    }
  }

  private get recordFile(): string {
    return path.join(this.stateDir, RECORD);
  }

  private writeRecord(record: SwapRecord): Promise<void> {
    return this.updates.state.writeJson(RECORD, record);
  }

  private writeManifest(manifest: AddonManifest): Promise<void> {
    return this.updates.state.writeJson(`${MANIFESTS}/${manifest.slug}.json`, manifest);
  }

  private async removeManifest(slug: string): Promise<void> {
    await removeDurably(path.join(this.stateDir, MANIFESTS, `${slug}.json`));
  }

  /** The manifests in the state folder, by slug, sorted. */
  private async manifests(): Promise<Map<string, AddonManifest>> {
    let names: string[];
    try {
      names = await fs.promises.readdir(path.join(this.stateDir, MANIFESTS));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
      throw new StateError(`cannot read ${MANIFESTS}: ${(err as Error).message}`);
    }
    const slugs = names.filter((n) => n.endsWith('.json')).map((n) => n.slice(0, -'.json'.length));
    const found = new Map<string, AddonManifest>();
    for (const slug of slugs.filter((s) => SLUG.test(s)).sort()) {
      const manifest = await this.updates.state.readJson<AddonManifest | null>(`${MANIFESTS}/${slug}.json`, null);
      if (manifest === null) continue;
      AddonManager.checkFolders(`${MANIFESTS}/${slug}.json`, manifest.folders);
      found.set(slug, manifest);
    }
    return found;
  }
}
