/*
 * Heartbeats of a million-device fleet on PostgreSQL carried by one instance, then by two sharing the
 * database (issue 29: two instances carry twice as many):
 *   npx tsx bench/fleet-instances.mts [--devices 1000000] [--duration 15] [--rounds 3]
 * Seeds the fleet straight into a fresh PostgreSQL database, starts two instances of the built
 * service on it (instance i on core i), and in each round loads one instance alone, then both at
 * once, with one wrk per instance (bench/lua/heartbeat.lua, each on its own half of the fleet).
 * Prints medians of each setup's heartbeats per second, p99, and each instance's CPU time per
 * heartbeat: on a machine with a core per instance and a database elsewhere, capacity is cores
 * divided by that time. Here wrk and PostgreSQL share the same two cores, so the rate is capped by
 * the machine, and what two instances must show is the same CPU per heartbeat as one (no cost of
 * sharing the database), with every heartbeat counted.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { sql } from 'kysely';
import { openDatabase } from '../src/db/index.js';
import { seedDevices } from './device-seed.js';
import { median, runs, wrkInstalled } from './lib.js';

process.env.TEST_ENGINE = 'postgres';
const { createTestDatabase } = await import('../test/helpers/db.js');
const { startServer } = await import('../test/helpers/process.js');
const run = promisify(execFile);

const { values: args } = parseArgs({
  options: {
    devices: { type: 'string', default: '1000000' },
    duration: { type: 'string', default: '15' },
    rounds: { type: 'string', default: '3' },
  },
});
const devices = Number(args.devices);
const duration = Number(args.duration);
const rounds = Number(args.rounds);
if (!wrkInstalled()) throw new Error('wrk not found (apt-get install wrk)');
const cores = os.cpus().length;

await run(process.execPath, [path.join(import.meta.dirname, '../scripts/ensure-build.mjs')]);
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-fleet-'));
const database = await createTestDatabase(dataDir);
if (database.config.kind !== 'postgres') throw new Error('PostgreSQL only');
const databaseUrl = database.config.url;

/** CPU time (user + system, all threads) of process `pid` so far, ms. */
function cpuMs(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/**
 * CPU time of the local PostgreSQL server's processes so far, ms (this machine's: the bench's database
 * runs here, as in CI); null when none can be read.
 */
function postgresCpuMs(): number | null {
  let total = 0;
  let found = false;
  for (const pid of fs
    .readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number)) {
    if (!runs(pid, 'postgres')) continue;
    try {
      total += cpuMs(pid);
      found = true;
    } catch {
      // ended meanwhile
    }
  }
  return found ? total : null;
}

/** wrk's heartbeats per second and p99 (ms) against `url`, beating from device `offset` on. */
async function load(url: string, offset: number) {
  const { stdout } = await run(
    'wrk',
    ['-t1', '-c64', `-d${duration}s`, '--latency', '-s', path.join(import.meta.dirname, 'lua/heartbeat.lua'), url],
    { env: { ...process.env, DEVICES: String(devices), OFFSET: String(offset) } },
  );
  const p99 = /99%\s+([\d.]+)(us|ms|s)/.exec(stdout);
  const unit = { us: 0.001, ms: 1, s: 1000 }[(p99?.[2] ?? 'ms') as 'us' | 'ms' | 's'];
  const errors = /Non-2xx or 3xx responses: (\d+)/.exec(stdout);
  if (errors) throw new Error(`wrk: ${errors[1]} answers were not 2xx`);
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? 0), p99: Number(p99?.[1] ?? NaN) * unit };
}

