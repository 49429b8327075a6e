// First: on a Node that package.json's engines exclude, one line and exit 1 before anything loads.
import '../scripts/node-version.mjs';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import autocannon from 'autocannon';
import { highWaterKb } from '../src/modules/deltas/zstd.js';
import { type Baseline, type BenchRun, type LoopDelay, median, type Scenario, type ScenarioProvider } from './lib.js';

/*
 * npm run bench [-- --db postgres] [--duration 5] [--rounds 3] [--connections 32] [--only name[,name…]] [--delta-gb]
 * Loads each scenario on the real service and on its baseline (by default a bare node:http server
 * answering the same number of bytes) in turn, `rounds` times, and prints medians, the ratio of the
 * two rates and the p99 of each server's event-loop delay while it was loaded. A second baseline,
 * Fastify alone answering the same bytes, shows how much of a ratio the framework itself takes.
 * --compare KEY=VALUE[,KEY=VALUE]: the default baseline is the service itself with those settings
 * (e.g. METRICS=off), on the same database and files, instead of the bare server.
 * --delta-gb: the delta scenarios also make a 1 GB delta, and measure the hot paths while the service makes one.
 * --pin: every loaded process (the service, its baselines) runs on the first core and this runner, with
 * wrk and autocannon, on the last one, so that "per core" figures mean one core (Linux: taskset).
 */
const { values: args } = parseArgs({
  options: {
    db: { type: 'string', default: 'sqlite' },
    duration: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '32' },
    only: { type: 'string' },
    compare: { type: 'string' },
    'delta-gb': { type: 'boolean', default: false },
    pin: { type: 'boolean', default: false },
  },
});
if (args['delta-gb']) process.env.BENCH_DELTA_GB = '1';
const engine = args.db === 'postgres' ? 'postgres' : 'sqlite';
process.env.TEST_ENGINE = engine;
const { createTestDatabase } = await import('../test/helpers/db.js');
const { loginCookie, startServer } = await import('../test/helpers/process.js');

const duration = Number(args.duration);
const rounds = Number(args.rounds);
const connections = Number(args.connections);

interface Measure {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** p99 of the loaded process's event-loop delay, ms (null: not a Node process). */
  loopP99: number | null;
  /** The largest event-loop delay of the loaded process in the window, ms (null: not a Node process). */
  loopMax: number | null;
  /**
   * CPU time the loaded process spent per answered request, µs (null: not a Node process). Steadier
   * than req/s on a shared machine: other load slows a process down but hardly changes its work.
   */
  cpuUs: number | null;
}

type Load = Omit<Measure, 'loopP99' | 'loopMax' | 'cpuUs'>;

const PROBE = path.join(import.meta.dirname, 'loop-probe.mjs');

/** Asks the loop probe of `child` (bench/loop-probe.mjs) for something and waits for its answer. */
function probe(child: ChildProcess, message: 'loop:reset' | 'loop:read'): Promise<LoopDelay | null> {
  if (message === 'loop:reset') {
    child.send(message);
    return Promise.resolve(null);
  }
  return new Promise((resolve) => {
    child.once('message', (delay) => resolve(delay as LoopDelay));
    child.send(message);
  });
}

async function measure(url: string, scenario: Scenario, child: ChildProcess | null): Promise<Measure> {
  if (child) await probe(child, 'loop:reset');
  const result = scenario.wrk ? await loadWithWrk(url, scenario) : await loadWithAutocannon(url, scenario);
  const delay = child ? await probe(child, 'loop:read') : null;
  return {
    ...result,
    loopP99: delay?.p99Ms ?? null,
    loopMax: delay?.maxMs ?? null,
    cpuUs: delay && result.rps > 0 ? (delay.cpuMs * 1000) / (result.rps * duration) : null,
  };
}

/** wrk's duration in ms of a latency line (`50%  1.23ms`). */
function wrkMs(out: string, percentile: string): number {
  const match = new RegExp(`${percentile}%\\s+([\\d.]+)(us|ms|s)`).exec(out);
  if (!match) return NaN;
  const factor = { us: 0.001, ms: 1, s: 1000 }[match[2] as 'us' | 'ms' | 's'];
  return Number(match[1]) * factor;
}

