import path from 'node:path';
import { sql } from 'kysely';
import { openDatabase } from '../src/db/index.js';
import { seedDevices, seededDeviceId } from './device-seed.js';
import { median, type ScenarioProvider, wrkInstalled } from './lib.js';

/**
 * A fleet of BENCH_DEVICES launchers (default 1,000,000; 0 skips it) beating: the devices are seeded straight
 * into the service's database, then wrk (bench/lua/heartbeat.lua) beats for each of them in turn.
 * While the load runs, the admin device stats are read every 2 s: their latency is printed after
 * the second scenario (the loop columns show what the whole process waited at worst meanwhile); the
 * first measures the fleet alone.
 */
export const scenarios: ScenarioProvider = async (target) => {
  if (!wrkInstalled()) {
    console.warn('wrk not found: skipping the fleet scenario (apt-get install wrk)');
    return [];
  }
  const devices = Number(process.env.BENCH_DEVICES ?? 1_000_000);
  const name = `fleet heartbeat, ${devices} devices`;
  if (devices === 0 || !target.wanted(name)) return [];
  const started = performance.now();
  const database = await openDatabase(
    target.databaseUrl === null
      ? { kind: 'sqlite', file: path.join(target.dataDir, 'app.db') }
      : { kind: 'postgres', url: target.databaseUrl },
  );
  let bytes: number;
  try {
    // Seen within 29 days: the service's retention finds nothing to do while the load runs.
    await seedDevices(database.db, devices, Date.now(), { maxAgeDays: 29 });
    bytes =
      database.engine === 'postgres'
        ? Number(
            (await sql<{ size: number }>`select pg_database_size(current_database()) as size`.execute(database.db))
              .rows[0]?.size,
          )
        : await (async () => {
            // What the file holds once the log is moved into it (the service's checkpoint thread does it too).
            await sql`pragma wal_checkpoint(TRUNCATE)`.execute(database.db);
            const usage = database.usage();
            return usage.engine === 'sqlite' ? usage.fileBytes + usage.walBytes : 0;
          })();
  } finally {
    await database.close();
  }
  console.log(
    `fleet: seeded ${devices} devices in ${((performance.now() - started) / 1000).toFixed(0)} s; database ${(bytes / 2 ** 20).toFixed(0)} MiB`,
  );

  const statsWhileLoaded = () => {
    const times: number[] = [];
    let stopped = false;
    const poll = async () => {
      while (!stopped) {
        const start = performance.now();
        const res = await fetch(`${target.url}/api/admin/devices/stats`, { headers: { cookie: target.cookie } });
        await res.arrayBuffer();
        if (res.ok) times.push(performance.now() - start);
        await new Promise((resolve) => setTimeout(resolve, 2000));
      }
    };
    const polling = poll();
    return () => {
      stopped = true;
      void polling.then(() =>
        console.log(
          `fleet: GET /api/admin/devices/stats while loaded (${times.length} reads): median ${median(times).toFixed(0)} ms, max ${Math.max(0, ...times).toFixed(0)} ms`,
        ),
      );
    };
  };
  const beating = {
    method: 'POST' as const,
    path: '/api/launcher/heartbeat',
    headers: { 'content-type': 'application/json' },
    // What the run's first request sends (the size of the answer); wrk's script sends the rest.
    body: JSON.stringify({ deviceId: seededDeviceId(0), os: 'Windows', appVersion: '1.0.120' }),
    wrk: true,
    wrkScript: {
      path: path.join(import.meta.dirname, 'lua/heartbeat.lua'),
      env: { DEVICES: String(devices) },
    },
    connections: 64,
    // Against Fastify alone parsing the same JSON bodies and answering as much: the framework's own
    // ceiling, which the heartbeat route adds validation, recording and SQLite's writes to.
    baseline: { ...target.fastify, url: `${target.fastify.url}/?bytes=${JSON.stringify({ ok: true }).length}` },
  };
  // The fleet alone (the capacity), then with an admin's dashboard open (what its reads cost the
  // launchers: on SQLite they run on a thread of the service's process, on the same core with --pin).
  return [
    { name, ...beating },
    { name: `${name}, admin stats every 2 s`, ...beating, background: statsWhileLoaded },
  ];
};
