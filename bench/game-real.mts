/*
 * The game client shaped like a real one (issue 52: 2.2 GiB, 8,038 files: 5 MPQs, 30 DLLs, 8,000
 * small files, most under 64 KiB), as a player meets it:
 *   npm run build -w patchwell-client && npm run build -w patchwell-publish
 *   SCALE=1 ROUNDS=3 npx tsx bench/game-real.mts
 * SCALE (default 1) scales the bytes and the number of small files (SCALE=0.1: about 205 MiB, 800
 * small files). Starts the service (from its sources, SQLite, local store); makes build 1's client
 * folder (random bytes) and build 2's (the edits: in the largest MPQ three 1 MiB regions
 * rewritten and 1 MiB inserted, a new 20 MiB patch MPQ, a DLL removed, 20 small files rewritten);
 * publishes both with the built `launcher-publish game`. Then, with the built `launcher-client`:
 * - a fresh install of build 2 into an empty folder against `curl` fetching the same chunks into one
 *   file over one connection (ROUNDS rounds, each ratio in the same round, and their median);
 * - a quick `verify` of the installed folder (the whole command, Node's start included; ROUNDS runs);
 * - `verify --full` against `sha256sum` over the same files (ROUNDS rounds, ratios, median);
 * - adoption: build 1's folder copied as an unpacked old zip into a new folder, no state, then
 *   `game update` to build 2: its downloaded bytes beside those of an update from build 1 (the bytes
 *   of build 2's chunks build 1 lacks).
 * Each step prints its wall time, peak RSS and the load average (1 min) before and after it: on a
 * shared machine, compare the same-run ratios.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CLIENT, filesOf, freshInstalls, last, median, MiB, mib, put, run, type Run, startBench } from './game-lib.mjs';

const SCALE = Number(process.env.SCALE ?? 1);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const KiB = 1024;
const load = () => os.loadavg()[0]!.toFixed(1);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-game-real-'));
const bench = await startBench(work);

/** Runs `step` and prints its row with the load average before and after it. */
async function measured<T>(rows: string[], step: () => Promise<T>, row: (result: T) => string): Promise<T> {
  const before = load();
  const result = await step();
  rows.push(`${row(result)} load ${before}→${load()} |`);
  console.log(rows.at(-1));
  return result;
}
const times = (runs: readonly Run[]) => runs.map((r) => (r.ms / 1000).toFixed(2)).join(', ');
const ratiosOf = (ratios: readonly number[]) =>
  `${ratios.map((r) => r.toFixed(2)).join(', ')}: median **${median([...ratios]).toFixed(2)}×**`;
const peak = (runs: readonly Run[]) => `${Math.max(...runs.map((r) => r.peakMiB)).toFixed(0)} MiB`;

interface Manifest {
  files: { path: string; size: number; chunks: [string, number][] }[];
}

