import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SigningKey } from '../docs/examples/verify.js';
import { serverSecret } from '../src/db/secrets.js';
import { Cursors, pageOf } from '../src/http/paging.js';
import { chooseEncoding, RenderedJson } from '../src/http/rendered.js';
import { BLOCK_SIZE, ListBlocks } from '../src/modules/addons/blocks.js';
import type { CatalogueEntry } from '../src/modules/addons/catalogue.js';
import { Counters } from '../src/modules/addons/counters.js';
import { resorted, sortedBy } from '../src/modules/addons/order.js';
import { admin, buildTestApp, type TestApp } from './helpers/app.js';
import { digestHeaderOf, libraryVerifies, SIGNATURE_HEADERS, verified } from './helpers/signed.js';

let t: TestApp;

interface Listed {
  id: string;
  slug: string;
  name: string;
  totalDownloads: number;
  createdAt: string;
}

/** Where the catalogue is published: behind a proxy, under a path (signatures cover it in `@path`). */
const BASE = 'https://addons.example.test/base';
/** Addons with known names, downloads and creation order, in their own category. */
const NAMES = ['delta', 'Alpha', 'charlie', 'bravo', 'echo', 'golf', 'foxtrot'];

beforeAll(async () => {
  t = await buildTestApp({ PUBLIC_BASE_URL: BASE });
  for (const [i, name] of NAMES.entries()) {
    const res = await admin(t, 'POST', '/api/addons', {
      slug: `paged-${name.toLowerCase()}`,
      name: `名 ${name}`,
      nameEn: name,
      summary: '摘要'.repeat(40),
      category: 'paged',
    });
    expect(res.statusCode).toBe(201);
    // Distinct download totals, not in name or creation order.
    await t.database.db
      .updateTable('addons')
      .set({ totalDownloads: (i * 3) % 7 })
      .where('id', '=', res.json<Listed>().id)
      .execute();
  }
  // Counters are not content: a content write makes the catalogue reload with these totals.
  await admin(t, 'POST', '/api/addons', { slug: 'other-category', name: '别的', summary: '摘要' });
});
afterAll(() => t.close());

async function get(url: string, headers: Record<string, string> = {}) {
  return t.inject({ url, headers });
}

/** Every page of `url` followed through its `Link` headers. */
async function allPages(url: string): Promise<{ pages: Listed[][]; totals: string[] }> {
  const pages: Listed[][] = [];
  const totals: string[] = [];
  let next: string | null = url;
  while (next !== null) {
    const res = await get(next);
    expect(res.statusCode, `${next} ${res.body}`).toBe(200);
    pages.push(res.json<Listed[]>());
    totals.push(String(res.headers['x-total-count']));
    const link = res.headers.link as string | undefined;
    const match = link === undefined ? null : /^<([^>]+)>; rel="next"$/.exec(link);
    next = match?.[1] ? new URL(match[1]).pathname.replace(/^\/base/, '') + new URL(match[1]).search : null;
    expect(pages.length).toBeLessThan(20);
  }
  return { pages, totals };
}

