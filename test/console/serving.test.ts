import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consoleRoutes } from '../../src/modules/console/routes.js';

let dir: string;
let app: FastifyInstance;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-console-dist-'));
  app = Fastify();
  await app.register(consoleRoutes(dir));
  await app.ready();
});
afterAll(async () => {
  await app.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('serving the built console', () => {
  it('says clearly that the console was not built', async () => {
    const res = await app.inject({ url: '/admin/' });
    expect(res.statusCode).toBe(503);
    expect(res.headers['content-type']).toContain('text/html');
    expect(res.body).toContain('npm run build');
  });

  it('serves index.html for client routes and hashed assets with long caching', async () => {
    fs.mkdirSync(path.join(dir, 'assets'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'index.html'), '<!doctype html><div id="root"></div>');
    fs.writeFileSync(path.join(dir, 'assets/index-abc123.js'), 'console.log(1)');
    for (const url of ['/admin', '/admin/', '/admin/addons/some-id', '/admin/index.html']) {
      const res = await app.inject({ url });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['cache-control']).toBe('no-cache');
      expect(res.headers['content-security-policy']).toContain("script-src 'self'");
      expect(res.body).toContain('id="root"');
    }
    const asset = await app.inject({ url: '/admin/assets/index-abc123.js' });
    expect(asset.statusCode).toBe(200);
    expect(asset.headers['content-type']).toContain('javascript');
    expect(asset.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect((await app.inject({ url: '/admin/assets/gone-1.js' })).statusCode).toBe(404);
  });

  it('never serves files outside the build folder', async () => {
    fs.writeFileSync(path.join(path.dirname(dir), `${path.basename(dir)}-secret.txt`), 'secret');
    for (const url of [
      '/admin/../package.json',
      '/admin/%2e%2e/package.json',
      `/admin/..%2f${path.basename(dir)}-secret.txt`,
    ]) {
      const res = await app.inject({ url });
      expect(res.body, url).not.toContain('secret');
      expect(res.body, url).not.toContain('"name"');
    }
    fs.rmSync(path.join(path.dirname(dir), `${path.basename(dir)}-secret.txt`));
  });
});
