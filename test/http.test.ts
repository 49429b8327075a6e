import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { helmetHeaders } from '../src/http/security-headers.js';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

describe('error shape', () => {
  it('answers an unknown route with 404 {error}', async () => {
    for (const [method, url] of [
      ['GET', '/api/nothing'],
      ['POST', '/api/server-time'],
      ['DELETE', '/nowhere'],
    ] as const) {
      const res = await t.inject({ method, url });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toEqual({ error: expect.stringContaining('no route') });
    }
  });

  it('answers malformed JSON with 400, never 500', async () => {
    for (const payload of ['{"slug":', '{bad json}', 'null x']) {
      const res = await t.inject({
        method: 'POST',
        url: '/api/software',
        headers: { cookie: t.cookie, 'content-type': 'application/json' },
        payload,
      });
      expect(res.statusCode, payload).toBe(400);
      expect(res.json()).toEqual({ error: expect.any(String) });
    }
  });

  it('answers an unsupported content type with 415 and an oversized body with 413', async () => {
    const xml = await t.inject({
      method: 'POST',
      url: '/api/software',
      headers: { cookie: t.cookie, 'content-type': 'application/xml' },
      payload: '<slug>x</slug>',
    });
    expect(xml.statusCode).toBe(415);
    expect(xml.json()).toEqual({ error: expect.any(String) });
    const huge = await t.inject({
      method: 'POST',
      url: '/api/software',
      headers: { cookie: t.cookie, 'content-type': 'application/json' },
      payload: JSON.stringify({ slug: 'big', name: 'x'.repeat(3 * 1024 * 1024) }),
    });
    expect(huge.statusCode).toBe(413);
    expect(huge.json()).toEqual({ error: expect.any(String) });
  });

  it('names the offending field in validation errors', async () => {
    const res = await admin(t, 'POST', '/api/software', { slug: 'ok-slug', name: ['x'] });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatch(/^body\.name: /);
    const missing = await admin(t, 'POST', '/api/software', { name: 'x' });
    expect(missing.json().error).toBe('body.slug: is required');
  });

  it('hides server errors behind a 500 without stack traces or SQL', async () => {
    const broken = await buildTestApp();
    await broken.database.close();
    try {
      const res = await broken.inject('/api/software');
      expect(res.statusCode).toBe(500);
      expect(res.json()).toEqual({ error: 'internal server error' });
    } finally {
      await broken.app.close();
      await broken.testDb.drop();
    }
  });
});

describe('documentation and cross-origin reads', () => {
  it('publishes an OpenAPI document generated from the route schemas and a docs page', async () => {
    const doc = (await t.inject('/openapi.json')).json();
    expect(doc.openapi).toMatch(/^3\./);
    for (const path of [
      '/api/software/check-update',
      '/api/software/download/{versionId}',
      '/api/launcher/heartbeat',
      '/api/upload',
    ]) {
      expect(Object.keys(doc.paths), path).toContain(path);
    }
    const checkUpdate = doc.paths['/api/software/check-update'].get;
    expect(checkUpdate.responses['200'].content['application/json'].schema.properties).toHaveProperty('hasUpdate');
    const page = await t.inject('/docs/');
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
  });

  it('lets the website read public endpoints from another origin', async () => {
    const res = await t.inject({ url: '/api/software', headers: { origin: 'https://www.example.test' } });
    expect(res.headers['access-control-allow-origin']).toBe('*');
    const image = await t.inject({ url: '/api/server-time' });
    expect(image.statusCode).toBe(200);
  });
});