describe('paging and sorting of GET /api/addons', () => {
  it('answers exactly as before without the new parameters: the whole list, no paging headers', async () => {
    const res = await get('/api/addons?category=paged');
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-total-count']).toBeUndefined();
    expect(res.headers.link).toBeUndefined();
    const names = res.json<Listed[]>().map((a) => a.name);
    // The contract's order: most recently updated first (here: the reverse of creation).
    expect(names).toEqual([...NAMES].reverse().map((n) => `名 ${n}`));
  });

  it('pages through the whole list with limit and the next link, each page once, with the total', async () => {
    const whole = (await get('/api/addons?category=paged')).json<Listed[]>();
    const { pages, totals } = await allPages('/api/addons?category=paged&limit=3');
    expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
    expect(totals).toEqual(['7', '7', '7']);
    expect(pages.flat().map((a) => a.id)).toEqual(whole.map((a) => a.id));
  });

  it('builds the next link from PUBLIC_BASE_URL, keeping the query', async () => {
    const res = await get('/api/addons?category=paged&limit=2&lang=en');
    const link = String(res.headers.link);
    const url = new URL(/^<([^>]+)>/.exec(link)?.[1] ?? '');
    expect(url.origin + url.pathname).toBe('https://addons.example.test/base/api/addons');
    expect(url.searchParams.get('category')).toBe('paged');
    expect(url.searchParams.get('lang')).toBe('en');
    expect(url.searchParams.get('limit')).toBe('2');
    expect(url.searchParams.get('cursor')).toMatch(/^[\w-]+\.[\w-]+$/);
  });

  it('sorts by downloads, name and creation, whole or paged alike', async () => {
    const order = async (query: string) => (await get(`/api/addons?category=paged&${query}`)).json<Listed[]>();
    const byDownloads = await order('sort=downloads');
    const totals = byDownloads.map((a) => a.totalDownloads);
    expect(totals).toEqual([...totals].sort((a, b) => b - a));
    expect(new Set(totals).size).toBe(NAMES.length);
    expect((await order('sort=name&lang=en')).map((a) => a.name)).toEqual([
      'Alpha',
      'bravo',
      'charlie',
      'delta',
      'echo',
      'foxtrot',
      'golf',
    ]);
    const created = (await order('sort=created')).map((a) => a.createdAt);
    expect(created).toEqual([...created].sort().reverse());
    for (const sort of ['downloads', 'name', 'created', 'updated']) {
      const { pages } = await allPages(`/api/addons?category=paged&sort=${sort}&limit=2`);
      expect(
        pages.flat().map((a) => a.id),
        sort,
      ).toEqual((await order(`sort=${sort}`)).map((a) => a.id));
    }
  });

  it('refuses bad paging parameters with 400 naming the parameter', async () => {
    for (const query of ['limit=0', 'limit=101', 'limit=abc', 'limit=1.5', 'sort=popular', 'cursor=']) {
      const res = await get(`/api/addons?${query}`);
      expect(res.statusCode, query).toBe(400);
      expect(res.json<{ error: string }>().error, query).toMatch(query.split('=')[0] as string);
    }
  });

  it('refuses a cursor that was changed, made up, or given to another query', async () => {
    const first = await get('/api/addons?category=paged&limit=2');
    const cursor = new URL(/^<([^>]+)>/.exec(String(first.headers.link))?.[1] ?? '').searchParams.get('cursor') ?? '';
    expect((await get(`/api/addons?category=paged&cursor=${cursor}`)).statusCode).toBe(200);
    const [text = '', tag = ''] = cursor.split('.');
    const payload = JSON.parse(Buffer.from(text, 'base64url').toString()) as Record<string, unknown>;
    const forged = Buffer.from(JSON.stringify({ ...payload, l: 100 })).toString('base64url');
    const flipped = `${text.slice(0, -1)}${text.endsWith('A') ? 'B' : 'A'}.${tag}`;
    for (const bad of [`${forged}.${tag}`, flipped, 'not-a-cursor', `${cursor}.x`, `${text}.`]) {
      const res = await get(`/api/addons?category=paged&cursor=${encodeURIComponent(bad)}`);
      expect(res.statusCode, bad).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(/cursor/);
    }
    // Another sort, filter or search: another query.
    for (const other of ['sort=name', 'published=false', 'search=delta']) {
      const res = await get(`/api/addons?category=paged&${other}&cursor=${cursor}`);
      expect(res.statusCode, other).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(/cursor/);
    }
  });

  it('keeps one shared cursor key per database, whichever instance asks first', async () => {
    const keys = await Promise.all(Array.from({ length: 5 }, () => serverSecret(t.database.db, 'test-shared')));
    expect(keys[0]).toHaveLength(32);
    expect(new Set(keys.map((k) => k.toString('hex'))).size).toBe(1);
    expect((await serverSecret(t.database.db, 'test-other')).equals(keys[0] as Buffer)).toBe(false);
  });
});

describe('paging of GET /api/releases', () => {
  it('pages the releases newest first, as the whole list has them', async () => {
    const addon = (await get('/api/addons?category=paged&limit=1')).json<Listed[]>()[0] as Listed;
    for (let i = 0; i < 5; i += 1) {
      const res = await admin(t, 'POST', '/api/releases', {
        addonId: addon.id,
        version: `1.${i}`,
        downloadType: 'url',
        externalUrl: 'https://cdn.example.test/r.zip',
      });
      expect(res.statusCode).toBe(201);
    }
    const whole = (await get(`/api/releases?addonId=${addon.id}`)).json<{ id: string }[]>();
    expect(whole).toHaveLength(5);
    const { pages, totals } = await allPages(`/api/releases?addonId=${addon.id}&limit=2`);
    expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
    expect(totals).toEqual(['5', '5', '5']);
    expect(pages.flat().map((r) => r.id)).toEqual(whole.map((r) => r.id));
    expect((await get('/api/releases?limit=500')).statusCode).toBe(400);
  });
});

