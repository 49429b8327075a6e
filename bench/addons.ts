import path from 'node:path';
import { openDatabase } from '../src/db/index.js';
import type { AddonRow, ReleaseRow, ScreenshotRow } from '../src/db/schema.js';
import { api, type BenchTarget, type Scenario, type ScenarioProvider } from './lib.js';

/*
 * The addon catalogue: pages, searches, a detail and the full list (plain and compressed) of
 * GET /api/addons over ADDON_BENCH_COUNT addons (default 2,000) with 10 releases and 2 screenshots
 * each, while downloads are counted in parallel. Rows are written straight into the service's
 * database (fast), then one write through the API clears the service's caches.
 * Growth: ADDON_BENCH_COUNT=2000|20000|100000 npm run bench -- --only addons
 */
const COUNT = Number(process.env.ADDON_BENCH_COUNT ?? 2000);
const RELEASES_PER_ADDON = 10;
const BATCH = 400;

/** [Chinese, English] word pairs that names and summaries are made of. */
const FEATURES: readonly (readonly [string, string])[] = [
  ['背包', 'Bag'],
  ['任务', 'Quest'],
  ['地图', 'Map'],
  ['施法条', 'Cast Bar'],
  ['伤害统计', 'Damage Meter'],
  ['姓名板', 'Nameplates'],
  ['动作条', 'Action Bars'],
  ['团队框架', 'Raid Frames'],
  ['拍卖行', 'Auction House'],
  ['冷却计时', 'Cooldown Timer'],
  ['聊天', 'Chat'],
  ['小地图', 'Minimap'],
  ['目标追踪', 'Target Tracker'],
  ['仇恨', 'Threat'],
  ['专业技能', 'Professions'],
  ['邮件', 'Mail'],
  ['坐骑', 'Mounts'],
  ['首领警报', 'Boss Alerts'],
  ['经验条', 'Experience Bar'],
  ['装备管理', 'Gear Manager'],
];
const QUALIFIERS: readonly (readonly [string, string])[] = [
  ['增强', 'Plus'],
  ['助手', 'Helper'],
  ['整合', 'Suite'],
  ['精简', 'Lite'],
  ['经典', 'Classic'],
  ['高级', 'Pro'],
  ['简易', 'Simple'],
  ['智能', 'Smart'],
];
const VERBS: readonly (readonly [string, string])[] = [
  ['自动整理', 'automatically organises'],
  ['清晰显示', 'clearly shows'],
  ['实时提醒', 'alerts you in real time about'],
  ['一键管理', 'manages with one click'],
  ['美化', 'restyles'],
];
const CATEGORIES = ['ui', 'quest', 'combat', 'general'];

const pick = <T>(list: readonly T[], n: number): T => list[n % list.length] as T;

/** A deterministic, realistic-looking bilingual addon. */
function addonText(i: number) {
  const feature = pick(FEATURES, i);
  const qualifier = pick(QUALIFIERS, Math.floor(i / FEATURES.length));
  const verb = pick(VERBS, Math.floor(i / 7));
  const other = pick(FEATURES, i * 7 + 3);
  return {
    nameZh: `${feature[0]}${qualifier[0]} ${i}`,
    nameEn: `${feature[1]} ${qualifier[1]} ${i}`,
    summaryZh: `${verb[0]}${feature[0]}，并与${other[0]}配合使用，适用于 1.18 客户端。`,
    summaryEn: `${feature[1]} ${qualifier[1]} ${verb[1]} your ${feature[1].toLowerCase()} and works with ${other[1]}; made for the 1.18 client.`,
    descriptionZh: `## ${feature[0]}${qualifier[0]}\n\n${verb[0]}${feature[0]}。支持拖动、缩放和配置文件。\n\n- 轻量，无需依赖\n- 支持中文与英文客户端\n- 输入 /${feature[1].toLowerCase().replace(/ /g, '')} 打开设置`,
    descriptionEn: `## ${feature[1]} ${qualifier[1]}\n\n${feature[1]} ${qualifier[1]} ${verb[1]} your ${feature[1].toLowerCase()}. Drag, scale and save profiles.\n\n- Lightweight, no dependencies\n- Works on Chinese and English clients\n- Type /${feature[1].toLowerCase().replace(/ /g, '')} for options`,
  };
}

async function inBatches<T>(rows: readonly T[], insert: (batch: T[]) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < rows.length; i += BATCH) await insert(rows.slice(i, i + BATCH));
}

