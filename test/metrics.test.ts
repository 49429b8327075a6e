import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/index.js';
import { requestLog } from '../src/http/request-log.js';
import { Registry } from 'prom-client';
import { RouteTally } from '../src/metrics/route-tally.js';
import { LocalStorage } from '../src/storage/local.js';
import { buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';
import { createTestDatabase, ENGINE } from './helpers/db.js';
import { parsePrometheus, type Scrape, valueOf as value } from './helpers/prometheus.js';

/** Scrapes `/metrics` the way Prometheus does and parses the text. */
async function scrape(t: TestApp, headers: Record<string, string> = {}): Promise<Scrape> {
  const res = await t.inject({ url: '/metrics', headers });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheus(res.body);
}

describe('GET /metrics', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('counts requests by route pattern and status, with latency, never by raw URL', async () => {
    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器' });
    const before = await scrape(t);
    const file = await upload(t, 'setup.exe', 'x'.repeat(5000));
    const version = await createVersion(t, pkg.id, { version: '1.0', versionCode: 100, filePath: file.filePath });
    for (const url of ['/nope/1', '/nope/2?x=1', `/api/software/download/${version.id}`]) await t.inject({ url });
    await t.inject({ url: `/api/software/download/${version.id}`, headers: { range: 'bytes=10-19' } });

    const after = await scrape(t);
    const route = '/api/software/download/:versionId';
    expect(value(after, 'http_requests_total', { route, status: '200', method: 'GET' })).toBe(1);
    expect(value(after, 'http_requests_total', { route, status: '206', method: 'GET' })).toBe(1);
    expect(value(after, 'http_requests_total', { route: 'unmatched', status: '404' })).toBe(2);
    const routes = after.samples.filter((s) => s.name === 'http_requests_total').map((s) => s.labels.route ?? '');
    expect(routes.filter((r) => r.includes('nope') || r.includes(version.id))).toEqual([]);
    const labels = { route, method: 'GET' };
    expect(after.types.get('http_request_duration_seconds')).toBe('histogram');
    expect(value(after, 'http_request_duration_seconds_count', labels)).toBe(2);
    expect(value(after, 'http_request_duration_seconds_sum', labels)).toBeGreaterThan(0);
    expect(value(after, 'http_request_duration_seconds_bucket', { ...labels, le: '+Inf' })).toBe(2);

    // One counted download (the range resumes), and the bytes of both answers.
    expect(
      value(after, 'downloads_total', { kind: 'installer' }) - value(before, 'downloads_total', { kind: 'installer' }),
    ).toBe(1);
    expect(value(after, 'served_bytes_total', { kind: 'software' })).toBe(5000 + 10);
    expect(value(after, 'upload_bytes_total') - value(before, 'upload_bytes_total')).toBe(5000);
  });

  it('counts heartbeats, their flushes and the devices online', async () => {
    const before = await scrape(t);
    for (const deviceId of ['m-1', 'm-2', 'm-1']) {
      const res = await t.inject({ method: 'POST', url: '/api/launcher/heartbeat', payload: { deviceId } });
      expect(res.statusCode).toBe(200);
    }
    await t.app.ctx.devices.flush();
    const after = await scrape(t);
    expect(value(after, 'heartbeats_accepted_total') - value(before, 'heartbeats_accepted_total')).toBe(3);
    const delta = (name: string) => value(after, name) - value(before, name);
    expect(delta('heartbeat_flush_devices_count')).toBeGreaterThan(0);
    // Two devices, written in one flush or (when the timer fell between the beats) a few.
    expect(delta('heartbeat_flush_devices_sum')).toBeGreaterThanOrEqual(2);
    expect(delta('heartbeat_flush_devices_sum')).toBeLessThanOrEqual(3);
    expect(delta('heartbeat_flush_seconds_count')).toBe(delta('heartbeat_flush_devices_count'));
    expect(value(after, 'devices_online')).toBe(2);
  });

  it('counts cache hits and misses per cache', async () => {
    const url = '/api/software/check-update?slug=app-launcher&versionCode=1';
    const before = await scrape(t);
    await t.inject({ url });
    await t.inject({ url });
    const after = await scrape(t);
    const delta = (result: string) =>
      value(after, 'content_cache_lookups_total', { cache: 'software', result }) -
      value(before, 'content_cache_lookups_total', { cache: 'software', result });
    expect(delta('hit') + delta('miss')).toBeGreaterThanOrEqual(2);
    expect(delta('hit')).toBeGreaterThanOrEqual(1);
  });

  it('shows database use and process metrics', async () => {
    const families = await scrape(t);
    if (ENGINE === 'postgres') {
      expect(value(families, 'db_pool_connections', { state: 'total' })).toBeGreaterThan(0);
      expect(families.samples.some((x) => x.name === 'db_pool_connections' && x.labels.state === 'waiting')).toBe(true);
    } else {
      expect(value(families, 'sqlite_file_bytes', { file: 'database' })).toBeGreaterThan(0);
      expect(families.samples.some((x) => x.name === 'sqlite_file_bytes' && x.labels.file === 'wal')).toBe(true);
    }
    expect(value(families, 'process_resident_memory_bytes')).toBeGreaterThan(0);
    expect(families.types.get('nodejs_eventloop_lag_seconds')).toBe('gauge');
  });
});

