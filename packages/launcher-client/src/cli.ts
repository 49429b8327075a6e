#!/usr/bin/env node
/**
 * `launcher-client`: the example launcher. `update` runs the specification's flow, downloads what
 * it says and, with `--install`, starts a mandatory update; `pending` and `applied` are the patch's
 * half of the lifecycle; `heartbeat` beats; `device-id` prints the device id. The last line on stdout is JSON; a
 * failure prints `{error, kind}` on stderr and exits 2 (verification refused) or 1 (anything else).
 * With `--events` (any command), stdout is the JSON lines of docs/launcher-protocol.md instead (`cli/output.ts`).
 */
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { addonsCommand, type CliTools } from './cli/addons.js';
import { backupCommand } from './cli/backup.js';
import { gameCommand } from './cli/game.js';
import { failureReport, Output } from './cli/output.js';
import { type UpdateInfo, UpdateManager } from './update/manager.js';
import type { PendingInstall } from './update/install.js';
import type { Progress } from './net/download.js';
import { UsageError } from './errors.js';
import type { TrustedKey } from './trust/keys.js';

/** Set by the single-executable build (scripts/build-exe.mjs), which has no package.json beside it. */
declare const PATCHWELL_CLIENT_VERSION: string | undefined;

const HELP = `Usage:
  launcher-client update --server URL --trust KEYS.json --state DIR --app APP --version-code N
                         [--patch-version-code M] [--lang zh|en] [--publisher-key PUB ...]
                         [--current-file PATH] [--install [-- ARGS...]]
      A start of the launcher on version N: confirms a pending install of N (pruning DIR/downloads),
      checks APP-launcher, then APP-launcher-patch (with M, default the patch applied on N, else N),
      as the specification's client flow says, and downloads the mandatory update or the patch into
      DIR/downloads; a patch is recorded as pending.
      A full package with no version (404) is an http error: the server or the app is wrong.
      KEYS.json: an array of {keyId, publicKey} as GET /api/signing-keys lists them.
      PUB (repeatable): a minisign public key file of the publisher; with one, a download is kept
      only when its fileSignature verifies with a pinned key and names this package, versionCode
      and SHA-256.
      --current-file: the installed APP-launcher file (version N; default: the one DIR keeps when
      the library installed N); a mandatory update is then rebuilt from it and the delta the
      service offers (with the runtime's zlib where it has zstd dictionaries, else the zstd
      program), falling back to the full download on any failure (the reason goes to stderr as
      {"warning"}).
      --install: a mandatory update, verified again, is started detached with ARGS and recorded
      as the pending install; the launcher then quits.
      Last line on stdout: {"result": "up-to-date"|"mandatory"|"patch", "optional", "version",
      "versionCode", "file", "sha256", "downgrade", "delta", "downloadedBytes"}, with
      "deltaEngine": "node"|"program" when delta is true, and "install": {"installer", "args"}
      with --install.
  launcher-client pending --state DIR
      Prints {"install": {...}|null, "patch": {"file", "versionCode", "sha256"}|null}: the install
      started and not yet confirmed, the patch downloaded and not yet applied.
  launcher-client applied --state DIR --patch-version-code M
      Marks the pending patch M applied (the next update checks the patch package with M) and
      prunes DIR/downloads.
  launcher-client heartbeat --server URL --state DIR --version-code N [--app-version V] [--once]
      One heartbeat with --once; without it, beats every 60 s until interrupted.
  launcher-client device-id --state DIR
      Prints the device id kept in DIR (made if there is none).
  launcher-client addons list|install|update|remove|pin|unpin|outdated|scan ...
      Installs, updates and removes addons in GAME/Interface/AddOns: launcher-client addons --help.
  launcher-client game status|update|verify|repair ...
      Installs, updates, verifies and repairs the game client in GAME: launcher-client game --help.
  launcher-client backup create|list|restore|remove ...
      Snapshots of GAME/WTF (settings) kept in DIR/backups: launcher-client backup --help.

Exit status: 0 success; 2 an answer or file failed verification (kind signature, digest, stale, rollback,
integrity, publisher-signature; nothing is left in DIR/downloads); 1 any other failure (kind http, network,
clock, usage, ...). Failures print {"error", "kind"} on stderr; kind clock (this computer's clock is wrong:
the error is a sentence to show) adds "offsetMs", the clock's offset from the server's (negative: behind).

--events (any command, anywhere before --): stdout becomes JSON lines for a launcher to read, one
object each, as they happen: {"event": "start"}, {"event": "progress"}, {"event": "log"} (what
goes to stderr otherwise), and last one {"event": "result", ...the answer} or {"event": "error",
"kind", "error", ...}; the exit status is the same. The protocol: docs/launcher-protocol.md.
launcher-client --version prints the version.
`;