try {
  // Build 1: the operator's old client.
  const old = path.join(work, 'client-1');
  const small = Math.max(50, Math.round(8000 * SCALE));
  const smallSizes = Array.from({ length: small }, (_, i) =>
    i % 50 === 0 ? 200 * KiB : 1 * KiB + ((i * 7919) % (60 * KiB)),
  );
  const smallBytes = smallSizes.reduce((n, s) => n + s, 0);
  const exeBytes = Math.max(1, Math.round(8 * SCALE)) * MiB;
  const dllBytes = 30 * 512 * KiB;
  const mpqBytes = Math.max(5 * MiB, Math.round(2048 * SCALE * MiB) - smallBytes - exeBytes - dllBytes);
  const shares = { 'Data/common.MPQ': 0.45, 'Data/common-2.MPQ': 0.25, 'Data/patch.MPQ': 0.15, 'Data/speech.MPQ': 0.1 };
  for (const [file, share] of Object.entries(shares)) put(old, file, randomBytes(Math.floor(mpqBytes * share)));
  put(
    old,
    'Data/patch-2.MPQ',
    randomBytes(mpqBytes - Object.values(shares).reduce((n, s) => n + Math.floor(mpqBytes * s), 0)),
  );
  put(old, 'WoW.exe', randomBytes(exeBytes));
  fs.chmodSync(path.join(old, 'WoW.exe'), 0o755);
  for (let i = 0; i < 30; i++) put(old, `dll${i}.dll`, randomBytes(512 * KiB));
  for (const [i, size] of smallSizes.entries())
    put(old, `Data/Glue/d${Math.floor(i / 200)}/f${i}.blp`, randomBytes(size));
  put(old, 'realmlist.wtf', Buffer.from('set realmlist logon.example.org\n'));
  put(old, 'WTF/Config.wtf', Buffer.from('SET gxResolution "1920x1080"\n'));
  const oldFiles = filesOf(old);
  const oldBytes = oldFiles.reduce((sum, f) => sum + fs.statSync(path.join(old, f)).size, 0);

  // Build 2: the edits.
  const client = path.join(work, 'client-2');
  fs.cpSync(old, client, { recursive: true });
  const common = path.join(client, 'Data/common.MPQ');
  const bytes = fs.readFileSync(common);
  for (const share of [0.2, 0.5, 0.8]) randomBytes(MiB).copy(bytes, Math.floor((bytes.length * share) / MiB) * MiB);
  const at = Math.floor(bytes.length * 0.35) + 4321;
  fs.writeFileSync(common, Buffer.concat([bytes.subarray(0, at), randomBytes(MiB), bytes.subarray(at)]));
  put(client, 'Data/patch-3.MPQ', randomBytes(20 * MiB));
  fs.rmSync(path.join(client, 'dll29.dll'));
  for (let i = 0; i < 20; i++) {
    const file = `Data/Glue/d${Math.floor((i * 37) / 200)}/f${i * 37}.blp`;
    if (fs.existsSync(path.join(client, file))) put(client, file, randomBytes(smallSizes[i * 37]!));
  }

  const rows: string[] = [];
  console.log(
    `Game client shaped like issue 52's, SCALE=${SCALE}: build 1 ${mib(oldBytes)}, ${oldFiles.length} files; ${os.cpus().length} cores, ${ROUNDS} rounds`,
  );
  for (const [dir, version, code] of [
    [old, '1.0', 1],
    [client, '1.1', 2],
  ] as const) {
    await measured(
      rows,
      () => bench.publish(dir, version, code),
      (r) =>
        `| publish build ${code} | ${(r.ms / 1000).toFixed(1)} s | uploaded ${mib(Number(last(r).uploadedBytes))} | peak ${peak([r])} |`,
    );
  }

  const game = path.join(work, 'game');
  const state = path.join(work, 'state');
  const command = (verb: string, ...more: string[]) => [CLIENT, 'game', verb, ...more, ...bench.options(state, game)];
  await measured(
    rows,
    () => freshInstalls(bench, work, { game, state }, ROUNDS),
    ({ installs, curls, ratios }) =>
      `| fresh install of build 2 | ${times(installs)} s | curl ${times(curls)} s | ${ratiosOf(ratios)} curl | peak ${installs.map((r) => r.peakMiB.toFixed(0)).join(', ')} MiB |`,
  );
  const manifest = JSON.parse(fs.readFileSync(path.join(state, 'game/manifest.json'), 'utf8')) as Manifest;

  await measured(
    rows,
    async () => {
      const runs: Run[] = [];
      for (let round = 0; round < ROUNDS; round++) runs.push(await run(process.execPath, command('verify')));
      return runs;
    },
    (runs) =>
      `| quick verify of ${manifest.files.length} files (Node's start included) | ${times(runs)} s | median ${(median(runs.map((r) => r.ms)) / 1000).toFixed(2)} s | ok ${String(last(runs[0]!).ok)} | peak ${peak(runs)} |`,
  );

  await measured(
    rows,
    async () => {
      const fulls: Run[] = [];
      const sums: Run[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        fulls.push(await run(process.execPath, command('verify', '--full')));
        sums.push(
          await run(
            'sha256sum',
            manifest.files.map((f) => path.join(game, f.path)),
          ),
        );
      }
      return { fulls, sums };
    },
    ({ fulls, sums }) =>
      `| verify --full | ${times(fulls)} s | sha256sum ${times(sums)} s | ${ratiosOf(fulls.map((f, i) => sums[i]!.ms / f.ms))} sha256sum | peak ${peak(fulls)} |`,
  );

  // Adoption: build 1 unpacked by hand (no state), then the first install of build 2 over it.
  const build1 = (await (await fetch(`${bench.server.url}/api/game/builds/1/manifest`)).json()) as Manifest;
  const had = new Set(build1.files.flatMap((f) => f.chunks.map(([name]) => name)));
  const needed = new Map(manifest.files.flatMap((f) => f.chunks).filter(([name]) => !had.has(name)));
  const updateBytes = [...needed.values()].reduce((n, s) => n + s, 0);
  const adopted = path.join(work, 'adopted');
  const adoptedState = path.join(work, 'adopted-state');
  fs.cpSync(old, adopted, { recursive: true });
  await measured(
    rows,
    () => run(process.execPath, [CLIENT, 'game', 'update', ...bench.options(adoptedState, adopted)]),
    (r) =>
      `| first install over build 1's unpacked files (no state) | ${(r.ms / 1000).toFixed(1)} s | downloaded ${mib(Number(last(r).downloadedBytes))}, reused ${mib(Number(last(r).reusedBytes))} | an update from build 1 downloads ${mib(updateBytes)}: ${(Number(last(r).downloadedBytes) / updateBytes).toFixed(2)}× | peak ${peak([r])} |`,
  );
  const full = await run(process.execPath, [
    CLIENT,
    'game',
    'verify',
    '--full',
    ...bench.options(adoptedState, adopted),
  ]);
  console.log(`adopted folder verify --full: ok ${String(last(full).ok)}`);
} finally {
  await bench.server.stop();
  fs.rmSync(work, { recursive: true, force: true });
}