describe('METRICS_TOKEN and METRICS=off', () => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    while (apps.length > 0) await apps.pop()?.close();
  });

  it('asks for the bearer token when one is set', async () => {
    const t = await buildTestApp({ METRICS_TOKEN: 'scrape-token-0123456789' });
    apps.push(t);
    for (const headers of [
      {},
      { authorization: 'Bearer wrong-token-0123456789' },
      { authorization: 'scrape-token-0123456789' },
    ]) {
      const res = await t.inject({ url: '/metrics', headers });
      expect(res.statusCode).toBe(401);
      expect(res.json()).toEqual({ error: expect.stringMatching(/METRICS_TOKEN/) });
    }
    const families = await scrape(t, { authorization: 'Bearer scrape-token-0123456789' });
    expect(families.types.get('http_requests_total')).toBe('counter');
  });

  it('METRICS=off serves everything but /metrics', async () => {
    const t = await buildTestApp({ METRICS: 'off' });
    apps.push(t);
    expect((await t.inject({ url: '/metrics' })).statusCode).toBe(404);
    expect((await t.inject({ url: '/api/software' })).statusCode).toBe(200);
    const beat = await t.inject({ method: 'POST', url: '/api/launcher/heartbeat', payload: { deviceId: 'off-1' } });
    expect(beat.statusCode).toBe(200);
  });
});

describe('X-Request-Id', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('is generated for every answer, 404s and errors included', async () => {
    const ids = new Set<string>();
    for (const req of [
      { url: '/api/software' },
      { url: '/no-such-route' },
      { url: '/api/software/check-update?slug=app-launcher&versionCode=x' },
      { url: '/api/admin/me' },
    ]) {
      const res = await t.inject(req);
      expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      ids.add(String(res.headers['x-request-id']));
    }
    expect(ids.size).toBe(4);
  });

  it('keeps a sane id the client sent and replaces anything else', async () => {
    const sent = (id: string) => t.inject({ url: '/api/software', headers: { 'x-request-id': id } });
    expect((await sent('lb-7f3a.42:1')).headers['x-request-id']).toBe('lb-7f3a.42:1');
    for (const bad of ['a'.repeat(129), 'has space', 'semi;colon', '<script>']) {
      const res = await sent(bad);
      expect(res.headers['x-request-id']).not.toBe(bad);
      expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    }
  });
});

