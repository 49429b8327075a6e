import autocannon from 'autocannon';
import { buildTestApp } from '../test/helpers/app.js';
import { seedCatalogue } from './addons.js';

const count = Number(process.env.N ?? 2000);
const t = await buildTestApp();
await t.app.server.listen({ port: 0, host: '127.0.0.1' });
const addr = t.app.server.server.address();
const url = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
const dbUrl = t.testDb.config.kind === 'postgres' ? t.testDb.config.url : null;
const t0 = Date.now();
await seedCatalogue({ url, cookie: t.cookie, engine: t.testDb.config.kind, databaseUrl: dbUrl, dataDir: t.dir }, count);
console.log(`seeded ${count} in ${Date.now() - t0} ms`);
const paths = (process.env.PATHS ?? '/healthz,/api/addons?search=%E4%B8%8D%E5%AD%98%E5%9C%A8,/api/addons?search=%E6%96%BD%E6%B3%95,/api/addons').split(',');
for (const p of paths) {
  const first = Date.now();
  const res = await fetch(url + p);
  const bytes = (await res.arrayBuffer()).byteLength;
  const cold = Date.now() - first;
  const r = await autocannon({ url: url + p, connections: 16, duration: Number(process.env.D ?? 3) });
  console.log(`${p} bytes=${bytes} cold=${cold}ms rps=${r.requests.average} p50=${r.latency.p50} p99=${r.latency.p99} non2xx=${r.non2xx}`);
}
await t.close();
