import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { type BenchTarget, median, type Scenario, type ScenarioProvider } from './lib.js';

/*
 * npm run bench [-- --db postgres] [--duration 5] [--rounds 3] [--connections 32] [--only name]
 * Loads each scenario on the real service and on a bare node:http server (same body size) in turn,
 * `rounds` times, and prints medians and the ratio of the two rates.
 * --compare KEY=VALUE[,KEY=VALUE]: the other side is the service itself with those settings (e.g.
 * METRICS=off), on the same database and files, instead of the bare server.
 */
const { values: args } = parseArgs({
  options: {
    db: { type: 'string', default: 'sqlite' },
    duration: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '32' },
    only: { type: 'string' },
    compare: { type: 'string' },
  },
});
const engine = args.db === 'postgres' ? 'postgres' : 'sqlite';
process.env.TEST_ENGINE = engine;
const { createTestDatabase } = await import('../test/helpers/db.js');
const { startServer } = await import('../test/helpers/process.js');

const duration = Number(args.duration);
const rounds = Number(args.rounds);
const connections = Number(args.connections);

interface Measure {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

async function load(url: string, scenario: Scenario): Promise<Measure> {
  let n = 0;
  const result = await autocannon({
    url,
    connections,
    duration,
    method: scenario.method ?? 'GET',
    headers: scenario.headers ?? {},
    ...(scenario.body !== undefined ? { body: scenario.body } : {}),
    ...(scenario.makeBody
      ? {
          requests: [
            {
              setupRequest: (req: autocannon.Request) => ({ ...req, body: scenario.makeBody?.(n++) ?? '' }),
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

async function startBaseline(): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(import.meta.dirname, 'baseline.ts')], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      const match = /listening (\d+)/.exec(chunk.toString());
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`baseline exited ${code}`)));
  });
  return { url: `http://127.0.0.1:${port}`, child };
}

async function providers(): Promise<ScenarioProvider[]> {
  const skip = new Set(['lib.ts', 'run.ts', 'baseline.ts']);
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
  ...(database.config.kind === 'postgres' ? { DATABASE_URL: database.config.url } : {}),
};
let server = await startServer(serviceEnv);
const baseline = compareEnv ? await startServer({ ...serviceEnv, ...compareEnv }) : await startBaseline();

try {
  const login = await fetch(`${server.url}/api/admin/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password }),
  });
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const target: BenchTarget = {
    url: server.url,
    cookie,
    engine,
    databaseUrl: database.config.kind === 'postgres' ? database.config.url : null,
    dataDir,
  };
  const scenarios: Scenario[] = [];
  for (const provide of await providers()) scenarios.push(...(await provide(target)));
  const chosen = scenarios.filter((s) => args.only === undefined || s.name.includes(args.only));
  if (compareEnv) {
    // Seeding went through this process (its heap holds the caches it built): measure a fresh one,
    // so that both sides start alike.
    await server.stop('SIGTERM');
    server = await startServer(serviceEnv);
  }

  if (compareEnv) console.log(`"bare" columns: the service with ${args.compare}`);
  console.log(
    `engine ${engine}; ${connections} connections; ${duration}s × ${rounds} rounds each; node ${process.version}; ${os.cpus().length} cores`,
  );
  const rows: string[] = [];
  for (const scenario of chosen) {
    const sample = await fetch(server.url + scenario.path, {
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
    const service: Measure[] = [];
    const bare: Measure[] = [];
    const other = () =>
      compareEnv
        ? load(baseline.url + scenario.path, scenario)
        : load(`${baseline.url}/?bytes=${bytes}`, { ...scenario, path: '/' });
    for (let round = 0; round < rounds; round += 1) {
      // Each side goes first every other round, so that a drift in the machine's load favours neither.
      if (round % 2 === 0) bare.push(await other());
      service.push(await load(server.url + scenario.path, scenario));
      if (round % 2 === 1) bare.push(await other());
    }
    const rps = median(service.map((m) => m.rps));
    const bareRps = median(bare.map((m) => m.rps));
    const ratio = rps / bareRps;
    const aim =
      scenario.aim === undefined
        ? ''
        : ratio >= scenario.aim
          ? ` (aim ≥ ${scenario.aim.toFixed(2)}: met)`
          : ` (aim ≥ ${scenario.aim.toFixed(2)}: MISSED)`;
    rows.push(
      `| ${scenario.name} | ${bytes} | ${rps.toFixed(0)} | ${median(service.map((m) => m.p50))} | ${median(service.map((m) => m.p99))} | ${bareRps.toFixed(0)} | ${median(bare.map((m) => m.p99))} | ${ratio.toFixed(2)}${aim} | ${service.reduce((a, m) => a + m.errors, 0)} |`,
    );
    console.log(rows[rows.length - 1]);
  }
  console.log('\n| scenario | body bytes | req/s | p50 ms | p99 ms | bare req/s | bare p99 ms | ratio | errors |');
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
} finally {
  baseline.child.kill('SIGTERM');
  await server.stop('SIGTERM');
  await database.drop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
