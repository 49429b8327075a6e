/**
 * `launcher-client game status|update|verify|repair`: the `GameManager` as a command. The last line
 * on stdout is JSON; a failure prints `{error, kind}` (and the error's `details`) on stderr and exits
 * 2 (verification refused an answer, manifest or chunk) or 1; `verify` exits 3 when the game is not whole.
 */
import { parseArgs } from 'node:util';
import v8 from 'node:v8';
import { type CliTools, keepOption } from './addons.js';
import type { ProgressReport } from './output.js';
import { UpdateManager } from '../update/manager.js';
import { UsageError } from '../errors.js';
import { GameManager, type GameProgress } from '../game/manager.js';

const HELP = `Usage:
  launcher-client game status --state DIR --game-dir GAME
  launcher-client game update --server URL --trust KEYS.json --state DIR --game-dir GAME --app APP
                              [--publisher-key PUB ...] [--mirror URL ...] [--connections N] [--keep N]
  launcher-client game verify (the same options) [--full]
  launcher-client game repair (the same options)
      update and repair snapshot GAME/WTF first when it changed (DIR/backups, the newest --keep N
      automatic snapshots kept, default 20; see launcher-client backup).
      Keeps the game client in GAME as the service's latest build: only changed files are rebuilt,
      from chunks already on disk and chunks downloaded (mirrors first, then the service; each
      checked against its name), assembled in GAME/.patchwell-work and renamed into place. DIR keeps
      the installed manifest (game/manifest.json), the size and time of each file last verified
      (game/files.json) and an operation under way (game/operation.json).
      One operation at a time: update, verify and repair (and addons and backup changes) hold
      DIR/operation.lock; a second stops at once (kind busy, with "pid"); a lock whose process is
      gone is taken over. Nothing is written, renamed or deleted through a symbolic link, junction
      or mount point inside GAME (kind unsafe-path, with "path", before anything is written). A
      folder with files in it where a game file goes stops an update before anything is renamed,
      and is reported by repair after the rest is repaired (kind blocked, with "paths"; repair adds
      "repaired" and "removed"); an empty one is replaced. A file to be replaced or deleted that
      another program holds (the game is running; a scanner reading it) is tried again for up to
      10 s, then the update or repair stops before anything is renamed (kind in-use, with "paths"),
      its downloaded files kept in GAME/.patchwell-work: run again once the game is closed and it
      renames at once. Read-only files are made writable before they are replaced. A refusal before
      the first rename leaves nothing under way; a run that finishes one a kill cut off says
      "updated" from the build installed before it. A work folder that cannot be removed (a file in
      it held) is a warning, removed by the next run.
      Last line on stdout: status {"installed": {version, buildCode}|null, "underWay": {from, to}|null,
      "inUse": [path] (the installed files another program holds now: close it before updating)}
      (and "busy": {pid, operation, since} while another operation runs; status takes no lock);
      update {"result": "up-to-date"|"updated"|"installed", "from", "to", "files": {added, changed,
      removed, unchanged}, "left" (dropped files kept: changed since installed), "downloadedBytes",
      "reusedBytes"}; verify {"ok", "buildCode", "missing",
      "damaged", "extra"} (and "underWay": {from, to, inUse} when a half-done run could not be
      finished because a file is still held); repair {"repaired", "removed", "downloadedBytes"}; with --mirror, update
      and repair add "mirrors": [{url, chunks, failures}].

Exit status: 0 success; 3 verify found the game not whole; 2 an answer, manifest or chunk was refused
(kind signature, digest, stale, rollback, integrity, publisher-signature, manifest); 1 any other
failure (kind http, network, usage, state, disk-space, busy, unsafe-path, blocked, in-use, ...).
`;