describe('request logs', () => {
  it('carry the request id, and a server error is logged once with it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-log-'));
    const testDb = await createTestDatabase(dir);
    const database = await openDatabase(testDb.config);
    const lines: Array<Record<string, unknown>> = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk
          .toString()
          .split('\n')
          .filter((l) => l !== ''))
          lines.push(JSON.parse(line));
        done();
      },
    });
    const config = loadConfig({ DATA_DIR: dir, ADMIN_PASSWORD: 'log-test-pass-1', LOG_LEVEL: 'debug' });
    const app = await buildApp({
      config: { ...config, database: testDb.config },
      database,
      storage: new LocalStorage(path.join(dir, 'uploads')),
      logger: { level: 'debug', stream },
    });
    try {
      await app.server.ready();
      const ok = await app.server.inject({ url: '/api/software', headers: { 'x-request-id': 'trace-ok-1' } });
      expect(ok.statusCode).toBe(200);
      expect(lines.filter((l) => l.requestId === 'trace-ok-1').length).toBeGreaterThan(0);

      await database.close(); // every query fails from now on: a 500
      const failed = await app.server.inject({ url: '/api/software', headers: { 'x-request-id': 'trace-fail-1' } });
      expect(failed.statusCode).toBe(500);
      expect(failed.json()).toEqual({ error: 'internal server error' });
      expect(failed.headers['x-request-id']).toBe('trace-fail-1');
      const errors = lines.filter((l) => Number(l.level) >= 50);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ requestId: 'trace-fail-1' });
    } finally {
      await app.close();
      await testDb.drop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("a request's logger", () => {
  it('is made only when the request logs a line, bound to its id; a route with a level of its own gets one at once', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(JSON.parse(chunk.toString()));
        done();
      },
    });
    const server = Fastify({ logger: { level: 'info', stream } });
    let made = 0;
    const child = server.log.child.bind(server.log);
    server.log.child = (bindings, options) => {
      made += 1;
      return child(bindings, options);
    };
    const log = requestLog(server.log, { requestId: 'r-1' }, {});
    log.debug('below the level');
    expect(log.level).toBe('info');
    expect(made).toBe(0);
    log.warn({ slow: true }, 'took long');
    log.error('and failed');
    expect(made).toBe(1);
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toMatchObject([
      { level: 40, requestId: 'r-1', slow: true, msg: 'took long' },
      { level: 50, requestId: 'r-1', msg: 'and failed' },
    ]);
    expect(requestLog(server.log, { requestId: 'r-2' }, { level: 'debug' }).level).toBe('debug');
    expect(made).toBe(2);
    await server.close();
  });
});

describe('/healthz and /readyz', () => {
  it('healthz answers while alive; readyz checks the database and turns 503 at shutdown', async () => {
    const t = await buildTestApp();
    try {
      expect((await t.inject({ url: '/healthz' })).json()).toEqual({ ok: true, database: ENGINE, storage: 'local' });
      const ready = await t.inject({ url: '/readyz' });
      expect(ready.statusCode).toBe(200);
      expect(ready.headers['cache-control']).toBe('no-store');
      t.app.beginShutdown();
      const draining = await t.inject({ url: '/readyz' });
      expect(draining.statusCode).toBe(503);
      expect(draining.json()).toEqual({ error: 'shutting down' });
      // Still serving while the load balancer drains it.
      expect((await t.inject({ url: '/api/software' })).statusCode).toBe(200);
    } finally {
      await t.close();
    }
  });

  it('readyz is 503 {error} while the database does not answer; healthz stays 200', async () => {
    const t = await buildTestApp();
    try {
      await t.database.close();
      const res = await t.inject({ url: '/readyz' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ error: 'the database does not answer' });
      expect((await t.inject({ url: '/healthz' })).statusCode).toBe(200);
    } finally {
      await t.app.close();
      await t.testDb.drop();
      fs.rmSync(t.dir, { recursive: true, force: true });
    }
  });
});

describe('RouteTally (the per-request tallies behind http_requests_total and the latency histogram)', () => {
  it('exposes cumulative buckets with le semantics, sum, count and per-status counts', async () => {
    const registry = new Registry();
    const tally = new RouteTally([0.01, 0.1]);
    tally.register(registry, { name: 'req_total', help: 'r' }, { name: 'lat_seconds', help: 'l' });
    for (const [status, seconds] of [
      [200, 0.01],
      [200, 0.05],
      [404, 0.5],
    ] as const) {
      tally.observe('GET', '/a/:id', status, seconds);
    }
    tally.observe('POST', '/a/:id', 201, 0.001);
    const scrape = parsePrometheus(await registry.metrics());
    expect(scrape.types.get('req_total')).toBe('counter');
    expect(scrape.types.get('lat_seconds')).toBe('histogram');
    const labels = { method: 'GET', route: '/a/:id' };
    expect(value(scrape, 'req_total', { ...labels, status: '200' })).toBe(2);
    expect(value(scrape, 'req_total', { ...labels, status: '404' })).toBe(1);
    expect(value(scrape, 'req_total', { method: 'POST', status: '201' })).toBe(1);
    // 0.01 falls in le="0.01" (a bound is inclusive); buckets are cumulative.
    expect(value(scrape, 'lat_seconds_bucket', { ...labels, le: '0.01' })).toBe(1);
    expect(value(scrape, 'lat_seconds_bucket', { ...labels, le: '0.1' })).toBe(2);
    expect(value(scrape, 'lat_seconds_bucket', { ...labels, le: '+Inf' })).toBe(3);
    expect(value(scrape, 'lat_seconds_count', labels)).toBe(3);
    expect(value(scrape, 'lat_seconds_sum', labels)).toBeCloseTo(0.56, 10);
  });
});
