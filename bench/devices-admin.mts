/*
 * What the admin side and the background jobs cost at a large fleet (in-process, one engine per run):
 *   DEVICES=1000000 TEST_ENGINE=sqlite npx tsx bench/devices-admin.mts
 * Seeds DEVICES devices straight into a fresh database (bench/device-seed.ts), then runs each admin
 * read and background job a few times and prints its median wall time and the event loop's largest
 * delay while it ran (what every other request of the process waited at worst).
 */
import fs from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { sql } from 'kysely';
import { now, setClock } from '../src/domain/clock.js';
import { median } from './lib.js';
import { seedDevices } from './device-seed.js';
import { buildTestApp } from '../test/helpers/app.js';

const count = Number(process.env.DEVICES ?? 1_000_000);
const times = Number(process.env.TIMES ?? 3);
// SEEDED=/path/fleet.db (SQLite): seed once into that file and start later runs from a copy of it.
const seeded = process.env.SEEDED;
const t = await buildTestApp({ METRICS: 'on' });
const loop = monitorEventLoopDelay({ resolution: 1 });
loop.enable();
try {
  const seedStart = performance.now();
  const file = t.testDb.config.kind === 'sqlite' ? t.testDb.config.file : null;
  if (seeded !== undefined && file !== null && fs.existsSync(seeded)) {
    // The copy was seeded at another time: the service's clock runs from then.
    const seededAt = Number(fs.readFileSync(`${seeded}.at`, 'utf8'));
    const started = Date.now();
    setClock(() => seededAt + (Date.now() - started));
    await sql`attach database ${seeded} as seed`.execute(t.database.db);
    await sql`insert into devices select * from seed.devices`.execute(t.database.db);
    await sql`insert into device_versions select * from seed.device_versions`.execute(t.database.db);
    await sql`detach database seed`.execute(t.database.db);
  } else {
    await seedDevices(t.database.db, count, now());
    if (seeded !== undefined && file !== null) {
      await sql`vacuum into ${seeded}`.execute(t.database.db);
      fs.writeFileSync(`${seeded}.at`, String(now()));
    }
  }
  console.log(`seeded ${count} devices in ${((performance.now() - seedStart) / 1000).toFixed(1)} s`);
  // Let the engine settle (PostgreSQL: statistics for the planner, as autovacuum would gather them).
  if (t.testDb.config.kind === 'postgres') await sql`analyze`.execute(t.database.db);

  const ops: Array<[string, () => Promise<unknown>]> = [
    // What the loop's delay is on this machine when the process does nothing: the noise floor.
    ['idle 500 ms (noise floor)', () => new Promise((resolve) => setTimeout(resolve, 500))],
    [
      'GET /api/admin/devices/stats',
      () => t.inject({ url: '/api/admin/devices/stats', headers: { cookie: t.cookie } }),
    ],
    ['GET /metrics', () => t.inject({ url: '/metrics' })],
    [
      'GET /api/admin/devices (limit 100)',
      () => t.inject({ url: '/api/admin/devices', headers: { cookie: t.cookie } }),
    ],
    [
      'GET /api/admin/devices?limit=10000',
      () => t.inject({ url: '/api/admin/devices?limit=10000', headers: { cookie: t.cookie } }),
    ],
    [
      'GET /api/admin/devices?online=1&limit=10000',
      () => t.inject({ url: '/api/admin/devices?online=1&limit=10000', headers: { cookie: t.cookie } }),
    ],
    [
      'GET /api/admin/devices/online-history?hours=24',
      () => t.inject({ url: '/api/admin/devices/online-history?hours=24', headers: { cookie: t.cookie } }),
    ],
  ];
  let minute = 0;
  // Each run 5 minutes later than the last: the lease is this instance's, the sample slot new. The
  // first run has the backlog of a fleet that never ran retention; later ones what 5 minutes add.
  const housekeeping = () => t.app.ctx.housekeeping.run(now() + (minute += 5) * 60_000);
  ops.push(['housekeeping first run (retention backlog)', housekeeping]);
  ops.push(['housekeeping run (sample + retention)', housekeeping]);
  console.log('| operation | median ms | max ms | median loop max delay ms | max loop delay ms |');
  console.log('|---|---|---|---|---|');
  // ONLY=part[,part]: the operations whose names contain one of the parts.
  const only = process.env.ONLY?.split(',') ?? null;
  for (const [name, op] of ops.filter(([n]) => only === null || only.some((part) => n.includes(part)))) {
    const walls: number[] = [];
    const delays: number[] = [];
    for (let i = 0; i < (name.includes('first run') ? 1 : times); i += 1) {
      loop.reset();
      // A reset takes effect on the next tick: a block within this one would go unrecorded.
      await new Promise((resolve) => setTimeout(resolve, 5));
      const start = performance.now();
      await op();
      walls.push(performance.now() - start);
      // The histogram records a late tick once the loop gets to run it.
      await new Promise((resolve) => setTimeout(resolve, 20));
      delays.push(loop.max / 1e6);
    }
    console.log(
      `| ${name} | ${median(walls).toFixed(1)} | ${Math.max(...walls).toFixed(1)} | ${median(delays).toFixed(1)} | ${Math.max(...delays).toFixed(1)} |`,
    );
  }
} finally {
  loop.disable();
  await t.close();
}