const OPTIONS = {
  server: { type: 'string' },
  trust: { type: 'string' },
  state: { type: 'string' },
  'game-dir': { type: 'string' },
  app: { type: 'string' },
  'publisher-key': { type: 'string', multiple: true },
  mirror: { type: 'string', multiple: true },
  connections: { type: 'string' },
  keep: { type: 'string' },
  full: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

function required(values: Values, name: 'server' | 'trust' | 'state' | 'game-dir' | 'app'): string {
  const value = values[name];
  if (value === undefined || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

/** The manager of `values`; `offline` for status, which needs only the state folder. */
function gameManager(values: Values, tools: CliTools, offline: boolean): GameManager {
  const updates = new UpdateManager({
    serverUrl: offline ? 'http://localhost/' : required(values, 'server'),
    trustedKeys: offline ? [] : tools.readKeys(required(values, 'trust')),
    stateDir: required(values, 'state'),
    publisherKeys: tools.readPublisherKeys(values['publisher-key']),
    retry: tools.out.retry,
    onWarning: tools.out.warn,
  });
  const connections = values.connections;
  if (connections !== undefined && !/^\d{1,2}$/.test(connections))
    throw new UsageError('--connections must be 1 to 64');
  return new GameManager({
    updates,
    gameDir: required(values, 'game-dir'),
    app: offline ? '' : required(values, 'app'),
    mirrors: values.mirror ?? [],
    ...(connections === undefined ? {} : { connections: Number(connections) }),
  });
}

/** The game's progress as the run reports it: plan and assemble count files, the download bytes. */
function gameProgress(p: GameProgress): ProgressReport {
  if (p.phase === 'download') return { phase: p.phase, unit: 'bytes', bytes: p.bytes, total: p.total, rate: p.rate };
  return { phase: p.phase, unit: 'files', bytes: p.done, total: p.files };
}

export async function gameCommand(argv: string[], tools: CliTools): Promise<number> {
  const { out } = tools;
  /*
   * V8's young generation is kept at its starting size for the rest of the process. V8 doubles it (from 1
   * MiB a semi-space, up to 64) each time as many bytes have survived its collections as it holds, and a
   * 2 GiB install's thousands of requests and chunks survive by tens of MiB: it grew to 64 or 128 MiB of
   * resident pages, never given back. V8 reads the growth factor each time it would grow it. Same-run
   * A/B, the 2 GiB install of the bench: peak RSS 191-192 MiB against 244-251, wall and CPU within the
   * noise. The command's own process only: a launcher using the library tunes its own. Node 20 and 22
   * set V8's flags back when a worker thread starts (the hashing thread, at the start of each
   * operation), so there it grows as before; Node 24 keeps them.
   */
  v8.setFlagsFromString('--semi-space-growth-factor=1');
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    return out.finish({ error: new UsageError((err as Error).message) });
  }
  const [command, ...rest] = parsed.positionals;
  const { values } = parsed;
  if (values.help || command === undefined) return out.finish({ text: HELP, field: 'help', code: values.help ? 0 : 1 });
  out.start(`game ${command}`);
  try {
    if (rest.length > 0) throw new UsageError(`game ${command} takes no ${rest.join(' ')}`);
    const onProgress = out.wantsProgress ? (p: GameProgress) => out.progress(gameProgress(p)) : undefined;
    const keep = keepOption(values.keep);
    const options = { ...(onProgress === undefined ? {} : { onProgress }), ...(keep === undefined ? {} : { keep }) };
    const withMirrors = <T extends { mirrors: unknown[] }>(result: T) => {
      const { mirrors, ...answer } = result;
      return mirrors.length > 0 ? { ...answer, mirrors } : answer;
    };
    let answer: object;
    let code = 0;
    if (command === 'status') {
      answer = await gameManager(values, tools, true).status();
    } else if (command === 'update') {
      answer = withMirrors(await gameManager(values, tools, false).update(options));
    } else if (command === 'verify') {
      const result = await gameManager(values, tools, false).verify({ full: values.full === true });
      answer = result;
      if (!result.ok) code = 3;
    } else if (command === 'repair') {
      answer = withMirrors(await gameManager(values, tools, false).repair(options));
    } else {
      throw new UsageError(`unknown command game ${command}`);
    }
    return out.finish({ answer, code });
  } catch (err) {
    return out.finish({ error: err });
  }
}