describe('keyset pages', () => {
  it('starts after the last position even when items were added or removed before it', () => {
    const items = [
      { k: 9, id: 'a' },
      { k: 7, id: 'b' },
      { k: 7, id: 'c' },
      { k: 3, id: 'd' },
    ];
    const ordered = (list: typeof items) => ({
      items: list,
      descending: true,
      position: (x: (typeof items)[0]) => ({ key: x.k, id: x.id }),
    });
    const first = pageOf(ordered(items), { limit: 2, after: null });
    expect(first.items.map((x) => x.id)).toEqual(['a', 'b']);
    expect(first.next).toEqual({ key: 7, id: 'b' });
    // "a" is gone and "x" arrived before the position: the next page is still what followed "b".
    const changed = [{ k: 10, id: 'x' }, ...items.slice(1)];
    const second = pageOf(ordered(changed), { limit: 2, after: first.next });
    expect(second.items.map((x) => x.id)).toEqual(['c', 'd']);
    expect(second.next).toBeNull();
  });

  it('signs cursors per query and refuses them under another key', () => {
    const ours = new Cursors(Buffer.alloc(32, 1));
    const cursor = ours.encode('scope', { key: 'k', id: 'i' }, 5);
    expect(ours.decode('scope', cursor)).toEqual({ limit: 5, after: { key: 'k', id: 'i' } });
    expect(() => ours.decode('other', cursor)).toThrow(/another query/);
    expect(() => new Cursors(Buffer.alloc(32, 2)).decode('scope', cursor)).toThrow(/cursor/);
  });
});