try {
  const seeding = await openDatabase({ kind: 'postgres', url: databaseUrl });
  try {
    // Seen within 29 days: retention finds nothing to do while the load runs.
    await seedDevices(seeding.db, devices, Date.now(), { maxAgeDays: 29 });
  } finally {
    await seeding.close();
  }
  const env = {
    DATA_DIR: dataDir,
    DATABASE_URL: databaseUrl,
    ADMIN_PASSWORD: 'bench-password-1',
    DEVICES_PER_IP_HOUR: '0',
  };
  const instances = [await startServer(env, 60_000, [], 'build'), await startServer(env, 60_000, [], 'build')];
  try {
    for (const [i, instance] of instances.entries()) {
      await run('taskset', ['-a', '-pc', String(i % cores), String(instance.child.pid)]);
    }
    const reader = await openDatabase({ kind: 'postgres', url: databaseUrl });
    const beats = async () =>
      Number(
        (await sql<{ n: number }>`select coalesce(sum(heartbeat_count), 0) as n from devices`.execute(reader.db))
          .rows[0]?.n,
      );
    /** Waits until the heartbeats written stop growing (the last flushes): answers the count and when it last grew. */
    const settle = async (from: number) => {
      let counted = await beats();
      let settled = from;
      for (let stable = 0; stable < 3;) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        const now = await beats();
        stable = now === counted ? stable + 1 : 0;
        if (now !== counted) settled = performance.now();
        counted = now;
      }
      return { counted, lagS: (settled - from) / 1000 };
    };
    type Result = { rps: number; p99: number; cpuUs: number[]; postgresUs: number | null; lagS: number };
    const setups: Record<'one' | 'two', Result[]> = { one: [], two: [] };
    let sent = 0;
    const before = await beats();
    try {
      for (let round = 0; round < rounds; round += 1) {
        for (const [name, used] of [
          ['one', instances.slice(0, 1)],
          ['two', instances],
        ] as const) {
          const cpuBefore = used.map((s) => cpuMs(s.child.pid ?? 0));
          const postgresBefore = postgresCpuMs();
          const results = await Promise.all(
            used.map((s, i) => load(`${s.url}/api/launcher/heartbeat`, (i * devices) / used.length)),
          );
          const cpuUs = used.map(
            (s, i) => ((cpuMs(s.child.pid ?? 0) - (cpuBefore[i] ?? 0)) * 1000) / ((results[i]?.rps ?? 0) * duration),
          );
          const answered = results.reduce((a, r) => a + r.rps * duration, 0);
          sent += answered;
          // The database server's share: its CPU from the load's start to 2 s after its end (the
          // flushes' tail, unless they fell behind), per heartbeat answered.
          const stopped = performance.now();
          await new Promise((resolve) => setTimeout(resolve, 2000));
          const postgresAfter = postgresCpuMs();
          const { lagS } = await settle(stopped);
          setups[name].push({
            rps: results.reduce((a, r) => a + r.rps, 0),
            p99: Math.max(...results.map((r) => r.p99)),
            cpuUs,
            postgresUs:
              postgresBefore === null || postgresAfter === null
                ? null
                : ((postgresAfter - postgresBefore) * 1000) / answered,
            lagS,
          });
        }
      }
    } finally {
      // Every heartbeat answered is counted once written: wrk's rate times the duration is an estimate, the count is exact.
      const { counted } = await settle(performance.now());
      await reader.close();
      console.log(
        `PostgreSQL, ${devices} devices, ${duration} s × ${rounds} rounds, ${cores} cores (wrk and PostgreSQL share them)\n`,
      );
      console.log(
        '| instances | heartbeats/s | p99 ms | CPU µs per heartbeat, each instance | PostgreSQL CPU µs per heartbeat | last written after the load stopped, s |',
      );
      console.log('|---|---|---|---|---|---|');
      // Counted from 2 s after the load: 0 means the last heartbeats were written within the contract's 2 s.
      const lag = (s: number) => (s === 0 ? 'within 2' : s.toFixed(1));
      for (const [name, results] of Object.entries(setups)) {
        const perInstance = (results[0]?.cpuUs ?? []).map((_, i) => median(results.map((r) => r.cpuUs[i] ?? 0)));
        console.log(
          `| ${name} | ${median(results.map((r) => r.rps)).toFixed(0)} | ${median(results.map((r) => r.p99)).toFixed(1)} | ${perInstance.map((us) => us.toFixed(0)).join(', ')} | ${results.some((r) => r.postgresUs === null) ? 'n/a' : median(results.map((r) => r.postgresUs ?? 0)).toFixed(0)} | ${lag(Math.max(...results.map((r) => r.lagS)))} |`,
        );
      }
      console.log(
        `\nheartbeats counted in the database: ${counted - before} (wrk's rate × duration: ${sent.toFixed(0)})`,
      );
    }
  } finally {
    for (const [i, instance] of instances.entries()) {
      await instance.stop('SIGTERM');
      const problems = instance
        .output()
        .split('\n')
        .filter((line) => /"level":(40|50|60)/.test(line));
      if (problems.length > 0) console.log(`instance ${i}: ${problems.length} warnings/errors, first: ${problems[0]}`);
    }
  }
} finally {
  await database.drop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