async function loadWithWrk(url: string, scenario: Scenario): Promise<Load> {
  const script = scenario.wrkScript;
  const { stdout } = await promisify(execFile)(
    'wrk',
    [
      '-t1',
      `-c${scenario.connections ?? connections}`,
      `-d${duration}s`,
      '--latency',
      // A 100 MiB body to each of 32 connections takes seconds: wrk's 2 s default would cut it off.
      '--timeout',
      '60s',
      ...Object.entries(scenario.headers ?? {}).flatMap(([k, v]) => ['-H', `${k}: ${v}`]),
      ...(script ? ['-s', script.path] : []),
      url,
    ],
    { env: { ...process.env, ...script?.env } },
  );
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? 0),
    p50: wrkMs(stdout, '50'),
    p99: wrkMs(stdout, '99'),
    errors:
      Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0) +
      (socketErrors ? socketErrors.slice(1).reduce((a, n) => a + Number(n), 0) : 0),
  };
}

async function loadWithAutocannon(url: string, scenario: Scenario): Promise<Load> {
  let n = 0;
  const result = await autocannon({
    url,
    connections: scenario.connections ?? connections,
    duration,
    method: scenario.method ?? 'GET',
    headers: scenario.headers ?? {},
    ...(scenario.body !== undefined ? { body: scenario.body } : {}),
    ...(scenario.makeBody || scenario.makePath
      ? {
          requests: [
            {
              setupRequest: (req: autocannon.Request) => {
                const i = n++;
                return {
                  ...req,
                  ...(scenario.makeBody ? { body: scenario.makeBody(i) } : {}),
                  ...(scenario.makePath ? { path: scenario.makePath(i) } : {}),
                };
              },
            },
          ],
        }
      : {}),
  });
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.non2xx,
  };
}

/** The bare baseline (bench/baseline.mjs), or with `BASELINE: 'fastify'` in `env` the Fastify-alone one. */
async function startBaseline(
  fileRoot: string,
  env: Record<string, string> = {},
): Promise<{ url: string; child: ChildProcess }> {
  const script = path.join(import.meta.dirname, 'baseline.mjs');
  const child = spawn(process.execPath, ['--import', PROBE, script], {
    env: { ...process.env, FILE_ROOT: fileRoot, ...env },
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      const match = /listening (\d+)/.exec(chunk.toString());
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`baseline exited ${code}`)));
  });
  return { url: `http://127.0.0.1:${port}`, child: await pinned(child) };
}

async function providers(): Promise<ScenarioProvider[]> {
  const skip = new Set(['lib.ts', 'run.ts']);
  const files = fs
    .readdirSync(import.meta.dirname)
    .filter((f) => f.endsWith('.ts') && !skip.has(f))
    .sort();
  const found: ScenarioProvider[] = [];
  for (const file of files) {
    const mod = (await import(path.join(import.meta.dirname, file))) as { scenarios?: ScenarioProvider };
    if (mod.scenarios) found.push(mod.scenarios);
  }
  return found;
}

/** With --pin, moves every thread of `child` to the first core (the runner keeps the last one). */
async function pinned<T extends { pid?: number | undefined }>(child: T): Promise<T> {
  if (args.pin && child.pid !== undefined) await promisify(execFile)('taskset', ['-a', '-pc', '0', String(child.pid)]);
  return child;
}
if (args.pin) await promisify(execFile)('taskset', ['-a', '-pc', String(os.cpus().length - 1), String(process.pid)]);

// What operators run: the built service under plain node (`npm start`), built now if its sources changed.
await promisify(execFile)(process.execPath, [path.join(import.meta.dirname, '../scripts/ensure-build.mjs')]);
const startService = async (env: Record<string, string>, nodeArgs: readonly string[] = []) => {
  const started = await startServer(env, 30_000, ['--import', PROBE, ...nodeArgs], 'build');
  await pinned(started.child);
  return started;
};

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-bench-'));
const database = await createTestDatabase(dataDir);
const password = 'bench-password-1';
const compareEnv =
  args.compare === undefined ? null : Object.fromEntries(args.compare.split(',').map((kv) => kv.split('=', 2)));