describe('compression of catalogue answers', () => {
  it('chooses br before gzip, honouring q-values, * and identity', () => {
    const table: [string | undefined, string | null][] = [
      [undefined, null],
      ['', null],
      ['gzip', 'gzip'],
      ['gzip, deflate, br', 'br'],
      ['br;q=0.5, gzip', 'gzip'],
      ['br;q=0, gzip;q=0', null],
      ['identity', null],
      ['*', 'br'],
      ['*;q=0.1, gzip;q=0.2', 'gzip'],
      ['BR', 'br'],
      ['deflate', null],
    ];
    for (const [header, expected] of table) expect(chooseEncoding(header), String(header)).toBe(expected);
  });

  it('compresses an answer once and keeps it: every request gets the same bytes', async () => {
    const rendered = RenderedJson.of(Buffer.from(JSON.stringify({ a: 'x'.repeat(5000) })));
    const first = rendered.compressed('br');
    expect(rendered.compressed('br')).toBe(first);
    expect(zlib.brotliDecompressSync(await first).equals(rendered.body())).toBe(true);
    expect(zlib.gunzipSync(await rendered.compressed('gzip')).equals(rendered.body())).toBe(true);
  });

  it('assembles the gzip form of a large answer from the deflate segments of its parts', async () => {
    const text = (n: number) =>
      Buffer.from(
        JSON.stringify(Array.from({ length: n }, (_, i) => ({ i, s: `名字 ${i} `.repeat(i % 7) }))).slice(1, -1),
      );
    const shared = text(3000);
    const parts = [
      Buffer.from('['),
      shared,
      Buffer.from(','),
      Buffer.alloc(0),
      text(10),
      Buffer.from(','),
      text(700),
      Buffer.from(']'),
    ];
    const inParts = new RenderedJson(parts, {}, { etag: 'W/"x"' });
    expect(inParts.encodings).toEqual(['gzip']);
    const gz = Buffer.concat(await inParts.gzipParts());
    expect(inParts.gzipParts()).toBe(inParts.gzipParts());
    // A standard gzip stream: any decoder reads the whole body (the CRC and length are checked).
    expect(zlib.gunzipSync(gz).equals(inParts.body())).toBe(true);
    expect(gz.length).toBeLessThan(inParts.length / 4);
    // Each part is a segment compressed on its own, so another rendering sharing a part holds its
    // segment verbatim.
    const segment = zlib.deflateRawSync(shared, { finishFlush: zlib.constants.Z_SYNC_FLUSH });
    expect(gz.includes(segment)).toBe(true);
    const other = new RenderedJson([Buffer.from('['), shared, Buffer.from(']')], {}, { etag: 'W/"y"' });
    const otherGz = Buffer.concat(await other.gzipParts());
    expect(zlib.gunzipSync(otherGz).equals(other.body())).toBe(true);
    expect(otherGz.includes(segment)).toBe(true);
  });

  it('sends the list, the detail and the releases compressed when asked, with Vary, decoding to the same JSON', async () => {
    const slug = (await get('/api/addons?category=paged&limit=1')).json<Listed[]>()[0]?.slug ?? '';
    for (const url of ['/api/addons', `/api/addons/${slug}`, '/api/releases']) {
      const plain = await get(url);
      expect(plain.headers['content-encoding'], url).toBeUndefined();
      expect(String(plain.headers.vary)).toMatch(/Accept-Encoding/);
      expect(plain.rawPayload.length, url).toBeGreaterThan(1024);
      const br = await get(url, { 'accept-encoding': 'gzip, br' });
      expect(br.headers['content-encoding'], url).toBe('br');
      expect(String(br.headers.vary)).toMatch(/Accept-Encoding/);
      expect(br.rawPayload.length).toBeLessThan(plain.rawPayload.length);
      expect(zlib.brotliDecompressSync(br.rawPayload).equals(plain.rawPayload), url).toBe(true);
      const gz = await get(url, { 'accept-encoding': 'gzip' });
      expect(gz.headers['content-encoding']).toBe('gzip');
      expect(zlib.gunzipSync(gz.rawPayload).equals(plain.rawPayload), url).toBe(true);
      // Each variant has its own validator, and revalidates to a 304.
      expect(br.headers.etag).not.toBe(plain.headers.etag);
      const again = await get(url, { 'accept-encoding': 'br', 'if-none-match': String(br.headers.etag) });
      expect(again.statusCode).toBe(304);
    }
  });

  it('leaves small answers uncompressed', async () => {
    const res = await get('/api/addons?category=none', { 'accept-encoding': 'br' });
    expect(res.body).toBe('[]');
    expect(res.headers['content-encoding']).toBeUndefined();
  });

  it('signs each encoding over its bytes as sent, once: the digest is of the compressed bytes', async () => {
    const keys = (await get('/api/signing-keys')).json<SigningKey[]>();
    const slug = (await get('/api/addons?category=paged&limit=1')).json<Listed[]>()[0]?.slug ?? '';
    for (const url of ['/api/addons', `/api/addons/${slug}`, '/api/releases', '/api/addons?category=paged&limit=2']) {
      const digests = new Set<string>();
      for (const encoding of [undefined, 'br', 'gzip']) {
        const res = await get(url, encoding === undefined ? {} : { 'accept-encoding': encoding });
        expect(res.headers['content-encoding'], url).toBe(encoding);
        expect(res.headers['content-digest'], url).toBe(digestHeaderOf(res.rawPayload));
        digests.add(String(res.headers['content-digest']));
        expect(verified(res, keys, BASE), url).toBe(true);
        expect(await libraryVerifies(res, keys[0]!, BASE), url).toBe(true);
        // Signed once, when first sent: the next request gets the same headers.
        const again = await get(url, encoding === undefined ? {} : { 'accept-encoding': encoding });
        for (const name of SIGNATURE_HEADERS) expect(again.headers[name], url).toBe(res.headers[name]);
      }
      expect(digests.size, url).toBe(3);
    }
  });
});

