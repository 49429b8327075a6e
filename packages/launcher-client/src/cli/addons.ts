/**
 * `launcher-client addons list|install|update|remove|pin|unpin|outdated|scan`: the `AddonManager` as a command. The last line
 * on stdout is JSON; a failure prints `{error, kind}` on stderr and exits 2 (verification or an
 * archive refused) or 1. An `update` where some addons failed still prints its JSON, with `failed`.
 */
import { parseArgs } from 'node:util';
import { AddonManager, type AddonProgress } from '../addons/manager.js';
import type { Output, ProgressReport } from './output.js';
import { UpdateManager } from '../update/manager.js';
import { isVerificationKind, UsageError } from '../errors.js';
import type { TrustedKey } from '../trust/keys.js';

/** What `cli.ts` lends the game and addon commands: reading keys alike, and the run's one output. */
export interface CliTools {
  readKeys(file: string): TrustedKey[];
  readPublisherKeys(files: readonly string[] | undefined): string[];
  readonly out: Output;
}

const HELP = `Usage:
  launcher-client addons list    --state DIR --game-dir GAME
  launcher-client addons install SLUG[@VERSION]... --server URL --trust KEYS.json --state DIR
                                 --game-dir GAME [--publisher-key PUB ...] [--lang zh|en] [--keep N]
  launcher-client addons update  [SLUG...] (the same options; every installed addon when none is named)
  launcher-client addons remove  SLUG... --state DIR --game-dir GAME [--force] [--keep N]
  launcher-client addons pin     SLUG --state DIR --game-dir GAME
  launcher-client addons unpin   SLUG --state DIR --game-dir GAME
  launcher-client addons outdated [SLUG...] --server URL --trust KEYS.json --state DIR --game-dir GAME
                                 [--lang zh|en]
  launcher-client addons scan    --server URL --trust KEYS.json --state DIR --game-dir GAME
      Addons live in GAME/Interface/AddOns; DIR keeps a manifest per installed addon. install takes
      each addon's latest release (SLUG@VERSION: that release, and pins the addon; SLUG alone
      unpins it) and its required dependencies first; update asks the catalogue once and replaces
      each addon with a newer release, leaving pinned ones alone; remove deletes exactly the
      folders the addon's manifest lists (refused when another installed addon needs it, unless
      --force). pin keeps an addon at its installed version, unpin lets it follow the newest.
      outdated lists every release above the installed one, with its changelog. scan adopts the
      folders unpacked by hand that match a release of the catalogue (manifests written; nothing
      downloaded or changed in GAME).
      Every file is verified (size, SHA-256, and with --publisher-key the publisher's signature) and
      every archive checked before anything is swapped in; a change is all or nothing. Before a
      change, GAME/WTF is snapshotted into DIR/backups when it changed since the last snapshot; the
      newest N automatic snapshots are kept (--keep, default 20; see launcher-client backup).
      An addon folder another program holds (the game is running: the folder or a file in it) stops
      its change before anything is swapped, after trying again for up to 10 s (kind in-use, with
      "paths"); the installed version is left as it was.
      Last line on stdout: list {"addons": [{slug, version, folders, sha256}]} ("pinned": true on a
      pinned one; "underWay": {slug, phase} while a change a held folder keeps half done waits); install {"installed": [{slug, version, folders}]}; update {"updated": [{slug,
      from, to}], "upToDate": [slug], "failed": [{slug, kind, error}]} (and "pinned": [slug] when
      pinned addons were left alone); remove {"removed":
      [slug]}; pin {"pinned": {slug, version, folders}}; unpin {"unpinned": slug}; outdated
      {"outdated": [{slug, from, to, changelogs: [{version, changelog, createdAt}]}]}; scan
      {"adopted": [{slug, version, folders}], "unknown": [folder]}.

Exit status: 0 success; 2 an answer, file or archive was refused (kind signature, digest, stale,
integrity, publisher-signature, archive); 1 any other failure (kind http, network, usage, not-found,
conflict, in-use, ...). An update with failures exits 2 if any was refused by verification, else 1.
`;

