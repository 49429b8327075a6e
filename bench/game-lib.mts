/*
 * What the game client's end-to-end benchmarks share (`game-e2e.mts`, `game-real.mts`): the built
 * commands run as child processes (wall time, peak RSS, stdout), the service started from its sources
 * with a publisher token and its signing keys, `launcher-publish game` of a folder, and fresh installs
 * measured against `curl` fetching the same chunks into one file.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { highWaterKb } from '../src/modules/deltas/zstd.js';
import { loginCookie, type ServerProcess, startServer } from '../test/helpers/process.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const CLIENT = path.join(ROOT, 'packages/launcher-client/dist/cli.js');
export const PUBLISH = path.join(ROOT, 'packages/publish/dist/cli.js');
export const MiB = 1 << 20;
export const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

export interface Run {
  ms: number;
  peakMiB: number;
  out: string;
  code: number | null;
}

/** Runs a command to its end (or until `stop` says to kill it): wall ms, peak RSS, stdout, exit code. */
export async function run(
  command: string,
  args: string[],
  env: Record<string, string> = {},
  stop?: (child: ChildProcess) => Promise<void>,
): Promise<Run> {
  // Each step starts with nothing left to write back from the one before (a 2 GiB step leaves seconds of it).
  execFileSync('sync');
  const started = performance.now();
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  let peakKb = 0;
  const sample = setInterval(() => (peakKb = Math.max(peakKb, highWaterKb(child.pid ?? 0))), 5);
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (stop) void stop(child);
  const code = await exited;
  clearInterval(sample);
  if (code !== 0 && code !== 3 && !stop) throw new Error(`${command} ${args.join(' ')} exited ${code}: ${err}`);
  return { ms: performance.now() - started, peakMiB: peakKb / 1024, out, code };
}
export const last = (r: Run) => JSON.parse(r.out.trim().split('\n').at(-1) ?? 'null') as Record<string, unknown>;

/** Writes `bytes` at `file` under `dir`, folders made. */
export function put(dir: string, file: string, bytes: Uint8Array): void {
  fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
  fs.writeFileSync(path.join(dir, file), bytes);
}

/** Every file under `dir` (but `.patchwell-work`), relative, `/`-separated. */
export function filesOf(dir: string): string[] {
  return (fs.readdirSync(dir, { recursive: true, withFileTypes: true }) as fs.Dirent[])
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)).split(path.sep).join('/'))
    .filter((f) => !f.startsWith('.patchwell-work/'))
    .sort();
}

export interface Bench {
  readonly server: ServerProcess;
  /** The signing keys (`--trust`). */
  readonly keys: string;
  /** Publishes the folder `dir` as build `buildCode` with the built `launcher-publish game`. */
  publish(dir: string, version: string, buildCode: number): Promise<Run>;
  /** The options of every online `launcher-client game` command for `state` and `game`. */
  options(state: string, game: string): string[];
}

/** The service (SQLite, local store under `work`), a publisher token and the signing keys. */
export async function startBench(work: string): Promise<Bench> {
  const password = 'bench-password-1';
  const server = await startServer({ DATA_DIR: path.join(work, 'data'), ADMIN_PASSWORD: password });
  const cookie = await loginCookie(server.url, password);
  const tokenRes = await fetch(`${server.url}/api/admin/tokens`, {
    method: 'POST',
    headers: { cookie, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'bench', role: 'publisher' }),
  });
  const { token } = (await tokenRes.json()) as { token: string };
  const keys = path.join(work, 'keys.json');
  fs.writeFileSync(keys, await (await fetch(`${server.url}/api/signing-keys`)).text());
  return {
    server,
    keys,
    publish: (dir, version, buildCode) =>
      run(
        process.execPath,
        [
          PUBLISH,
          'game',
          '--server',
          server.url,
          '--dir',
          dir,
          '--app',
          'app',
          '--version',
          version,
          '--build-code',
          String(buildCode),
          '--initial',
          'WTF/Config.wtf',
        ],
        { LAUNCHER_TOKEN: token, LAUNCHER_PUBLISH_STATE: path.join(work, 'publish-state.json') },
      ),
    options: (state, game) => [
      '--server',
      server.url,
      '--trust',
      keys,
      '--state',
      state,
      '--game-dir',
      game,
      '--app',
      'app',
    ],
  };
}

/**
 * A fresh install against curl fetching the same chunks into one file over one connection: `rounds`
 * rounds, each an install into an empty folder (the last one's into `game` and `state`; the others'
 * into `game-N` and `state-N`, left for the caller's removal of `work` at its end) then curl; the
 * rounds' ratios (curl's time over the install's). The earlier rounds' folders are not removed
 * between rounds, nor before the steps after: on a file system that avoids reusing an inode freed
 * moments ago (ext4 without a journal, as on this project's machines, scans past them), thousands
 * of files made just after thousands were deleted cost the install seconds of kernel time that
 * curl's one file never pays (17 % of its CPU in a profile); the steps after are so measured with
 * no deletion of 16,000 files just before them either.
 */
export async function freshInstalls(
  bench: Bench,
  work: string,
  into: { game: string; state: string },
  rounds: number,
): Promise<{ installs: Run[]; curls: Run[]; ratios: number[] }> {
  const installs: Run[] = [];
  const curls: Run[] = [];
  const list = path.join(work, 'urls.txt');
  for (let round = 1; round <= rounds; round++) {
    const dirs = round === rounds ? into : { game: `${into.game}-${round}`, state: `${into.state}-${round}` };
    fs.mkdirSync(dirs.game, { recursive: true });
    installs.push(await run(process.execPath, [CLIENT, 'game', 'update', ...bench.options(dirs.state, dirs.game)]));
    if (round === 1) {
      const first = JSON.parse(fs.readFileSync(path.join(dirs.state, 'game/manifest.json'), 'utf8')) as {
        files: { chunks: [string, number][] }[];
      };
      const urls = first.files.flatMap((f) => f.chunks.map(([name]) => `${bench.server.url}/api/game/chunks/${name}`));
      fs.writeFileSync(list, urls.map((u) => `url = "${u}"\noutput = "/dev/stdout"\n`).join(''));
    }
    curls.push(await run('sh', ['-c', `curl -s -K ${list} > ${path.join(work, 'curl.bin')}`]));
    fs.rmSync(path.join(work, 'curl.bin'));
  }
  return { installs, curls, ratios: installs.map((install, i) => curls[i]!.ms / install.ms) };
}
