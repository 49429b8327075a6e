import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeForSearch, searchTerms } from '../src/modules/addons/catalogue.js';
import { BigramIndex, relevance } from '../src/modules/addons/search.js';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';

/** A small deterministic generator (tests must not depend on Math.random). */
function generator(seed: number) {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state / 2 ** 31;
  };
}

const SYLLABLES = [
  '地图',
  '任务',
  '助手',
  '插件',
  '背包',
  '战斗',
  '统计',
  'quest',
  'map',
  'bag',
  'ui',
  'Atlas',
  'ＢＡＧ',
  'loot',
  'x',
];

describe('BigramIndex', () => {
  it('finds exactly what a scan with includes finds, in Chinese and English, for 1- to many-character terms', () => {
    const random = generator(7);
    const pick = () => SYLLABLES[Math.floor(random() * SYLLABLES.length)] as string;
    const texts = Array.from({ length: 5000 }, () =>
      normalizeForSearch(Array.from({ length: 2 + Math.floor(random() * 6) }, pick).join(random() < 0.5 ? ' ' : '')),
    );
    const index = new BigramIndex(texts);
    const queries = [
      ...SYLLABLES,
      'a',
      '图',
      'q',
      '地图任务',
      'bag map',
      '背包 quest',
      'zz',
      '不存在',
      'questmap',
      'p地',
      ...Array.from({ length: 200 }, () =>
        `${pick()}${random() < 0.3 ? pick() : ''}`.slice(0, 1 + Math.floor(random() * 6)),
      ),
    ];
    for (const query of queries) {
      const terms = searchTerms(query);
      const expected = texts.flatMap((text, i) => (terms.every((t) => text.includes(t)) ? [i] : []));
      expect(index.matching(terms), query).toEqual(expected);
    }
  });
});

describe('relevance', () => {
  const entry = (nameZh: string, nameEn: string, summary: string) => ({
    names: [normalizeForSearch(nameZh), normalizeForSearch(nameEn)],
    searchText: normalizeForSearch([nameZh, nameEn, summary].join('\n')),
  });
  it('ranks a name equal to the term, then starting with it, then holding it, then the summary', () => {
    const table: [ReturnType<typeof entry>, string, number][] = [
      [entry('任务', 'Quest', ''), 'quest', 100],
      [entry('任务助手', 'Questie', ''), 'quest', 50],
      [entry('大任务', 'MyQuest', ''), 'quest', 20],
      [entry('地图', 'Map', 'shows quest givers'), 'quest', 5],
      [entry('地图', 'Map', ''), 'quest', 0],
      [entry('任务助手', 'Questie', ''), '任务', 50],
      [entry('任务助手', 'Questie', '地图'), 'questie 地图', 105],
    ];
    for (const [e, query, score] of table) expect(relevance(e, searchTerms(query)), query).toBe(score);
  });
});

describe('search over the API', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await buildTestApp();
    // Created in this order, so the contract's order (most recently updated first) is the reverse.
    for (const [slug, name, nameEn, summary, summaryEn] of [
      ['quest', '任务', 'Quest', '核心', 'core'],
      ['questie', '任务助手', 'Questie', '助手', 'helper'],
      ['map-quest', '地图', 'Map', '显示任务', 'shows quest givers'],
      ['bags', '背包', 'Bags', '整理', 'sorting'],
    ]) {
      const res = await admin(t, 'POST', '/api/addons', { slug, name, nameEn, summary, summaryEn });
      expect(res.statusCode).toBe(201);
    }
  });
  afterAll(() => t.close());

  const slugs = async (query: string) =>
    (await t.inject(`/api/addons?${query}`)).json<{ slug: string }[]>().map((a) => a.slug);

  it('keeps the contract order for a search, and ranks by relevance only when asked', async () => {
    expect(await slugs(`search=${encodeURIComponent('任务')}`)).toEqual(['map-quest', 'questie', 'quest']);
    expect(await slugs(`search=${encodeURIComponent('任务')}&sort=relevance`)).toEqual([
      'quest',
      'questie',
      'map-quest',
    ]);
    expect(await slugs('search=quest&sort=relevance')).toEqual(['quest', 'questie', 'map-quest']);
    expect(await slugs('search=quest')).toEqual(['map-quest', 'questie', 'quest']);
    // Without search every score is 0: the contract's order.
    expect(await slugs('sort=relevance')).toEqual(await slugs(''));
  });

  it('pages a ranked search', async () => {
    const first = await t.inject('/api/addons?search=quest&sort=relevance&limit=2');
    expect(first.json<{ slug: string }[]>().map((a) => a.slug)).toEqual(['quest', 'questie']);
    expect(first.headers['x-total-count']).toBe('3');
    const next = /^<[^?]+(\?[^>]+)>/.exec(String(first.headers.link))?.[1];
    expect(await slugs(next?.slice(1) ?? '')).toEqual(['map-quest']);
  });

  it('finds an addon created after the index was built, and no longer one deleted', async () => {
    expect(await slugs('search=loot')).toEqual([]);
    const created = await admin(t, 'POST', '/api/addons', {
      slug: 'loot',
      name: '拾取',
      nameEn: 'Loot',
      summary: '摘要',
    });
    expect(await slugs('search=loot')).toEqual(['loot']);
    expect(await slugs(`search=${encodeURIComponent('拾取')}`)).toEqual(['loot']);
    await admin(t, 'DELETE', `/api/addons/${created.json<{ id: string }>().id}`);
    expect(await slugs('search=loot')).toEqual([]);
  });
});
