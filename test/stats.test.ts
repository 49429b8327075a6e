import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dayOf } from '../src/modules/downloads/counting.js';
import { admin, buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';

interface Day {
  day: string;
  installer: number;
  launcher: number;
  addon: number;
  total: number;
}
interface Stats {
  days: number;
  from: string;
  to: string;
  series: Day[];
  totals: Omit<Day, 'day'>;
}

const DAY_MS = 86_400_000;
const daysAgo = (n: number) => dayOf(new Date(Date.now() - n * DAY_MS));

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

async function stats(query = ''): Promise<Stats> {
  const res = await admin(t, 'GET', `/api/admin/stats/downloads${query}`);
  expect(res.statusCode).toBe(200);
  return res.json<Stats>();
}

describe('GET /api/admin/stats/downloads', () => {
  it('needs an administrator', async () => {
    const res = await t.inject({ url: '/api/admin/stats/downloads' });
    expect(res.statusCode).toBe(401);
    expect(res.json()).toHaveProperty('error');
  });

  it('answers every day of the last 30 days by default, zero days included', async () => {
    const body = await stats();
    expect(body.days).toBe(30);
    expect(body.series).toHaveLength(30);
    expect(body.to).toBe(dayOf(new Date()));
    expect(body.from).toBe(daysAgo(29));
    expect(body.series[0]?.day).toBe(body.from);
    expect(body.series.at(-1)?.day).toBe(body.to);
    const days = body.series.map((d) => d.day);
    expect([...days].sort()).toEqual(days);
    expect(new Set(days).size).toBe(30);
  });

  it('counts the downloads of the download path per kind, today', async () => {
    const before = await stats('?days=1');
    const file = await upload(t, 'setup.exe', 'installer-bytes');
    const pkg = await createPackage(t, { slug: 'stats-launcher', name: '启动器' });
    const version = await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 1, filePath: file.filePath });
    for (let i = 0; i < 3; i++) {
      expect((await t.inject({ url: `/api/software/download/${version.id}` })).statusCode).toBe(200);
    }
    for (let i = 0; i < 2; i++) {
      expect((await t.inject({ url: `/api/software/download/${version.id}?source=launcher` })).statusCode).toBe(200);
    }
    // Not counted: HEAD and a resumed range.
    await t.inject({ method: 'HEAD', url: `/api/software/download/${version.id}` });
    await t.inject({ url: `/api/software/download/${version.id}`, headers: { range: 'bytes=3-' } });

    const after = await stats('?days=1');
    expect(after.series).toHaveLength(1);
    const today = after.series[0]!;
    const was = before.series[0]!;
    expect(today.day).toBe(dayOf(new Date()));
    expect(today.installer - was.installer).toBe(3);
    expect(today.launcher - was.launcher).toBe(2);
    expect(today.total - was.total).toBe(5);
    expect(after.totals.total - before.totals.total).toBe(5);
  });

  it('places older roll-up rows on their day and leaves days outside the range out', async () => {
    await t.database.db
      .insertInto('downloadDaily')
      .values([
        { day: daysAgo(2), kind: 'addon', count: 7 },
        { day: daysAgo(2), kind: 'installer', count: 4 },
        { day: daysAgo(10), kind: 'launcher', count: 9 },
        { day: daysAgo(400), kind: 'addon', count: 1000 },
      ])
      .execute();
    const week = await stats('?days=7');
    expect(week.series).toHaveLength(7);
    const twoDaysAgo = week.series.find((d) => d.day === daysAgo(2))!;
    expect(twoDaysAgo).toEqual({ day: daysAgo(2), installer: 4, launcher: 0, addon: 7, total: 11 });
    expect(week.series.find((d) => d.day === daysAgo(1))).toEqual({
      day: daysAgo(1),
      installer: 0,
      launcher: 0,
      addon: 0,
      total: 0,
    });
    expect(week.series.some((d) => d.launcher === 9)).toBe(false);

    const month = await stats('?days=30');
    expect(month.series.find((d) => d.day === daysAgo(10))?.launcher).toBe(9);
    expect(month.totals.addon).toBe(7);

    const year = await stats('?days=366');
    expect(year.series).toHaveLength(366);
    expect(year.totals.addon).toBe(7);
  });

  it.each(['0', '367', '-1', 'abc', '1.5', '30x'])('days=%s → 400 naming the field', async (days) => {
    const res = await admin(t, 'GET', `/api/admin/stats/downloads?days=${days}`);
    expect(res.statusCode).toBe(400);
    expect(res.json<{ error: string }>().error).toContain('days');
  });
});