const OPTIONS = {
  server: { type: 'string' },
  trust: { type: 'string' },
  state: { type: 'string' },
  app: { type: 'string' },
  'version-code': { type: 'string' },
  'patch-version-code': { type: 'string' },
  'app-version': { type: 'string' },
  lang: { type: 'string' },
  'publisher-key': { type: 'string', multiple: true },
  'current-file': { type: 'string' },
  install: { type: 'boolean' },
  once: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

function required(values: Values, name: 'server' | 'trust' | 'state' | 'app' | 'version-code'): string {
  const value = values[name];
  if (value === undefined || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

function integer(value: string, name: string): number {
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(Number(value)))
    throw new UsageError(`--${name} must be an integer`);
  return Number(value);
}

function readKeys(file: string): TrustedKey[] {
  let keys: unknown;
  try {
    keys = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    throw new UsageError(`--trust ${file}: ${(err as Error).message}`);
  }
  const valid = (k: unknown): k is TrustedKey =>
    typeof k === 'object' &&
    k !== null &&
    typeof (k as TrustedKey).keyId === 'string' &&
    typeof (k as TrustedKey).publicKey === 'string';
  if (!Array.isArray(keys) || keys.length === 0 || !keys.every(valid)) {
    throw new UsageError(`--trust ${file}: expected a non-empty array of {keyId, publicKey}`);
  }
  return keys.map((k) => ({ keyId: k.keyId, publicKey: k.publicKey }));
}

function readPublisherKeys(files: readonly string[] = []): string[] {
  return files.map((file) => {
    try {
      return fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw new UsageError(`--publisher-key ${file}: ${(err as Error).message}`);
    }
  });
}

/** The package's version (the single executable's is set when it is built). */
function packageVersion(): string {
  if (typeof PATCHWELL_CLIENT_VERSION === 'string') return PATCHWELL_CLIENT_VERSION;
  const manifest = JSON.parse(fs.readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return manifest.version;
}

/** The download's progress: the delta's (phase `delta`, told apart by its size) and the package's. */
function downloadProgress(out: Output, update: UpdateInfo): ((p: Progress) => void) | undefined {
  if (!out.wantsProgress) return undefined;
  const delta = update.delta?.fileSize;
  const file = update.fileName ?? undefined;
  return (p) => {
    const isDelta = delta !== undefined && p.total === delta && p.total !== update.fileSize;
    out.progress({
      phase: isDelta ? 'delta' : 'download',
      unit: 'bytes',
      bytes: p.bytes,
      total: p.total,
      rate: p.rate,
      ...(isDelta || file === undefined ? {} : { file }),
    });
  };
}

async function update(values: Values, installArgs: readonly string[], out: Output): Promise<object> {
  const versionCode = integer(required(values, 'version-code'), 'version-code');
  const patchCode = values['patch-version-code'];
  const lang = values.lang;
  if (lang !== undefined && lang !== 'zh' && lang !== 'en') throw new UsageError('--lang must be zh or en');
  const manager = new UpdateManager({
    serverUrl: required(values, 'server'),
    trustedKeys: readKeys(required(values, 'trust')),
    stateDir: required(values, 'state'),
    app: required(values, 'app'),
    ...(lang === undefined ? {} : { lang }),
    publisherKeys: readPublisherKeys(values['publisher-key']),
    retry: out.retry,
  });
  await manager.startup(versionCode);
  const check = await manager.checkForUpdates(
    versionCode,
    patchCode === undefined ? undefined : integer(patchCode, 'patch-version-code'),
  );
  const optional = check.optional && { version: check.optional.version, versionCode: check.optional.versionCode };
  if (check.update === null) return { result: check.result, optional };
  const onProgress = downloadProgress(out, check.update);
  const currentFile = check.update.kind === 'full' ? values['current-file'] : undefined;
  const downloaded = await manager.downloadUpdate(check.update, {
    ...(onProgress ? { onProgress } : {}),
    ...(currentFile === undefined ? {} : { currentFile }),
  });
  if (downloaded.deltaFailure !== null) {
    out.log('warning', `delta not used: ${downloaded.deltaFailure}`);
  }
  return {
    result: check.result,
    optional,
    version: check.update.version,
    versionCode: check.update.versionCode,
    file: downloaded.file,
    sha256: downloaded.sha256,
    downgrade: check.update.downgrade,
    delta: downloaded.delta,
    ...(downloaded.deltaEngine === null ? {} : { deltaEngine: downloaded.deltaEngine }),
    downloadedBytes: downloaded.downloadedBytes,
    ...(values.install && check.update.kind === 'full'
      ? { install: await installed(manager.installUpdate(downloaded, installArgs)) }
      : {}),
  };
}

async function installed(started: Promise<PendingInstall>) {
  const install = await started;
  return { installer: install.installer, args: install.args };
}

/** A manager for the lifecycle commands, which need only the state folder. */
function stateManager(values: Values): UpdateManager {
  return new UpdateManager({ serverUrl: 'http://localhost/', trustedKeys: [], stateDir: required(values, 'state') });
}

async function pending(values: Values): Promise<object> {
  const { install, patch } = await stateManager(values).pending();
  return { install, patch: patch && { file: patch.file, versionCode: patch.versionCode, sha256: patch.sha256 } };
}

async function applied(values: Values): Promise<object> {
  const code = values['patch-version-code'];
  if (code === undefined) throw new UsageError('--patch-version-code is required');
  const patch = await stateManager(values).markPatchApplied(integer(code, 'patch-version-code'));
  return { applied: { file: patch.file, versionCode: patch.versionCode, sha256: patch.sha256 } };
}

async function heartbeat(values: Values, out: Output): Promise<object> {
  const versionCode = integer(required(values, 'version-code'), 'version-code');
  const manager = new UpdateManager({
    serverUrl: required(values, 'server'),
    trustedKeys: [],
    stateDir: required(values, 'state'),
  });
  const fields = { appVersion: values['app-version'] ?? String(versionCode) };
  if (values.once) {
    await manager.heartbeatOnce(fields);
    return { ok: true, deviceId: await manager.deviceId() };
  }
  const beat = manager.startHeartbeat(fields, {
    onError: (err) => {
      const { error, ...fields } = failureReport(err).report;
      out.log('error', String(error), fields);
    },
  });
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await beat.stop();
  return { ok: true, deviceId: await manager.deviceId() };
}

async function deviceId(values: Values): Promise<object> {
  return { deviceId: await stateManager(values).deviceId() };
}

async function main(argv: string[]): Promise<number> {
  // What follows `--` is the installer's (`update --install -- ARGS`), not ours.
  const cut = argv.indexOf('--');
  const ours = cut < 0 ? argv : argv.slice(0, cut);
  const passed = cut < 0 ? [] : argv.slice(cut + 1);
  const args = ours.filter((arg) => arg !== '--events');
  const group = args[0] === 'addons' || args[0] === 'game' || args[0] === 'backup' ? args[0] : undefined;
  const out = Output.of(args.length < ours.length, group ?? '');
  const tools: CliTools = { readKeys, readPublisherKeys, out };
  const rest = [...args.slice(1), ...(cut < 0 ? [] : argv.slice(cut))];
  if (group === 'addons') return addonsCommand(rest, tools);
  if (group === 'game') return gameCommand(rest, tools);
  if (group === 'backup') return backupCommand(rest, out);
  let parsed;
  try {
    parsed = parseArgs({ args, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    return out.finish({ error: new UsageError((err as Error).message) });
  }
  const [command, ...more] = parsed.positionals;
  if (parsed.values.version && command === undefined) {
    out.start('version');
    return out.finish({ text: packageVersion(), field: 'version', code: 0 });
  }
  if (parsed.values.help || command === undefined || command === 'help') {
    out.start('help');
    return out.finish({ text: HELP, field: 'help', code: command === undefined && !parsed.values.help ? 1 : 0 });
  }
  out.start(command);
  const commands: Record<string, (values: Values) => Promise<object>> = {
    update: (values) => update(values, passed, out),
    heartbeat: (values) => heartbeat(values, out),
    'device-id': deviceId,
    pending,
    applied,
  };
  const run = commands[command];
  try {
    if (run === undefined || more.length > 0) throw new UsageError(`unknown command ${[command, ...more].join(' ')}`);
    if (passed.length > 0 && !(command === 'update' && parsed.values.install))
      throw new UsageError('arguments after -- go to the installer: only with update --install');
    return out.finish({ answer: await run(parsed.values) });
  } catch (err) {
    return out.finish({ error: err });
  }
}

void main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