describe('a large list (over 8 MiB), kept in blocks and streamed', () => {
  let big: TestApp;
  const COUNT = 600;
  beforeAll(async () => {
    big = await buildTestApp();
    const at = new Date().toISOString();
    const rows = Array.from({ length: COUNT }, (_, i) => ({
      id: `big-${String(i).padStart(3, '0')}`,
      slug: `big-${i}`,
      nameZh: `大 ${i}`,
      nameEn: `Big ${i}`,
      summaryZh: '大',
      summaryEn: 'big',
      descriptionZh: '',
      descriptionEn: `${'long text '.repeat(1_500)}${i}`,
      iconUrl: null,
      category: 'big',
      published: 1,
      totalDownloads: i,
      createdAt: at,
      updatedAt: at,
      counterSeq: 0,
    }));
    for (let i = 0; i < rows.length; i += 50)
      await big.database.db
        .insertInto('addons')
        .values(rows.slice(i, i + 50))
        .execute();
    // A write through the API: the catalogue reloads with these rows.
    await admin(big, 'POST', '/api/addons', { slug: 'big-marker', name: '标记', summary: '摘要' });
  });
  afterAll(() => big.close());

  it('streams the same JSON with its own validator and a signature of the body, and gzips it from its blocks', async () => {
    const keys = (await big.inject('/api/signing-keys')).json<SigningKey[]>();
    const res = await big.inject('/api/addons?category=big');
    expect(res.statusCode).toBe(200);
    expect(res.rawPayload.length).toBeGreaterThan(8 * 1024 * 1024);
    expect(Number(res.headers['content-length'])).toBe(res.rawPayload.length);
    const listed = res.json<{ id: string; totalDownloads: number }[]>();
    expect(listed).toHaveLength(COUNT);
    expect(res.headers['content-digest']).toBe(digestHeaderOf(res.rawPayload));
    expect(verified(res, keys)).toBe(true);
    expect(await libraryVerifies(res, keys[0]!)).toBe(true);
    const etag = String(res.headers.etag);
    expect(etag).toMatch(/^W\/"/);
    const again = await big.inject({ url: '/api/addons?category=big', headers: { 'if-none-match': etag } });
    expect(again.statusCode).toBe(304);
    for (const name of SIGNATURE_HEADERS) expect(again.headers[name]).toBeUndefined();
    const head = await big.inject({ method: 'HEAD', url: '/api/addons?category=big' });
    expect(head.statusCode).toBe(200);
    for (const name of SIGNATURE_HEADERS) expect(head.headers[name]).toBeUndefined();
    const gz = await big.inject({ url: '/api/addons?category=big', headers: { 'accept-encoding': 'br, gzip' } });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(String(gz.headers.vary)).toMatch(/Accept-Encoding/);
    const decoded = zlib.gunzipSync(gz.rawPayload);
    expect(decoded.equals(res.rawPayload)).toBe(true);
    expect(gz.rawPayload.length).toBeLessThan(res.rawPayload.length / 10);
    expect(gz.headers['content-digest']).toBe(digestHeaderOf(gz.rawPayload));
    expect(verified(gz, keys)).toBe(true);
    expect(await libraryVerifies(gz, keys[0]!)).toBe(true);
    expect(gz.headers.etag).not.toBe(etag);
    expect(Number(gz.headers['content-length'])).toBe(gz.rawPayload.length);
    const gzAgain = await big.inject({
      url: '/api/addons?category=big',
      headers: { 'accept-encoding': 'gzip', 'if-none-match': String(gz.headers.etag) },
    });
    expect(gzAgain.statusCode).toBe(304);
    // brotli is not offered for a large answer: a client accepting only br reads it plain.
    const brOnly = await big.inject({ url: '/api/addons?category=big', headers: { 'accept-encoding': 'br' } });
    expect(brOnly.headers['content-encoding']).toBeUndefined();
    expect(brOnly.rawPayload.equals(res.rawPayload)).toBe(true);
  });

  it('shows a counted download within 2 seconds, re-rendering only what changed, with a new validator', async () => {
    const addonId = 'big-300';
    const release = await admin(big, 'POST', '/api/releases', {
      addonId,
      version: '1.0',
      downloadType: 'url',
      externalUrl: 'https://cdn.example.test/big.zip',
    });
    expect(release.statusCode).toBe(201);
    const keys = (await big.inject('/api/signing-keys')).json<SigningKey[]>();
    const before = await big.inject('/api/addons?category=big');
    const shown = (res: typeof before) =>
      res.json<{ id: string; totalDownloads: number }[]>().find((a) => a.id === addonId)?.totalDownloads;
    const start = shown(before) ?? -1;
    expect((await big.inject(`/api/download/${release.json<{ id: string }>().id}`)).statusCode).toBe(302);
    const counted = Date.now();
    let after = before;
    while (shown(after) === start && Date.now() - counted < 2_500) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      after = await big.inject('/api/addons?category=big');
    }
    expect(shown(after)).toBe(start + 1);
    expect(Date.now() - counted).toBeLessThan(2_100);
    expect(after.headers.etag).not.toBe(before.headers.etag);
    expect(verified(after, keys)).toBe(true);
    expect(after.headers['content-digest']).not.toBe(before.headers['content-digest']);
    const gz = await big.inject({ url: '/api/addons?category=big', headers: { 'accept-encoding': 'gzip' } });
    expect(zlib.gunzipSync(gz.rawPayload).equals(after.rawPayload)).toBe(true);
    expect(verified(gz, keys)).toBe(true);
    // Everything but the changed addon is byte for byte as before.
    const elements = (res: typeof before) => res.json<unknown[]>().map((e) => JSON.stringify(e));
    const previous = elements(before);
    const changed = elements(after).filter((e, i) => e !== previous[i]);
    expect(changed).toHaveLength(1);
    expect(changed[0]).toContain(addonId);
  });

  it('during a rotation, both keys sign every encoding, small and large: an independent RFC 9421 library verifies each', async () => {
    const pinned = (await big.inject('/api/signing-keys')).json<SigningKey[]>();
    expect((await admin(big, 'POST', '/api/admin/signing-keys/rotate')).statusCode).toBe(201);
    const listed = (await big.inject('/api/signing-keys')).json<SigningKey[]>();
    expect(listed.map((k) => k.keyId)).toEqual([listed[0]!.keyId, pinned[0]!.keyId]);
    const cases: [string, string | undefined][] = [
      ['/api/addons?category=big', undefined],
      ['/api/addons?category=big', 'gzip'],
      ['/api/addons/big-1', undefined],
      ['/api/addons/big-1', 'br'],
      ['/api/addons/big-1', 'gzip'],
    ];
    for (const [url, encoding] of cases) {
      const res = await big.inject({ url, headers: encoding === undefined ? {} : { 'accept-encoding': encoding } });
      const label = `${url} ${encoding ?? 'identity'}`;
      expect(res.headers['content-encoding'], label).toBe(encoding);
      expect(res.headers['content-digest'], label).toBe(digestHeaderOf(res.rawPayload));
      expect(String(res.headers['signature-input']).match(/sig\d+=/g), label).toEqual(['sig1=', 'sig2=']);
      for (const key of listed) {
        expect(await libraryVerifies(res, key), `${label} ${key.keyId}`).toBe(true);
        expect(verified(res, [key]), `${label} ${key.keyId}`).toBe(true);
      }
    }
  });
});