const serviceEnv = {
  DATA_DIR: dataDir,
  ADMIN_PASSWORD: password,
  // What operators run: the default level.
  LOG_LEVEL: 'info',
  LOGIN_RATE_LIMIT: '1000',
  // The heartbeat scenario beats for 20,000 devices from one address.
  DEVICES_PER_IP_HOUR: '0',
  // Seeding the fleet scenario leaves this runner's keep-alive connections idle for about the default
  // 60 s: the request reusing one as the service closed it was reset (ECONNRESET, 2 runs in 4).
  IDLE_TIMEOUT_MS: '600000',
  ...(database.config.kind === 'postgres' ? { DATABASE_URL: database.config.url } : {}),
};
let server = await startService(serviceEnv);
const uploads = path.join(dataDir, 'uploads');
const baseline = await startBaseline(uploads);
const fastifyAlone = await startBaseline(uploads, { BASELINE: 'fastify' });
const cleanups: Array<() => Promise<unknown>> = [];
const compared = compareEnv ? await startService({ ...serviceEnv, ...compareEnv }) : null;

// --only a,b: the scenarios whose names contain any of the comma-separated parts.
const only = args.only?.split(',') ?? null;
const isWanted = (name: string) => only === null || only.some((part) => name.includes(part));

try {
  const cookie = await loginCookie(server.url, password);
  const target: BenchRun = {
    url: server.url,
    cookie,
    engine,
    databaseUrl: database.config.kind === 'postgres' ? database.config.url : null,
    dataDir,
    bare: { name: 'bare node', url: baseline.url, process: baseline.child },
    fastify: { name: 'Fastify alone', url: fastifyAlone.url, process: fastifyAlone.child },
    async startService(env, nodeArgs) {
      const other = await startService({ ...serviceEnv, ...env }, nodeArgs);
      cleanups.push(() => other.stop('SIGTERM'));
      return other;
    },
    cleanup: (stop) => cleanups.push(stop),
    wanted: isWanted,
  };
  const scenarios: Scenario[] = [];
  for (const provide of await providers()) scenarios.push(...(await provide(target)));
  const chosen = scenarios.filter((s) => isWanted(s.name));
  if (compared) {
    // Seeding went through this process (its heap holds what it built): measure a fresh one, so that
    // both sides start alike.
    await server.stop('SIGTERM');
    server = await startService(serviceEnv);
    console.log(`"base" columns: the service with ${args.compare}`);
  }
  console.log(
    `engine ${engine}; ${connections} connections unless named; ${duration}s × ${rounds} rounds each; node ${process.version}; ${os.cpus().length} cores${args.pin ? '; loaded processes pinned to core 0, load from the last core' : ''}`,
  );
  const header =
    '| scenario | conns | body bytes | req/s | p50 ms | p99 ms | loop p99 ms | loop max ms | CPU µs/req | baseline | base req/s | base p99 ms | base loop p99 ms | base loop max ms | base CPU µs/req | ratio | errors |';
  const rows: string[] = [];
  const comparisons: string[] = [];
  for (const scenario of chosen) {
    const url = scenario.url ?? server.url + scenario.path;
    const sample = await fetch(url, {
      method: scenario.method ?? 'GET',
      headers: scenario.headers ?? {},
      ...(scenario.makeBody
        ? { body: scenario.makeBody(0) }
        : scenario.body !== undefined
          ? { body: scenario.body }
          : {}),
    });
    const bytes = (await sample.arrayBuffer()).byteLength;
    if (!sample.ok) throw new Error(`${scenario.name}: ${sample.status}`);
    const base: Baseline =
      scenario.baseline ??
      (compared
        ? { name: `service with ${args.compare}`, url: compared.url + scenario.path, process: compared.child }
        : { ...target.bare, url: `${baseline.url}/?bytes=${bytes}` });
    const service: Measure[] = [];
    const bare: Measure[] = [];
    // The scenario compared against runs in the same rounds, interleaved, so both see the same machine.
    const other = scenarios.find((s) => s.name === scenario.against?.name);
    const others: Measure[] = [];
    const busy: Measure[] = [];
    const stopBackground = scenario.background?.();
    for (let round = 0; round < rounds; round += 1) {
      bare.push(await measure(base.url, scenario, base.process));
      service.push(await measure(url, scenario, scenario.process === undefined ? server.child : scenario.process));
      if (other) others.push(await measure(server.url + other.path, other, server.child));
      if (scenario.during) {
        const finished = await scenario.during.start();
        busy.push(await measure(url, scenario, scenario.process === undefined ? server.child : scenario.process));
        await finished();
      }
    }
    stopBackground?.();
    if (scenario.during) {
      const quiet = median(service.map((m) => m.rps));
      const loaded = median(busy.map((m) => m.rps));
      const met = loaded / quiet >= 0.95 ? 'met' : 'MISSED';
      comparisons.push(
        `${scenario.name} while ${scenario.during.label} / without (same rounds, medians): ${loaded.toFixed(0)} / ${quiet.toFixed(0)} req/s = ${(loaded / quiet).toFixed(3)}; p99 ${median(busy.map((m) => m.p99)).toFixed(1)} / ${median(service.map((m) => m.p99)).toFixed(1)} ms (aim ≥ 0.95: ${met})`,
      );
    }
    const rps = median(service.map((m) => m.rps));
    const bareRps = median(bare.map((m) => m.rps));
    if (scenario.against && other) {
      const otherRps = median(others.map((m) => m.rps));
      const against = rps / otherRps;
      const met = against >= scenario.against.aim ? 'met' : 'MISSED';
      comparisons.push(
        `${scenario.name} vs ${other.name} (same rounds, medians): ${rps.toFixed(0)} / ${otherRps.toFixed(0)} req/s = ${against.toFixed(3)} (aim ≥ ${scenario.against.aim}: ${met})`,
      );
    }
    const ratio = rps / bareRps;
    const aim =
      scenario.aim === undefined
        ? ''
        : ratio >= scenario.aim
          ? ` (aim ≥ ${scenario.aim.toFixed(2)}: met)`
          : ` (aim ≥ ${scenario.aim.toFixed(2)}: MISSED)`;
    const loop = (ms: Measure[]) => (ms[0]?.loopP99 === null ? '–' : median(ms.map((m) => m.loopP99 ?? 0)).toFixed(1));
    const loopMax = (ms: Measure[]) =>
      ms[0]?.loopMax === null ? '–' : median(ms.map((m) => m.loopMax ?? 0)).toFixed(1);
    const cpu = (ms: Measure[]) => (ms[0]?.cpuUs === null ? '–' : median(ms.map((m) => m.cpuUs ?? 0)).toFixed(0));
    const ms = (values: number[]) => median(values).toFixed(1);
    rows.push(
      `| ${scenario.name} | ${scenario.connections ?? connections} | ${bytes} | ${rps.toFixed(0)} | ${ms(service.map((m) => m.p50))} | ${ms(service.map((m) => m.p99))} | ${loop(service)} | ${loopMax(service)} | ${cpu(service)} | ${base.name} | ${bareRps.toFixed(0)} | ${ms(bare.map((m) => m.p99))} | ${loop(bare)} | ${loopMax(bare)} | ${cpu(bare)} | ${ratio.toFixed(2)}${aim} | ${service.reduce((a, m) => a + m.errors, 0)} |`,
    );
    console.log(rows[rows.length - 1]);
  }
  // Peak resident memory of the service over the whole run (Linux: VmHWM).
  const peakKb = highWaterKb(server.child.pid ?? 0);
  if (peakKb > 0) console.log(`\nservice peak RSS: ${(peakKb / 1024).toFixed(0)} MiB`);
  console.log(`\n${header}`);
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
  if (comparisons.length > 0) console.log(`\n${comparisons.join('\n')}`);
} catch (err) {
  // What the service logged says why it answered an error (its log is written asynchronously).
  await new Promise((resolve) => setTimeout(resolve, 500));
  const { exitCode, signalCode } = server.child;
  console.error(
    `service exit: ${exitCode ?? signalCode ?? 'running'}; log (last 4000 characters):\n${server.output().slice(-4000)}`,
  );
  throw err;
} finally {
  while (cleanups.length > 0) await cleanups.pop()?.();
  baseline.child.kill('SIGTERM');
  fastifyAlone.child.kill('SIGTERM');
  await compared?.stop('SIGTERM');
  await server.stop('SIGTERM');
  await database.drop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
