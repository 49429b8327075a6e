/*
 * How the addon list and search costs grow with the catalogue (in-process, one engine per run):
 *   ADDON_COUNTS=200,2000,20000 TEST_ENGINE=sqlite npx tsx bench/addons-growth.mts
 * For each size: the cold load after a content write, the warm rate (autocannon, 16 connections)
 * of a search miss, a search hit, the full list and a detail, the cost of a search term never seen
 * before (in-memory scan), and of the first list read after a download (counters reread).
 */
import autocannon from 'autocannon';
import { api, median } from './lib.js';
import { seedCatalogue } from './addons.js';
import { buildTestApp, type TestApp } from '../test/helpers/app.js';

const counts = (process.env.ADDON_COUNTS ?? '200,2000,20000').split(',').map(Number);
const duration = Number(process.env.DURATION ?? 3);

async function timed(url: string): Promise<{ ms: number; bytes: number }> {
  const start = performance.now();
  const res = await fetch(url);
  const bytes = (await res.arrayBuffer()).byteLength;
  if (!res.ok) throw new Error(`${url} → ${res.status}`);
  return { ms: performance.now() - start, bytes };
}

async function rate(url: string): Promise<string> {
  const r = await autocannon({ url, connections: 16, duration });
  return `${r.requests.average.toFixed(0)} req/s p99 ${r.latency.p99} ms`;
}

/** Median server time of `n` sequential in-process requests (no socket, no load client). */
async function serverTime(t: TestApp, url: string, n: number): Promise<string> {
  const times: number[] = [];
  for (let i = 0; i < n; i += 1) {
    const start = performance.now();
    const res = await t.inject({ url });
    times.push(performance.now() - start);
    if (res.statusCode !== 200) throw new Error(`${url} → ${res.statusCode}`);
  }
  return `${median(times).toFixed(3)} ms`;
}

const rows: string[] = [];
const times: string[] = [];
for (const count of counts) {
  const t = await buildTestApp();
  try {
    await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    const address = t.app.server.server.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    const target = {
      url,
      cookie: t.cookie,
      engine: t.testDb.config.kind,
      databaseUrl: t.testDb.config.kind === 'postgres' ? t.testDb.config.url : null,
      dataDir: t.dir,
    };
    const seedStart = performance.now();
    await seedCatalogue(target, count);
    const seedMs = performance.now() - seedStart;
    const miss = `${url}/api/addons?search=${encodeURIComponent('不存在的插件')}`;
    const hit = `${url}/api/addons?search=${encodeURIComponent('施法')}`;
    const list = `${url}/api/addons`;
    const detail = `${url}/api/addons/bench-addon-7`;
    const path = (full: string) => full.slice(url.length);
    const cold = await timed(miss); // builds the catalogue
    const coldList = await timed(list); // reads the counters and renders the list
    const hitBytes = (await timed(hit)).bytes;
    const inProcess = [
      await serverTime(t, path(miss), 500),
      await serverTime(t, path(hit), 200),
      await serverTime(t, path(list), count > 5000 ? 10 : 50),
      await serverTime(t, path(detail), 500),
    ];
    times.push(`| ${count} | ${inProcess.join(' | ')} |`);
    const missRate = await rate(miss);
    const hitRate = await rate(hit);
    const listRate = await rate(list);
    const detailRate = await rate(detail);
    // Terms never seen before: each scans the catalogue in memory once.
    const fresh: number[] = [];
    for (let i = 0; i < 50; i += 1) fresh.push((await timed(`${url}/api/addons?search=zz${i}`)).ms);
    // A counted download starts a new counter generation: the next read rereads the counters
    // (timed with a search miss: nothing to assemble), and the next list re-assembles its answer
    // (timed as the extra server time of that list read over a warm one).
    const release = (await api<{ releases: { id: string }[] }>(target, 'GET', '/api/addons/bench-addon-7')).releases[0];
    const download = () => fetch(`${url}/api/download/${release?.id ?? ''}`, { redirect: 'manual' });
    await download();
    const reread = await serverTime(t, path(miss), 1);
    const warmList = Number.parseFloat(await serverTime(t, path(list), 3));
    await download();
    const start = performance.now();
    await t.inject({ url: path(list) });
    const afterDownload = { ms: performance.now() - start - warmList };
    rows.push(
      `| ${count} | ${(seedMs / 1000).toFixed(1)} s | ${cold.ms.toFixed(0)} ms | ${coldList.ms.toFixed(0)} ms / ${(coldList.bytes / 1e6).toFixed(1)} MB | ${missRate} | ${hitRate} (${(hitBytes / 1e3).toFixed(0)} kB) | ${listRate} | ${detailRate} | ${(fresh.reduce((a, b) => a + b, 0) / fresh.length).toFixed(2)} ms | ${reread} | ${afterDownload.ms.toFixed(0)} ms |`,
    );
    console.log(rows[rows.length - 1]);
  } finally {
    await t.close();
  }
}
console.log(
  `\nengine ${process.env.TEST_ENGINE ?? 'sqlite'}, ${duration}s per rate, 16 connections, in-process (client and server share the CPU)`,
);
console.log(
  '| addons | seed | cold catalogue (first search) | first list | search miss | search hit | full list | detail | new search term | counters reread after a download | list re-assembly after a download |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const row of rows) console.log(row);
console.log('\nmedian server time per request (app.inject, sequential):');
console.log('| addons | search miss | search hit | full list | detail |');
console.log('|---|---|---|---|---|');
for (const row of times) console.log(row);
