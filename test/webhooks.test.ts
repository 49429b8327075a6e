import { createHmac } from 'node:crypto';
import http from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { manifestOf, publishBuild } from './helpers/game.js';
import type { App } from '../src/app.js';
import { backoff } from '../src/db/jobs.js';
import {
  admin,
  buildSecondApp,
  buildTestApp,
  createPackage,
  createVersion,
  login,
  type TestApp,
} from './helpers/app.js';

/** Fast delivery settings: polls every 20 ms, gives up an attempt after 300 ms, retries after 50 ms. */
const ENV = { WEBHOOK_POLL_MS: '20', WEBHOOK_TIMEOUT_MS: '300', WEBHOOK_BACKOFF_MS: '50', WEBHOOK_MAX_ATTEMPTS: '4' };

interface Received {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A receiver on loopback: `/ok` answers 200, `/fail/N` fails its first N requests, `/hang` never answers. */
class Receiver {
  readonly received: Received[] = [];
  private readonly failures = new Map<string, number>();
  private readonly server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const url = req.url ?? '';
      this.received.push({ path: url, headers: req.headers, body });
      if (url.startsWith('/hang')) return; // never answers
      const fail = /^\/fail\/(\d+)/.exec(url);
      if (fail) {
        const seen = (this.failures.get(url) ?? 0) + 1;
        this.failures.set(url, seen);
        if (seen <= Number(fail[1])) {
          res.writeHead(500).end('no');
          return;
        }
      }
      res.writeHead(200).end('ok');
    });
  });
  url = '';

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    this.url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  }

  at(p: string): Received[] {
    return this.received.filter((r) => r.path === p);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

let t: TestApp;
const receiver = new Receiver();

beforeAll(async () => {
  await receiver.start();
  t = await buildTestApp(ENV);
  t.app.ctx.webhooks.start((err) => {
    throw err;
  });
});
afterAll(async () => {
  await t.close();
  await receiver.stop();
});

async function register(p: string, events: string[], format = 'json') {
  const res = await admin(t, 'POST', '/api/admin/webhooks', { url: receiver.url + p, events, format });
  expect(res.statusCode, res.body).toBe(201);
  return res.json<{ id: string; secret: string; secretHint: string }>();
}

async function deliveries(id: string) {
  return (await admin(t, 'GET', `/api/admin/webhooks/${id}/deliveries`)).json<
    { event: string; status: string; attempts: number; log: { statusCode: number | null; error: string | null }[] }[]
  >();
}

/** Webhooks registered by a test are removed after it, so that tests do not receive each other's events. */
afterEach(async () => {
  for (const w of (await admin(t, 'GET', '/api/admin/webhooks')).json<{ id: string }[]>()) {
    await admin(t, 'DELETE', `/api/admin/webhooks/${w.id}`);
  }
});

describe('webhook registration', () => {
  it('creates, lists, changes and removes webhooks; the secret is shown once', async () => {
    const created = await register('/ok', ['addon.created', 'release.published']);
    expect(created.secret).toMatch(/^whsec_/);
    expect(created.secretHint).toBe(`…${created.secret.slice(-4)}`);
    const listed = (await admin(t, 'GET', '/api/admin/webhooks')).json<Record<string, unknown>[]>();
    expect(listed).toHaveLength(1);
    expect(listed[0]).not.toHaveProperty('secret');
    expect(listed[0]).toMatchObject({ url: `${receiver.url}/ok`, format: 'json', enabled: true });
    const changed = await admin(t, 'PUT', `/api/admin/webhooks/${created.id}`, {
      enabled: false,
      events: ['addon.created'],
    });
    expect(changed.json()).toMatchObject({ enabled: false, events: ['addon.created'] });
    expect(changed.json()).not.toHaveProperty('secret');
    const rotated = await admin(t, 'PUT', `/api/admin/webhooks/${created.id}`, { rotateSecret: true });
    expect(rotated.json<{ secret: string }>().secret).not.toBe(created.secret);
    expect((await admin(t, 'DELETE', `/api/admin/webhooks/${created.id}`)).statusCode).toBe(200);
    expect((await admin(t, 'GET', `/api/admin/webhooks/${created.id}`)).statusCode).toBe(404);
  });

  it('validates its input, naming the field', async () => {
    for (const [body, field] of [
      [{ url: 'ftp://x.test/h', events: ['addon.created'] }, 'url'],
      [{ url: 'not a url', events: ['addon.created'] }, 'url'],
      [{ url: 'https://x.test/h', events: [] }, 'events'],
      [{ url: 'https://x.test/h', events: ['addon.deleted'] }, 'events'],
      [{ url: 'https://x.test/h', events: ['addon.created'], format: 'slack' }, 'format'],
      [{ events: ['addon.created'] }, 'url'],
    ] as const) {
      const res = await admin(t, 'POST', '/api/admin/webhooks', body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(field);
    }
  });

  it('is for owners only', async () => {
    expect(
      (await admin(t, 'POST', '/api/admin/users', { username: 'pub', password: 'publisher-1', role: 'publisher' }))
        .statusCode,
    ).toBe(201);
    const cookie = await login(t.app, 'pub', 'publisher-1');
    const res = await t.inject({ url: '/api/admin/webhooks', headers: { cookie } });
    expect(res.statusCode).toBe(403);
    expect((await t.inject({ url: '/api/admin/webhooks' })).statusCode).toBe(401);
  });
});

describe('delivery', () => {
  it('sends each event its write causes, signed with HMAC-SHA256 over the timestamp and body', async () => {
    const hook = await register('/ok', [
      'addon.created',
      'release.published',
      'article.published',
      'version.published',
      'version.rollout_changed',
      'version.revoked',
    ]);
    const addon = (
      await admin(t, 'POST', '/api/addons', { slug: 'hooked', name: '钩子', nameEn: 'Hooked', summary: '摘要' })
    ).json<{ id: string }>();
    await admin(t, 'POST', '/api/releases', {
      addonId: addon.id,
      version: '1.0',
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/h.zip',
    });
    await admin(t, 'POST', '/api/articles', { slug: 'hooked-news', title: '新闻', titleEn: 'News' });
    await admin(t, 'POST', '/api/articles', { slug: 'hooked-draft', title: '草稿', published: false });
    const pkg = await createPackage(t, { slug: 'hooked-app', name: '应用', nameEn: 'App' });
    const v = await createVersion(t, pkg.id, {
      version: '2.0',
      versionCode: 2,
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/a.exe',
      rolloutPercent: 10,
    });
    await admin(t, 'PUT', `/api/software/versions/${v.id}`, { rolloutPercent: 50 });
    await admin(t, 'POST', `/api/software/versions/${v.id}/revoke`);
    // Deliveries due together are sent in parallel: they may arrive in any order (receivers order by occurredAt).
    const expected = [
      'addon.created',
      'article.published',
      'release.published',
      'version.published',
      'version.revoked',
      'version.rollout_changed',
    ];
    const events = () => receiver.at('/ok').map((r) => String(r.headers['x-webhook-event']));
    await vi.waitFor(() => expect(events().sort()).toEqual(expected), { timeout: 3000 });

    for (const r of receiver.at('/ok')) {
      const timestamp = String(r.headers['x-webhook-timestamp']);
      const mac = createHmac('sha256', hook.secret).update(`${timestamp}.${r.body}`).digest('hex');
      expect(r.headers['x-webhook-signature']).toBe(`sha256=${mac}`);
      expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(60);
      const body = JSON.parse(r.body) as {
        id: string;
        event: string;
        occurredAt: string;
        data: Record<string, unknown>;
      };
      expect(body.event).toBe(r.headers['x-webhook-event']);
      expect(body.id).toEqual(expect.any(String));
      expect(Date.parse(body.occurredAt)).not.toBeNaN();
    }
    const bodies = receiver
      .at('/ok')
      .map((r) => JSON.parse(r.body) as { event: string; occurredAt: string; data: Record<string, unknown> });
    const byOccurrence = [...bodies].sort((a, b) => a.occurredAt.localeCompare(b.occurredAt)).map((b) => b.event);
    expect(byOccurrence.indexOf('version.published')).toBeLessThan(byOccurrence.indexOf('version.rollout_changed'));
    expect(byOccurrence.indexOf('version.rollout_changed')).toBeLessThan(byOccurrence.indexOf('version.revoked'));
    const release = bodies.find((b) => b.event === 'release.published');
    const rollout = bodies.find((b) => b.event === 'version.rollout_changed');
    expect(release?.data).toMatchObject({ addonId: addon.id, version: '1.0', title: 'Hooked 1.0' });
    expect(rollout?.data).toMatchObject({ id: v.id, rolloutPercent: 50, previousRolloutPercent: 10 });
    // A delivery is recorded just after its receiver answered: wait for the records, not only the requests.
    await vi.waitFor(async () => {
      const log = await deliveries(hook.id);
      expect(log).toHaveLength(6);
      expect(log.every((d) => d.status === 'delivered' && d.attempts === 1 && d.log[0]?.statusCode === 200)).toBe(true);
    });
  });

  it('formats Discord embeds', async () => {
    await register('/discord', ['addon.created'], 'discord');
    await admin(t, 'POST', '/api/addons', {
      slug: 'for-discord',
      name: '频道',
      nameEn: 'Channel',
      summary: '摘要',
      summaryEn: 'For the channel',
    });
    await vi.waitFor(() => expect(receiver.at('/discord')).toHaveLength(1), { timeout: 3000 });
    const body = JSON.parse(receiver.at('/discord')[0]?.body ?? '{}') as {
      embeds: { title: string; description: string }[];
    };
    expect(body.embeds[0]).toMatchObject({ title: 'addon.created: Channel', description: 'For the channel' });
  });

  it('retries a failing receiver with backoff and logs every attempt', async () => {
    const hook = await register('/fail/2', ['addon.created']);
    await admin(t, 'POST', '/api/addons', { slug: 'retried', name: '重试', summary: '摘要' });
    await vi.waitFor(async () => expect((await deliveries(hook.id))[0]?.status).toBe('delivered'), { timeout: 5000 });
    const [delivery] = await deliveries(hook.id);
    expect(delivery?.attempts).toBe(3);
    expect(delivery?.log.map((a) => a.statusCode)).toEqual([500, 500, 200]);
    expect(delivery?.log[0]?.error).toMatch(/500/);
    expect(receiver.at('/fail/2')).toHaveLength(3);
    // The same delivery id each time: a receiver can tell a retry from a new event.
    expect(new Set(receiver.at('/fail/2').map((r) => r.headers['x-webhook-id'])).size).toBe(1);
  });

  it('gives up after the last attempt', async () => {
    const hook = await register('/fail/99', ['addon.created']);
    await admin(t, 'POST', '/api/addons', { slug: 'given-up', name: '放弃', summary: '摘要' });
    await vi.waitFor(async () => expect((await deliveries(hook.id))[0]?.status).toBe('failed'), { timeout: 5000 });
    expect((await deliveries(hook.id))[0]?.attempts).toBe(4);
  });

  it('times out a receiver that hangs without holding up the others', async () => {
    const hanging = await register('/hang', ['addon.created']);
    await register('/ok-too', ['addon.created']);
    const started = Date.now();
    await admin(t, 'POST', '/api/addons', { slug: 'hang-test', name: '挂起', summary: '摘要' });
    await vi.waitFor(() => expect(receiver.at('/ok-too')).toHaveLength(1), { timeout: 3000 });
    expect(Date.now() - started).toBeLessThan(1500);
    await vi.waitFor(async () => expect((await deliveries(hanging.id))[0]?.log.length).toBeGreaterThanOrEqual(2), {
      timeout: 5000,
    });
    expect((await deliveries(hanging.id))[0]?.log[0]?.error).toMatch(/no answer within 300 ms/);
  });

  it('sends nothing for a write that fails, or to a disabled webhook', async () => {
    const hook = await register('/ok-quiet', ['release.published', 'addon.created']);
    await admin(t, 'PUT', `/api/admin/webhooks/${hook.id}`, { enabled: false });
    await admin(t, 'POST', '/api/addons', { slug: 'unheard', name: '无声', summary: '摘要' });
    // Events go to the webhooks enabled when they go out (within a poll or two).
    await new Promise((resolve) => setTimeout(resolve, 300));
    await admin(t, 'PUT', `/api/admin/webhooks/${hook.id}`, { enabled: true });
    const missing = await admin(t, 'POST', '/api/releases', {
      addonId: 'no-such-addon',
      version: '1',
      downloadType: 'url',
      externalUrl: 'https://x.test/a',
    });
    expect(missing.statusCode).toBe(404);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(receiver.at('/ok-quiet')).toHaveLength(0);
    expect(await deliveries(hook.id)).toEqual([]);
  });

  it('sends a scheduled publication when it is due, and not one rescheduled or deleted before', async () => {
    await register('/scheduled', ['release.published', 'article.published']);
    const addon = (
      await admin(t, 'POST', '/api/addons', { slug: 'scheduled-addon', name: '定时', summary: '摘要' })
    ).json<{ id: string }>();
    const soon = () => new Date(Date.now() + 1200).toISOString();
    const release = (
      await admin(t, 'POST', '/api/releases', {
        addonId: addon.id,
        version: '3.0',
        downloadType: 'url',
        externalUrl: 'https://x.test/s',
        publishAt: soon(),
      })
    ).json<{ id: string }>();
    const moved = (await admin(t, 'POST', '/api/articles', { slug: 'moved', title: '改期', publishAt: soon() })).json<{
      id: string;
    }>();
    const dropped = (
      await admin(t, 'POST', '/api/articles', { slug: 'dropped', title: '删除', publishAt: soon() })
    ).json<{ id: string }>();
    const later = new Date(Date.now() + 1_800_000).toISOString();
    await admin(t, 'PUT', `/api/articles/${moved.id}`, { publishAt: later });
    await admin(t, 'DELETE', `/api/articles/${dropped.id}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(receiver.at('/scheduled')).toHaveLength(0);
    await vi.waitFor(() => expect(receiver.at('/scheduled')).toHaveLength(1), { timeout: 3000 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const bodies = receiver.at('/scheduled').map((r) => JSON.parse(r.body) as { event: string; data: { id: string } });
    expect(bodies.map((b) => [b.event, b.data.id])).toEqual([['release.published', release.id]]);
  });

  it('sends game build events, a scheduled publication when it is due and not one rescheduled', async () => {
    await register('/game', ['game.build.published', 'game.build.revoked']);
    const soon = new Date(Date.now() + 1200).toISOString();
    const later = new Date(Date.now() + 1_800_000).toISOString();
    const build = (code: number) =>
      manifestOf({ version: `g${code}`, buildCode: code }, [{ path: 'Data/x.mpq', content: Buffer.from(`x${code}`) }]);
    expect((await publishBuild(t, { version: 'g1', buildCode: 1 }, build(1))).statusCode).toBe(201);
    expect((await publishBuild(t, { version: 'g2', buildCode: 2 }, build(2), { publishAt: soon })).statusCode).toBe(
      201,
    );
    expect((await publishBuild(t, { version: 'g3', buildCode: 3 }, build(3), { publishAt: soon })).statusCode).toBe(
      201,
    );
    await admin(t, 'PUT', '/api/admin/game/builds/3', { publishAt: later });
    await admin(t, 'POST', '/api/admin/game/builds/1/revoke');
    const events = () =>
      receiver
        .at('/game')
        .map((r) => JSON.parse(r.body) as { event: string; data: { buildCode: number } })
        .map((b) => `${b.event} ${b.data.buildCode}`)
        .sort();
    await vi.waitFor(() => expect(events()).toHaveLength(3), { timeout: 4000 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(events()).toEqual(['game.build.published 1', 'game.build.published 2', 'game.build.revoked 1']);
  });

  it('sends a test event at once from the test button', async () => {
    const hook = await register('/button', ['addon.created']);
    const res = await admin(t, 'POST', `/api/admin/webhooks/${hook.id}/test`);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      event: 'webhook.test',
      status: 'delivered',
      attempts: 1,
      log: [{ statusCode: 200 }],
    });
    expect(receiver.at('/button').map((r) => r.headers['x-webhook-event'])).toEqual(['webhook.test']);
  });
});

describe('several instances and restarts', () => {
  let other: App;
  beforeAll(async () => {
    other = await buildSecondApp(t, ENV);
  });
  afterAll(() => other.close());

  it('two instances deliver each event once', async () => {
    other.ctx.webhooks.start(() => undefined);
    try {
      await register('/pair', ['addon.created']);
      for (let i = 0; i < 12; i += 1)
        await admin(t, 'POST', '/api/addons', { slug: `pair-${i}`, name: `对${i}`, summary: '摘要' });
      await vi.waitFor(() => expect(receiver.at('/pair')).toHaveLength(12), { timeout: 5000 });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const ids = receiver.at('/pair').map((r) => r.headers['x-webhook-id']);
      expect(ids).toHaveLength(12);
      expect(new Set(ids).size).toBe(12);
    } finally {
      await other.ctx.webhooks.stop();
    }
  });

  it('a restart in the middle of retries delivers what was pending, once', async () => {
    const hook = await register('/fail/1', ['addon.created']);
    await t.app.ctx.webhooks.stop();
    try {
      await admin(t, 'POST', '/api/addons', { slug: 'restarted', name: '重启', summary: '摘要' });
      // One failed attempt by this instance, then it stops (as a process would); the other picks up.
      await t.app.ctx.webhooks.tick();
      expect((await deliveries(hook.id))[0]).toMatchObject({ status: 'pending', attempts: 1 });
      other.ctx.webhooks.start(() => undefined);
      await vi.waitFor(async () => expect((await deliveries(hook.id))[0]?.status).toBe('delivered'), { timeout: 3000 });
      expect(receiver.at('/fail/1')).toHaveLength(2);
    } finally {
      await other.ctx.webhooks.stop();
      t.app.ctx.webhooks.start(() => undefined);
    }
  });
});

describe('retention', () => {
  it('forgets events sent out over 30 days ago, with their deliveries and attempts, but not pending ones', async () => {
    const hook = await register('/ok-old', ['addon.created']);
    await admin(t, 'POST', '/api/addons', { slug: 'old-news', name: '旧闻', summary: '摘要' });
    await vi.waitFor(async () => expect((await deliveries(hook.id))[0]?.status).toBe('delivered'), { timeout: 3000 });
    // A delivery still pending (as if its receiver had been failing): kept whatever its age.
    const at = new Date().toISOString();
    await t.database.db
      .insertInto('webhookEvents')
      .values({
        id: 'still-pending',
        event: 'addon.created',
        subjectId: 'x',
        data: '{}',
        occurredAt: at,
        dueMs: Date.now(),
        scheduledFor: null,
        fannedOut: 1,
        webhookId: null,
      })
      .execute();
    await t.database.db
      .insertInto('webhookDeliveries')
      .values({
        id: 'still-pending',
        webhookId: hook.id,
        eventId: 'still-pending',
        status: 'pending',
        nextAttemptMs: Date.now() + 86_400_000 * 365,
        createdAt: at,
        lastStatus: null,
        lastError: null,
        deliveredAt: null,
      })
      .execute();
    const events = async () =>
      (await t.database.db.selectFrom('webhookEvents').select('id').execute()).map((e) => e.id);
    const before = await events();
    await t.app.ctx.webhooks.prune(Date.now() + 29 * 86_400_000);
    expect(await events()).toEqual(before);
    await t.app.ctx.webhooks.prune(Date.now() + 31 * 86_400_000);
    // Left: the pending one, and any not yet due (a publication scheduled by an earlier test).
    const left = await t.database.db.selectFrom('webhookEvents').select(['id', 'fannedOut']).execute();
    expect(left.filter((e) => e.fannedOut === 1).map((e) => e.id)).toEqual(['still-pending']);
    expect(left.length).toBeLessThan(before.length);
    expect((await deliveries(hook.id)).map((d) => d.status)).toEqual(['pending']);
    const attempts = await t.database.db.selectFrom('webhookAttempts').select('deliveryId').execute();
    expect(attempts).toEqual([]);
  });
});

describe('backoff', () => {
  it('doubles from the base with at most 20 % jitter, up to an hour', () => {
    expect([1, 2, 3, 4].map((n) => backoff(1000, n, 0))).toEqual([1000, 2000, 4000, 8000]);
    expect(backoff(1000, 1, 1)).toBe(1200);
    expect(backoff(60_000, 30, 0)).toBe(3_600_000);
  });
});