describe('whole-list blocks', () => {
  type Item = { id: string; n: number };
  const items: Item[] = Array.from({ length: 600 }, (_, i) => ({ id: `i${i}`, n: i }));
  const counting = () => {
    const renderer = {
      rendered: 0,
      identity: (item: Item) => item.id,
      stamp: (item: Item) => item.n,
      render: (item: Item) => {
        renderer.rendered += 1;
        return JSON.stringify(item);
      },
    };
    return renderer;
  };

  it('cuts a list into blocks of 256, reuses unchanged ones and re-renders a block whose stamp changed', () => {
    const lists = new ListBlocks(1 << 30);
    const r = counting();
    const first = lists.parts('all', items, r);
    expect(Buffer.concat(first).toString()).toBe(JSON.stringify(items));
    expect(first.filter((p) => p.length > 1)).toHaveLength(Math.ceil(items.length / BLOCK_SIZE));
    expect(r.rendered).toBe(600);
    const changed = items.map((item) => (item.id === 'i300' ? { ...item, n: -1 } : item));
    const second = lists.parts('all', changed, r);
    expect(Buffer.concat(second).toString()).toBe(JSON.stringify(changed));
    expect(r.rendered).toBe(600 + BLOCK_SIZE);
    // The same Buffers where nothing changed: renderings share them (and their deflate segments).
    expect(second.map((p, i) => p === first[i])).toEqual(first.map((p, i) => i !== 3));
    // Another element in a place (another order under the same key) re-renders its block.
    const swapped = [...changed];
    [swapped[0], swapped[1]] = [swapped[1] as Item, swapped[0] as Item];
    expect(Buffer.concat(lists.parts('all', swapped, r)).toString()).toBe(JSON.stringify(swapped));
    expect(r.rendered).toBe(600 + 2 * BLOCK_SIZE);
    // A shorter list keeps nothing stale.
    expect(Buffer.concat(lists.parts('all', changed.slice(0, 10), r)).toString()).toBe(
      JSON.stringify(changed.slice(0, 10)),
    );
    expect(Buffer.concat(lists.parts('empty', [], r)).toString()).toBe('[]');
  });

  it('keeps lists within its budget, dropping the least recently used first', () => {
    const one = Buffer.concat(new ListBlocks(1 << 30).parts('x', items, counting())).length;
    const lists = new ListBlocks(one * 2);
    const r = counting();
    lists.parts('a', items, r);
    lists.parts('b', items, r);
    lists.parts('a', items, r);
    expect(r.rendered).toBe(1200);
    lists.parts('c', items, r);
    // b was the least recently used: it went; a stayed.
    lists.parts('a', items, r);
    expect(r.rendered).toBe(1800);
    lists.parts('b', items, r);
    expect(r.rendered).toBe(2400);
  });
});

