/**
 * The single executable for Linux (`npm run build:exe -- --target linux-x64`), built here when it is
 * missing or older than what it is made of, against the real service: it installs a game build
 * exactly, keeps undici unloaded until a chunk download needs it, and the Python launcher of
 * `examples/python-launcher` drives it end to end.
 */
import { spawn } from 'node:child_process';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GameFile, manifestOf, publishBuild } from '../../../test/helpers/game.js';
import { addonZip, gameFolder, publishAddon } from './addons-fixtures.js';
import { runWithEvents } from './events-harness.js';
import { buildWhenStale, exePath } from './exe-build.js';
import { type Service, startService } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const PACKAGE = path.resolve(import.meta.dirname, '..');
const EXE = exePath('linux-x64');
const PYTHON_LAUNCHER = path.join(ROOT, 'examples', 'python-launcher', 'launcher.py');
const KiB = 1024;

let s: Service;
let keysFile: string;
let probe: string;

beforeAll(async () => {
  buildWhenStale('linux-x64');
  s = await startService();
  keysFile = await s.keysFile();
  await publish('2.0.0', 1, BUILD1);
  // Says at exit whether node:http2 was loaded: undici requires it as it is evaluated (lib/dispatcher/
  // client-h2.js), and nothing else of a command that makes no request does.
  probe = path.join(s.stateDir(), 'undici-probe.cjs');
  fs.writeFileSync(
    probe,
    "process.on('exit', () => process.stderr.write(`http2 ${process.moduleLoadList.includes('NativeModule http2')}\\n`));\n",
  );
}, 600_000);
afterAll(() => s?.close());

