import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin } from '../../../test/helpers/app.js';
import { HttpError, type LauncherClientError, UpdateManager } from '../src/index.js';
import { type Service, startService } from './helpers.js';

let s: Service;
beforeAll(async () => {
  s = await startService();
});
afterAll(() => s.close());

async function deviceSeen(deviceId: string) {
  for (let i = 0; i < 60; i++) {
    const res = await admin(s.t, 'GET', '/api/admin/devices');
    const found = res.json<{ deviceId: string; appVersion: string | null }[]>().find((d) => d.deviceId === deviceId);
    if (found) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
  return undefined;
}

describe('device identity', () => {
  it('is made once, kept in the state folder, and sent with every heartbeat', async () => {
    const stateDir = s.stateDir();
    const manager = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: await s.keys(), stateDir });
    const id = await manager.deviceId();
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(fs.readFileSync(path.join(stateDir, 'device-id'), 'utf8').trim()).toBe(id);
    const again = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: [], stateDir });
    expect(await again.deviceId()).toBe(id);
    await again.heartbeatOnce({ appVersion: '1.5' });
    const beat = s.proxy.requests('/api/launcher/heartbeat').at(-1);
    expect(beat?.method).toBe('POST');
    expect(await deviceSeen(id)).toMatchObject({ deviceId: id, appVersion: '1.5' });
  });
});

describe('heartbeat', () => {
  it('beats at its interval, waits out 429 Retry-After and backs off on 5xx and network errors, never throws, stops cleanly', async () => {
    const manager = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: [], stateDir: s.stateDir() });
    const beats = () => s.proxy.requests('/api/launcher/heartbeat');
    const before = beats().length;
    const plan = ['ok', '429', '429', 'ok', '503', 'cut', 'ok', 'ok'];
    let served = 0;
    s.proxy.rule = (seen) => {
      if (!seen.url.startsWith('/api/launcher/heartbeat')) return undefined;
      const step = plan[served++] ?? 'ok';
      if (step === '429')
        return { status: 429, headers: { 'retry-after': '1' }, body: Buffer.from('{"error":"slow down"}') };
      if (step === '503') return { status: 503, headers: {}, body: Buffer.from('{"error":"down"}') };
      if (step === 'cut') return { status: 200, headers: {}, body: Buffer.from('{"ok":true}'), cutAfter: 2 };
      return undefined;
    };
    const errors: LauncherClientError[] = [];
    let acknowledged = 0;
    const heartbeat = manager.startHeartbeat(
      { appVersion: '1.5' },
      {
        intervalMs: 40,
        jitter: 0.25,
        onError: (err) => errors.push(err),
        onBeat: () => {
          acknowledged++;
          if (acknowledged === 1) throw new Error('a host callback that throws does not stop the heartbeat');
        },
      },
    );
    const deadline = Date.now() + 10_000;
    while (acknowledged < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await heartbeat.stop();
    s.proxy.rule = null;
    const times = beats()
      .slice(before)
      .map((b) => b.at);
    expect(times.length).toBeGreaterThanOrEqual(plan.length);
    const gaps = times.slice(1).map((at, i) => at - times[i]!);
    // After each 429: not before Retry-After (1 s).
    expect(gaps[1]).toBeGreaterThanOrEqual(990);
    expect(gaps[2]).toBeGreaterThanOrEqual(990);
    // After a success: the interval with jitter (40 ms ± 25 %), far below a second.
    expect(gaps[0]).toBeLessThan(500);
    expect(gaps[3]).toBeLessThan(500);
    // After a 503 then a cut connection: doubling backoff (interval · 2^failures, ± jitter).
    expect(gaps[4]).toBeGreaterThanOrEqual(40 * 2 * 0.75 - 5);
    expect(gaps[5]).toBeGreaterThanOrEqual(40 * 4 * 0.75 - 5);
    expect(errors.map((e) => (e instanceof HttpError ? e.status : e.kind))).toEqual([429, 429, 503, 'network']);
    expect(acknowledged).toBeGreaterThanOrEqual(4);
    // Stopped: no more beats.
    const count = beats().length;
    await new Promise((r) => setTimeout(r, 200));
    expect(beats().length).toBe(count);
  });

  it('stop() during a beat in flight resolves without an error', async () => {
    const manager = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: [], stateDir: s.stateDir() });
    let release: () => void = () => undefined;
    s.proxy.rule = (seen) =>
      seen.url.startsWith('/api/launcher/heartbeat')
        ? new Promise((resolve) => (release = () => resolve(undefined)))
        : undefined;
    const errors: unknown[] = [];
    const heartbeat = manager.startHeartbeat({}, { intervalMs: 40, onError: (err) => errors.push(err) });
    await new Promise((r) => setTimeout(r, 100));
    await heartbeat.stop();
    release();
    s.proxy.rule = null;
    expect(errors).toEqual([]);
  });
});