describe('counter snapshots', () => {
  it('show the rows counted since the catalogue was loaded, and never change under a reader', () => {
    const loaded = Counters.of(5);
    expect(loaded.version).toBe(5);
    expect(loaded.total('a', 3)).toBe(3);
    const next = loaded.after(7, {
      totals: [{ id: 'a', totalDownloads: 4 }],
      releases: [{ id: 'r', downloadCount: 2 }],
    });
    expect(next.version).toBe(7);
    expect([next.total('a', 3), next.releaseCount('r', 1), next.total('b', 9)]).toEqual([4, 2, 9]);
    expect([loaded.total('a', 3), loaded.releaseCount('r', 1)]).toEqual([3, 1]);
  });

  it('fold many changes together and keep the newest value of each', () => {
    let counters = Counters.of(0);
    const held: Counters[] = [];
    for (let round = 1; round <= 5; round += 1) {
      const totals = Array.from({ length: 1_500 }, (_, i) => ({
        id: `a${(i * round) % 3_000}`,
        totalDownloads: round * 10_000 + i,
      }));
      counters = counters.after(round, { totals, releases: [] });
      held.push(counters);
    }
    for (let i = 0; i < 3_000; i += 1) {
      // The newest round that counted addon i (rounds count i*round mod 3000), else the loaded value.
      let expected = -1;
      for (let round = 1; round <= 5; round += 1) {
        for (let j = 0; j < 1_500; j += 1) if ((j * round) % 3_000 === i) expected = round * 10_000 + j;
      }
      expect(counters.total(`a${i}`, -1)).toBe(expected);
    }
    // An older snapshot still shows its own values.
    expect(held[0]?.total('a2', -1)).toBe(10_002);
  });
});

describe('the order by downloads', () => {
  it('is reordered after counts change exactly as a full sort would order it', () => {
    const entries = Array.from(
      { length: 2_000 },
      (_, i) => ({ addon: { id: `a${String((i * 7919) % 2_000).padStart(4, '0')}` } }) as unknown as CatalogueEntry,
    );
    const counts = new Map(entries.map((e, i) => [e.addon.id, (i * 31) % 50]));
    const key = (e: CatalogueEntry) => counts.get(e.addon.id) ?? 0;
    let held = sortedBy(entries, key, true);
    for (let round = 1; round <= 30; round += 1) {
      // Some addons downloaded (some to counts others already have: ties are ordered by id).
      for (let j = 0; j < (round * 13) % 97; j += 1) {
        const id = entries[(round * 131 + j * 17) % entries.length]?.addon.id ?? '';
        counts.set(id, (counts.get(id) ?? 0) + 1 + (j % 3));
      }
      held = resorted(held, key, true);
      const full = sortedBy(entries, key, true);
      expect(held.items.map((e) => e.addon.id)).toEqual(full.items.map((e) => e.addon.id));
      expect(held.keys).toEqual(full.keys);
    }
    expect(sortedBy(entries, (e) => e.addon.id, false).items.map((e) => e.addon.id)).toEqual(
      entries.map((e) => e.addon.id).sort(),
    );
  });
});