const OPTIONS = {
  server: { type: 'string' },
  trust: { type: 'string' },
  state: { type: 'string' },
  'game-dir': { type: 'string' },
  'publisher-key': { type: 'string', multiple: true },
  lang: { type: 'string' },
  force: { type: 'boolean' },
  keep: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

function required(values: Values, name: 'server' | 'trust' | 'state' | 'game-dir'): string {
  const value = values[name];
  if (value === undefined || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

/** The manager of `values`; `offline` for the commands that need no catalogue (list, remove). */
function addonManager(values: Values, tools: CliTools, offline: boolean): AddonManager {
  const lang = values.lang;
  if (lang !== undefined && lang !== 'zh' && lang !== 'en') throw new UsageError('--lang must be zh or en');
  const updates = new UpdateManager({
    serverUrl: offline ? 'http://localhost/' : required(values, 'server'),
    trustedKeys: offline ? [] : tools.readKeys(required(values, 'trust')),
    stateDir: required(values, 'state'),
    ...(lang === undefined ? {} : { lang }),
    publisherKeys: tools.readPublisherKeys(values['publisher-key']),
    retry: tools.out.retry,
    onWarning: tools.out.warn,
  });
  return new AddonManager({ updates, gameDir: required(values, 'game-dir') });
}

/** `--keep N`: a positive integer (undefined: the default). */
export function keepOption(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < 1) {
    throw new UsageError('--keep must be a positive integer');
  }
  return Number(value);
}

/** The one slug `pin` and `unpin` take. */
function oneSlug(command: string, slugs: readonly string[]): string {
  if (slugs.length !== 1) throw new UsageError(`addons ${command} takes one slug`);
  return slugs[0]!;
}

/** An addon's progress as the run reports it: its download in bytes; extract and swap have no measure. */
export function addonProgress(p: AddonProgress): ProgressReport {
  if (p.phase === 'download')
    return { phase: p.phase, unit: 'bytes', bytes: p.bytes, total: p.total, rate: p.rate, addon: p.slug };
  return {
    phase: p.phase,
    unit: 'bytes',
    bytes: 0,
    total: 0,
    addon: p.slug,
    ...('folder' in p ? { folder: p.folder } : {}),
  };
}

export async function addonsCommand(argv: string[], tools: CliTools): Promise<number> {
  const { out } = tools;
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    return out.finish({ error: new UsageError((err as Error).message) });
  }
  const [command, ...slugs] = parsed.positionals;
  const { values } = parsed;
  if (values.help || command === undefined) return out.finish({ text: HELP, field: 'help', code: values.help ? 0 : 1 });
  out.start(`addons ${command}`);
  try {
    const onProgress = out.wantsProgress ? (p: AddonProgress) => out.progress(addonProgress(p)) : undefined;
    const keep = keepOption(values.keep);
    const options = { ...(onProgress === undefined ? {} : { onProgress }), ...(keep === undefined ? {} : { keep }) };
    let answer: object;
    let code = 0;
    if (command === 'list') {
      if (slugs.length > 0) throw new UsageError('addons list takes no slug');
      const manager = addonManager(values, tools, true);
      const addons = await manager.list();
      const underWay = await manager.underWay();
      answer = {
        addons: addons.map((a) => ({
          slug: a.slug,
          version: a.version,
          folders: a.folders,
          sha256: a.sha256,
          ...(a.pinned === true ? { pinned: true } : {}),
        })),
        ...(underWay === null ? {} : { underWay }),
      };
    } else if (command === 'install') {
      if (slugs.length === 0) throw new UsageError('addons install needs at least one slug');
      answer = { installed: await addonManager(values, tools, false).install(slugs, options) };
    } else if (command === 'update') {
      const report = await addonManager(values, tools, false).update(slugs.length > 0 ? slugs : undefined, options);
      answer = report;
      if (report.failed.length > 0) code = report.failed.some((f) => isVerificationKind(f.kind)) ? 2 : 1;
    } else if (command === 'remove') {
      if (slugs.length === 0) throw new UsageError('addons remove needs at least one slug');
      const removed = await addonManager(values, tools, true).remove(slugs, {
        ...options,
        force: values.force === true,
      });
      answer = { removed };
    } else if (command === 'pin') {
      answer = { pinned: await addonManager(values, tools, true).pin(oneSlug(command, slugs)) };
    } else if (command === 'unpin') {
      const slug = oneSlug(command, slugs);
      await addonManager(values, tools, true).unpin(slug);
      answer = { unpinned: slug };
    } else if (command === 'outdated') {
      answer = { outdated: await addonManager(values, tools, false).outdated(slugs.length > 0 ? slugs : undefined) };
    } else if (command === 'scan') {
      if (slugs.length > 0) throw new UsageError('addons scan takes no slug');
      answer = await addonManager(values, tools, false).scan();
    } else {
      throw new UsageError(`unknown command addons ${command}`);
    }
    return out.finish({ answer, code });
  } catch (err) {
    return out.finish({ error: err });
  }
}