/** Writes the catalogue straight into the running service's database. */
export async function seedCatalogue(target: BenchTarget, count: number): Promise<void> {
  const handle = await openDatabase(
    target.databaseUrl !== null
      ? { kind: 'postgres', url: target.databaseUrl }
      : { kind: 'sqlite', file: path.join(target.dataDir, 'app.db') },
  );
  const db = handle.db;
  try {
    const base = Date.parse('2025-01-01T00:00:00Z');
    const iso = (ms: number) => new Date(ms).toISOString();
    for (let start = 0; start < count; start += BATCH) {
      const addons: AddonRow[] = [];
      const releases: ReleaseRow[] = [];
      const screenshots: ScreenshotRow[] = [];
      for (let i = start; i < Math.min(count, start + BATCH); i += 1) {
        const id = `bench-addon-${i}`;
        const createdAt = base + i * 60_000;
        let total = 0;
        for (let r = 0; r < RELEASES_PER_ADDON; r += 1) {
          const downloads = (i * 31 + r * 17) % 500;
          total += downloads;
          releases.push({
            id: `${id}-r${r}`,
            addonId: id,
            version: `1.${r}.${i % 10}`,
            changelogZh: `修复了${pick(FEATURES, i + r)[0]}相关的问题；提升性能。`,
            changelogEn: `Fixed ${pick(FEATURES, i + r)[1]} issues; faster.`,
            downloadType: 'url',
            filePath: '',
            externalUrl: `https://cdn.example.test/addons/${i}/${r}.zip`,
            fileSize: 100_000 + i,
            sha256: null,
            gameVersion: '1.18.0',
            downloadCount: downloads,
            isLatest: r === RELEASES_PER_ADDON - 1 ? 1 : 0,
            wowVersion: '1.18',
            createdAt: iso(createdAt + r * 1000),
            publishAt: null,
            dependencies: '[]',
            counterSeq: 0,
            fileSignature: null,
          });
        }
        addons.push({
          id,
          slug: `bench-addon-${i}`,
          ...addonText(i),
          iconUrl: `/uploads/bench/icon-${i % 50}.png`,
          category: pick(CATEGORIES, i),
          published: i % 10 === 9 ? 0 : 1,
          totalDownloads: total,
          createdAt: iso(createdAt),
          updatedAt: iso(createdAt + RELEASES_PER_ADDON * 1000),
          counterSeq: 0,
        });
        for (let s = 0; s < 2; s += 1) {
          screenshots.push({
            id: `${id}-s${s}`,
            addonId: id,
            imageUrl: `/uploads/bench/shot-${i % 50}-${s}.png`,
            sortOrder: s,
            createdAt: iso(createdAt),
          });
        }
      }
      await db.insertInto('addons').values(addons).execute();
      await inBatches(releases, (b) => db.insertInto('releases').values(b).execute());
      await db.insertInto('screenshots').values(screenshots).execute();
    }
  } finally {
    await handle.close();
  }
  // One write through the API: bumps the content version, so every cache of the service reloads.
  await api(target, 'POST', '/api/addons', { slug: 'bench-marker', name: '基准标记', summary: '标记' });
}

/** Downloads counted per second while the catalogue is read (each moves the counters readers show). */
const DOWNLOADS_PER_SECOND = 50;

export const scenarios: ScenarioProvider = async (target) => {
  await seedCatalogue(target, COUNT);
  // Downloads are counted in parallel with every catalogue scenario (and its baseline): a counter
  // snapshot moves each second, so answers are re-rendered at most once a second as in production.
  const download = `${target.url}/api/download/bench-addon-7-r${RELEASES_PER_ADDON - 1}`;
  const background = () => {
    const downloading = setInterval(() => {
      void fetch(download, { redirect: 'manual' }).then(
        (r) => r.body?.cancel(),
        () => undefined,
      );
    }, 1000 / DOWNLOADS_PER_SECOND);
    return () => clearInterval(downloading);
  };
  const search = (term: string, lang = 'zh', more = '') =>
    `/api/addons?search=${encodeURIComponent(term)}&lang=${lang}${more}`;
  const n = `(${COUNT}, ${DOWNLOADS_PER_SECOND} downloads/s)`;
  const scenarios: Scenario[] = [
    { name: `addons page ${n}`, path: '/api/addons?limit=20' },
    { name: `addons page by downloads ${n}`, path: '/api/addons?limit=20&sort=downloads' },
    { name: `addons search zh "施法" first page ${n}`, path: search('施法', 'zh', '&limit=20') },
    // Every hit at once: one addon in nine (about 21 MB at 100,000 addons).
    { name: `addons search zh "施法" all hits ${n}`, path: search('施法'), connections: 4 },
    {
      name: `addons search en "cast bar" ranked page ${n}`,
      path: search('cast bar', 'en', '&sort=relevance&limit=20'),
    },
    { name: `addons search miss ${n}`, path: search('不存在的插件') },
    {
      name: `addons search new term each time ${n}`,
      path: search('zq0'),
      makePath: (i) => search(`zq${i}`),
    },
    { name: `addon detail ${n}`, path: '/api/addons/bench-addon-7?lang=en' },
    // The latency a website sees when the service is not saturated: at 32 connections on two shared
    // cores the p99 is mostly queueing (the bare server's own p99 is over 10 ms there).
    ...[
      ['page', '/api/addons?limit=20'],
      ['search zh "施法" first page', search('施法', 'zh', '&limit=20')],
      ['search miss', search('不存在的插件')],
    ].map(([what, path]) => ({ name: `addons ${what} light load ${n}`, path: path as string, connections: 4 })),
    { name: `addons full list ${n}`, path: '/api/addons', connections: 4 },
    // What browsers send: a list this large is answered in gzip (assembled from its blocks' segments).
    {
      name: `addons full list compressed ${n}`,
      path: '/api/addons',
      headers: { 'accept-encoding': 'gzip, deflate, br' },
      connections: 4,
    },
  ];
  return scenarios.map((scenario) => ({ ...scenario, background }));
};