const exe = randomBytes(300 * KiB);
const BUILD1: GameFile[] = [
  { path: 'Game.exe', content: exe, chunkBytes: 64 * KiB, extra: { executable: true } },
  { path: 'Data/common.MPQ', content: randomBytes(1024 * KiB), chunkBytes: 128 * KiB },
  { path: 'Data/enUS/locale.MPQ', content: randomBytes(40 * KiB) },
  { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist "a"\n'), extra: { policy: 'initial' } },
];
const common2 = Buffer.from(BUILD1[1]!.content);
randomBytes(200 * KiB).copy(common2, 300 * KiB);
const BUILD2: GameFile[] = [BUILD1[0]!, { ...BUILD1[1]!, content: common2 }, BUILD1[2]!, BUILD1[3]!];

/** The options the game commands and the Python launcher take alike. */
const options = (stateDir: string, gameDir: string, trust = keysFile) =>
  ['--server', s.proxy.url, '--trust', trust, '--state', stateDir, '--game-dir', gameDir].concat(['--app', 'app']);

async function publish(version: string, buildCode: number, files: GameFile[]) {
  const res = await publishBuild(s.t, { version, buildCode }, manifestOf({ version, buildCode }, files));
  expect(res.statusCode, res.body).toBe(201);
}

function sameFiles(gameDir: string, files: GameFile[]) {
  for (const file of files)
    expect(fs.readFileSync(path.join(gameDir, file.path)).equals(file.content), file.path).toBe(true);
}

/** `argv` run to its end: exit status, stdout, stderr. */
function run(argv: string[], env: NodeJS.ProcessEnv = process.env) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

describe('the Linux executable', () => {
  it('is one file with its SHA-256 beside it, and answers --version and --help with an empty environment', async () => {
    const [sha256, name] = fs.readFileSync(`${EXE}.sha256`, 'utf8').trim().split(/\s+/);
    expect(name).toBe(path.basename(EXE));
    expect(createHash('sha256').update(fs.readFileSync(EXE)).digest('hex')).toBe(sha256);
    const { version } = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8')) as { version: string };
    // No PATH (so no Node to find) and nothing else from this environment.
    const bare = { HOME: os.tmpdir() };
    expect(await run([EXE, '--version'], bare)).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
    const help = await run([EXE, '--help'], bare);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toContain('--events');
  });

  it('installs a game build exactly (status, update, verify with --events); undici is loaded only for the chunks', async () => {
    const stateDir = s.stateDir();
    const gameDir = gameFolder(s.stateDir());
    const online = options(stateDir, gameDir);
    const withProbe = { ...process.env, NODE_OPTIONS: `--require ${probe}` };

    const help = await run([EXE, '--help'], withProbe);
    expect(help.stderr).toBe('http2 false\n');
    const status = await runWithEvents([EXE], ['game', 'status', '--state', stateDir, '--game-dir', gameDir], {
      env: withProbe,
    });
    expect(status.last).toEqual({ event: 'result', installed: null, underWay: null, inUse: [] });
    expect(status.stderr).toBe('http2 false\n');

    const update = await runWithEvents([EXE], ['game', 'update', ...online], { env: withProbe });
    expect(update.code, update.stderr).toBe(0);
    expect(update.last).toMatchObject({ event: 'result', result: 'installed', to: 1 });
    expect(update.stderr).toBe('http2 true\n');
    expect(new Set(update.progress.map((p) => p.phase))).toEqual(new Set(['plan', 'download', 'assemble']));
    sameFiles(gameDir, BUILD1);
    expect(fs.statSync(path.join(gameDir, 'Game.exe')).mode & 0o111).not.toBe(0);
    const verify = await runWithEvents([EXE], ['game', 'verify', ...online, '--full']);
    expect(verify.last).toMatchObject({ event: 'result', ok: true, missing: [], damaged: [] });
  });
});

describe('the Python launcher of examples/ drives the executable', () => {
  it('install, then update, then a repair; an addon installed; a settings snapshot each start', async () => {
    await publishAddon(s.t, 'py-addon', '1.0', addonZip(['PyAddon'], '1.0'));
    const stateDir = s.stateDir();
    const gameDir = gameFolder(s.stateDir());
    // The executable's path from the environment, as a launcher's packaging might set it.
    const launcher = (more: string[] = []) =>
      run(['/usr/bin/python3', PYTHON_LAUNCHER, ...options(stateDir, gameDir), '--addon', 'py-addon', ...more], {
        ...process.env,
        PATCHWELL_CLIENT: EXE,
      });

    // Build 1 is the latest: a first install.
    const first = await launcher();
    expect(first.code, first.stderr + first.stdout).toBe(0);
    expect(first.stdout).toMatch(/^installed: nothing yet$/m);
    expect(first.stdout).toMatch(/^game: installed build 1 /m);
    expect(first.stdout).toMatch(/^verify: ok$/m);
    expect(first.stdout).toMatch(/^addons: py-addon 1\.0$/m);
    // The manual snapshot, beside the automatic ones the install and the addon took first.
    expect(first.stdout).toMatch(/^settings snapshot: \S+ \(2 files\); \d+ kept$/m);
    expect(first.stdout).toMatch(/\r.*download +\[#+ *\] 100%/); // the one-line progress display
    expect(first.stdout.trimEnd().endsWith('ready to play')).toBe(true);
    sameFiles(gameDir, BUILD1);
    expect(fs.readFileSync(path.join(gameDir, 'Interface/AddOns/PyAddon/core.lua'), 'utf8')).toBe('-- PyAddon 1.0\n');

    await publish('2.0.1', 2, BUILD2);
    const second = await launcher();
    expect(second.code, second.stderr + second.stdout).toBe(0);
    expect(second.stdout).toMatch(/^game: updated build 2 \(0 added, 1 changed, 0 removed; /m);
    expect(second.stdout).toMatch(/^settings snapshot: /m);
    sameFiles(gameDir, BUILD2);

    // A byte gone bad on disk, the size and time the launcher recorded unchanged (game/files.json): only
    // hashing finds it, update's quick look does not.
    const damaged = path.join(gameDir, 'Data/enUS/locale.MPQ');
    const bytes = fs.readFileSync(damaged);
    bytes[100] = bytes[100]! ^ 0xff;
    fs.writeFileSync(damaged, bytes);
    const quick = path.join(stateDir, 'game', 'files.json');
    const recorded = JSON.parse(fs.readFileSync(quick, 'utf8')) as Record<string, { size: number; mtimeMs: number }>;
    recorded['Data/enUS/locale.MPQ'] = { size: bytes.length, mtimeMs: fs.statSync(damaged).mtimeMs };
    fs.writeFileSync(quick, JSON.stringify(recorded));
    const third = await launcher(['--full-verify']);
    expect(third.code, third.stderr + third.stdout).toBe(0);
    expect(third.stdout).toMatch(/^game: up to date \(build 2\)$/m);
    expect(third.stdout).toMatch(/^verify: damaged \['Data\/enUS\/locale.MPQ'\], missing \[\]: repairing$/m);
    expect(third.stdout).toMatch(/^repair: 1 file\(s\) restored, \d+ bytes downloaded$/m);
    sameFiles(gameDir, BUILD2);

    // A failure is told by its kind: answers signed by a key the launcher does not trust are refused
    // (signature), nothing changed.
    const stranger = path.join(s.stateDir(), 'stranger-keys.json');
    const raw = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x ?? '';
    fs.writeFileSync(
      stranger,
      JSON.stringify([{ keyId: 'stranger', publicKey: Buffer.from(raw, 'base64url').toString('base64') }]),
    );
    const refused = await run([
      '/usr/bin/python3',
      PYTHON_LAUNCHER,
      '--client',
      EXE,
      ...options(stateDir, gameDir, stranger),
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^error \(signature\): An update was refused because it failed verification/m);
    sameFiles(gameDir, BUILD2);
  });
});