describe('browser security headers', () => {
  const HELMET = {
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'SAMEORIGIN',
    'referrer-policy': 'no-referrer',
    'cross-origin-opener-policy': 'same-origin',
    // Images and files are embedded by the community website on another origin.
    'cross-origin-resource-policy': 'cross-origin',
    'x-dns-prefetch-control': 'off',
    'x-download-options': 'noopen',
    'x-permitted-cross-domain-policies': 'none',
    'x-xss-protection': '0',
    'origin-agent-cluster': '?1',
  };

  it("sends helmet's policy on the website's routes, their HEAD twins and unmatched paths, without CSP or HSTS", async () => {
    expect(helmetHeaders({ crossOriginResourcePolicy: { policy: 'cross-origin' } })).toMatchObject(HELMET);
    for (const request of [
      { url: '/api/articles' },
      { url: '/api/articles', method: 'HEAD' as const },
      { url: '/api/no-such-thing' },
      // Refused before any handler: a malformed body to a path no route serves.
      {
        url: '/api/no-such-thing',
        method: 'POST' as const,
        headers: { 'content-type': 'application/json' },
        payload: '{',
      },
      { url: '/api/admin/me', headers: { cookie: t.cookie } },
    ]) {
      const res = await t.inject(request);
      expect(res.headers, JSON.stringify(request)).toMatchObject(HELMET);
      expect(res.headers).not.toHaveProperty('content-security-policy');
      expect(res.headers).not.toHaveProperty('strict-transport-security');
      expect(res.headers).not.toHaveProperty('x-powered-by');
    }
  });

  it('leaves them off the endpoints declared for machines (launchers, probes)', async () => {
    for (const request of [
      { url: '/api/software/check-update?slug=nothing-here&versionCode=1' },
      { url: '/api/launcher/heartbeat', method: 'POST' as const, payload: { deviceId: 'headers-1' } },
      { url: '/healthz' },
    ]) {
      const res = await t.inject(request);
      expect(res.headers, request.url).not.toHaveProperty('x-frame-options');
      expect(res.headers, request.url).not.toHaveProperty('cross-origin-opener-policy');
    }
  });
});

describe('health', () => {
  it('reports the engine and store for load balancers', async () => {
    const res = await t.inject('/healthz');
    expect(res.json()).toEqual({ ok: true, database: t.database.engine, storage: 'local' });
  });
});

describe('conditional reads of public JSON', () => {
  it('tags public reads with an ETag and no-cache, answers 304 to a match, and a new tag after a change', async () => {
    await admin(t, 'POST', '/api/software', { slug: 'etag-pkg', name: '标签' });
    await admin(t, 'POST', '/api/addons', { slug: 'etag-addon', name: '插件', summary: '概要' });
    for (const url of [
      '/api/software',
      '/api/software/etag-pkg',
      '/api/addons',
      '/api/addons/etag-addon',
      '/api/articles',
      '/api/banners',
    ]) {
      const first = await t.inject(url);
      expect(first.statusCode, url).toBe(200);
      const tag = first.headers.etag as string;
      expect(tag, url).toMatch(/^W\/".+"$/);
      expect(first.headers['cache-control'], url).toBe('no-cache');
      const again = await t.inject({ url, headers: { 'if-none-match': tag } });
      expect(again.statusCode, url).toBe(304);
      expect(again.body, url).toBe('');
      const other = await t.inject({ url, headers: { 'if-none-match': 'W/"something-else"' } });
      expect(other.statusCode, url).toBe(200);
    }
    const before = (await t.inject('/api/addons')).headers.etag as string;
    await admin(t, 'POST', '/api/addons', { slug: 'etag-addon-2', name: '插件二', summary: '概要' });
    const after = await t.inject({ url: '/api/addons', headers: { 'if-none-match': before } });
    expect(after.statusCode).toBe(200);
    expect(after.headers.etag).not.toBe(before);
  });

  it('leaves launcher polling, errors and administrator reads alone', async () => {
    const pkg = (await admin(t, 'POST', '/api/software', { slug: 'etag-launcher', name: '启动器' })).json();
    await admin(t, 'POST', `/api/software/${pkg.id}/versions`, { version: '1', versionCode: 1 });
    const check = await t.inject('/api/software/check-update?slug=etag-launcher');
    expect(check.statusCode).toBe(200);
    expect(check.headers.etag).toBeUndefined();
    expect((await t.inject('/api/software/nope')).headers.etag).toBeUndefined();
    expect((await admin(t, 'GET', '/api/admin/tokens')).headers.etag).toBeUndefined();
    expect((await t.inject('/api/server-time')).headers['cache-control']).toBe('no-store');
  });
});
