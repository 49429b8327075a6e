import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  admin,
  buildTestApp,
  createPackage,
  createVersion,
  multipartBody,
  type TestApp,
  upload,
} from './helpers/app.js';

/*
 * What a hostile client does to the service over a real socket (issue 9): malformed requests over
 * every operation of /openapi.json, raw bytes the HTTP parser refuses, and slow clients. Every
 * answer must be below 500 and every error `{error}` JSON; slow clients are dropped on time while
 * a fresh client is still answered within a second. HOSTILE_REQUESTS sets the fuzzing volume.
 */

const REQUESTS = Number(process.env.HOSTILE_REQUESTS ?? 10_000);
const HEADERS_TIMEOUT_MS = 1500;
const BODY_TIMEOUT_MS = 1500;

let t: TestApp;
let base = '';
let port = 0;
const ids: Record<string, string> = {};

beforeAll(async () => {
  t = await buildTestApp({
    HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
    BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS),
  });
  base = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
  port = Number(new URL(base).port);
  const file = await upload(t, 'setup.exe', 'x'.repeat(4096));
  const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器' });
  ids.id = pkg.id;
  ids.versionId = (await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath })).id;
  const addon = (await admin(t, 'POST', '/api/addons', { slug: 'fuzz-addon', name: '插件', summary: '简介' })).json();
  ids.addonId = addon.id;
  ids.releaseId = (
    await admin(t, 'POST', '/api/releases', { addonId: addon.id, version: '1', filePath: file.filePath })
  ).json().id;
  ids.slug = 'app-launcher';
}, 60_000);
afterAll(() => t.close());

interface Operation {
  method: string;
  path: string;
  bodyProperties: Record<string, { type?: string | string[] }>;
  queryNames: string[];
}

async function operations(): Promise<Operation[]> {
  const doc = (await (await fetch(`${base}/openapi.json`)).json()) as {
    paths: Record<string, Record<string, { requestBody?: unknown; parameters?: Array<{ in: string; name: string }> }>>;
  };
  const found: Operation[] = [];
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const body = op.requestBody as
        { content?: Record<string, { schema?: { properties?: Operation['bodyProperties'] } }> } | undefined;
      const schema = body?.content?.['application/json']?.schema;
      found.push({
        method: method.toUpperCase(),
        path,
        bodyProperties: schema?.properties ?? {},
        queryNames: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
      });
    }
  }
  return found;
}

/** The path with its parameters filled: real ids half the time, hostile segments otherwise. */
function fillPath(path: string, n: number): string {
  const hostile = [
    '%00',
    '%2e%2e',
    '..%2f..%2fetc%2fpasswd',
    '%ff%fe',
    'x'.repeat(3000),
    '%E4%B8',
    '\u4e2d',
    "'; drop table",
  ];
  return path.replace(/\{([^}]+)\}/g, (_m, name: string) =>
    n % 2 === 0 ? encodeURIComponent(ids[name] ?? ids.id ?? 'x') : (hostile[n % hostile.length] ?? 'x'),
  );
}

const ODD_VALUES: unknown[] = [
  123,
  -1,
  1.5,
  1e308,
  -0,
  Number.MAX_SAFE_INTEGER + 2,
  '',
  'x'.repeat(70_000),
  null,
  true,
  [],
  [1, 2],
  {},
  { $gt: '' },
  '\u0000',
  '\ud800',
  'javascript:alert(1)',
  '../../etc/passwd',
];

interface Mutation {
  headers?: Record<string, string>;
  body?: string | Blob;
  query?: string;
  method?: string;
}

const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

/** Mutation classes, each a way of breaking one request. */
const MUTATIONS: Array<(op: Operation, n: number) => Mutation> = [
  // wrong types, one field at a time
  (op, n) => {
    const fields = Object.keys(op.bodyProperties);
    const field = fields[n % Math.max(fields.length, 1)] ?? 'x';
    return { body: JSON.stringify({ [field]: ODD_VALUES[n % ODD_VALUES.length] }) };
  },
  () => ({ body: '{"unterminated": ' }),
  () => ({ body: new Blob([Uint8Array.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0xc3, 0x22, 0x7d])]) }),
  () => ({ body: `{"a":"${'x'.repeat(3 * 1024 * 1024)}"}` }),
  () => ({ body: nested(100_000) }),
  () => ({ body: '{"__proto__":{"isAdmin":true},"constructor":{"prototype":{"polluted":1}}}' }),
  (_op, n) => ({ body: ['1e999', '-0', '0x10', 'NaN', '9'.repeat(400), '1.0e-400'][n % 6] ?? '1' }),
  () => ({ headers: { range: 'bytes=999999999-1' } }),
  (_op, n) => ({
    headers: {
      range: ['bytes=-0', 'bytes=5-2', 'bytes=a-b', 'items=0-1', 'bytes=0-1,2-3,' + '4-5,'.repeat(500)][n % 5] ?? '',
    },
  }),
  () => ({ headers: { 'if-range': 'W/"nope"', range: 'bytes=0-1' } }),
  () => ({ headers: { 'if-none-match': '"' + 'a'.repeat(5000) } }),
  (_op, n) => ({
    headers: {
      'accept-language': ['*;q=x', ';;;,,,', 'zh;q=1.5, en;q=-1', 'x'.repeat(4000), 'en-US;q=0.9;q=0.8'][n % 5] ?? '',
    },
  }),
  (_op, n) => ({
    headers: {
      'content-type':
        ['text/xml', 'application/x-www-form-urlencoded', 'application/json; charset=latin1', 'image/png', ''][n % 5] ??
        '',
    },
    body: 'a=1',
  }),
  () => {
    const { payload, headers } = multipartBody('x.bin', 'content');
    return { headers, body: new Blob([payload.subarray(0, payload.length - 10)]) };
  },
  (_op, n) => ({
    query:
      [
        'lang=%ff',
        'lang[]=x&lang[]=y',
        'versionCode=1e3',
        'versionCode=-1',
        'limit=99999999999999999999',
        'slug=%00',
        'info=1&track=1&wow=%E4',
      ][n % 7] ?? '',
  }),
  (_op, n) => ({ method: ['PROPFIND', 'PATCH', 'OPTIONS', 'PURGE', 'PUT', 'DELETE'][n % 6] ?? 'PATCH' }),
];

function isErrorShape(text: string, contentType: string | null): boolean {
  if (!contentType?.includes('application/json')) return false;
  try {
    const body = JSON.parse(text) as Record<string, unknown>;
    return typeof body.error === 'string' && body.statusCode === undefined && body.message === undefined;
  } catch {
    return false;
  }
}

describe('malformed requests over every operation of /openapi.json', () => {
  it(`answers ${REQUESTS} of them below 500, every error as {error} JSON`, async () => {
    const ops = await operations();
    expect(ops.length).toBeGreaterThan(40);
    const failures: string[] = [];
    let sent = 0;
    let next = 0;
    const worker = async () => {
      for (let n = next++; n < REQUESTS; n = next++) {
        const op = ops[n % ops.length] as Operation;
        const mutation = (
          MUTATIONS[Math.floor(n / ops.length) % MUTATIONS.length] as (o: Operation, i: number) => Mutation
        )(op, n);
        const method = mutation.method ?? op.method;
        const hasBody = method !== 'GET' && method !== 'HEAD' && mutation.body !== undefined;
        const url = `${base}${fillPath(op.path, n)}${mutation.query ? `?${mutation.query}` : ''}`;
        const headers: Record<string, string> = {
          ...(n % 3 !== 0 ? { cookie: t.cookie } : {}),
          ...(hasBody ? { 'content-type': 'application/json' } : {}),
          ...mutation.headers,
        };
        try {
          const res = await fetch(url, { method, headers, ...(hasBody ? { body: mutation.body } : {}) });
          const text = await res.text();
          sent += 1;
          if (res.status >= 500) failures.push(`${res.status} ${method} ${url.slice(0, 120)}: ${text.slice(0, 200)}`);
          else if (res.status >= 400 && method !== 'HEAD' && !isErrorShape(text, res.headers.get('content-type')))
            failures.push(
              `${res.status} shape ${method} ${url.slice(0, 120)}: ${res.headers.get('content-type')} ${text.slice(0, 200)}`,
            );
        } catch (err) {
          failures.push(`no answer ${method} ${url.slice(0, 120)}: ${(err as Error).message}`);
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    expect(failures.slice(0, 20)).toEqual([]);
    expect(sent).toBe(REQUESTS);
    // The service is still up and answering.
    expect((await fetch(`${base}/api/server-time`)).status).toBe(200);
  }, 300_000);
});

/** Writes raw bytes, answers everything the server sent back before closing (or `ms` passed). */
function raw(bytes: string | Buffer, ms = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    const timer = setTimeout(() => (socket.destroy(), resolve(received)), ms);
    socket.on('data', (chunk) => (received += chunk.toString('latin1')));
    socket.on('close', () => (clearTimeout(timer), resolve(received)));
    socket.on(
      'error',
      (err) => (
        clearTimeout(timer),
        (err as NodeJS.ErrnoException).code === 'ECONNRESET' ? resolve(received) : reject(err)
      ),
    );
    socket.write(bytes);
  });
}

function parseRaw(answer: string): { status: number; contentType: string; body: string } {
  const [head = '', body = ''] = answer.split('\r\n\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
  const contentType = /\r\ncontent-type: ([^\r]+)/i.exec(head)?.[1] ?? '';
  return { status, contentType, body };
}

describe('raw requests the HTTP parser refuses', () => {
  const cases: Array<[name: string, bytes: string, status: number]> = [
    ['garbage request line', 'GARBAGE\r\n\r\n', 400],
    ['unknown method', 'BREW /api/server-time HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['headers too large', `GET /api/server-time HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
    ['URI too long', `GET /api/${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431],
    [
      'broken chunked body',
      'POST /api/launcher/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
      400,
    ],
    [
      'conflicting lengths',
      'POST /api/launcher/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}',
      400,
    ],
    ['NUL in the path', 'GET /api/software/\u0000 HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ['percent-NUL in the path', 'GET /api/software/%00/versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 400],
    ['undecodable path', 'GET /api/software/%E4%B8 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 400],
    ['missing Host', 'GET /api/server-time HTTP/1.1\r\nConnection: close\r\n\r\n', 400],
  ];
  for (const [name, bytes, status] of cases) {
    it(`${name} → ${status} {error}`, async () => {
      const answer = parseRaw(await raw(bytes));
      expect(answer.status, name).toBe(status);
      expect(answer.contentType).toContain('application/json');
      expect(isErrorShape(answer.body, answer.contentType), answer.body).toBe(true);
    });
  }
});

/** Milliseconds a fresh client waits for /api/server-time. */
async function freshClientWait(): Promise<number> {
  const started = performance.now();
  const res = await fetch(`${base}/api/server-time`, { headers: { connection: 'close' } });
  await res.text();
  expect(res.status).toBe(200);
  return performance.now() - started;
}

function connect(): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

describe('slow clients', () => {
  it('drops 500 slowloris and 2,000 idle connections on time while a fresh client is answered within a second', async () => {
    const sockets: net.Socket[] = [];
    const closed = new Set<net.Socket>();
    const answers: string[] = [];
    try {
      for (let i = 0; i < 2500; i++) {
        const socket = await connect();
        socket.on('error', () => undefined);
        socket.on('close', () => closed.add(socket));
        socket.on('data', (chunk) => answers.push(chunk.toString('latin1')));
        sockets.push(socket);
      }
      const slowloris = sockets.slice(0, 500);
      for (const socket of slowloris) socket.write('GET /api/server-time HTTP/1.1\r\nHost: x\r\n');
      const drip = setInterval(() => {
        for (const socket of slowloris) if (!socket.destroyed) socket.write(`X-Drip-${Math.random()}: 1\r\n`);
      }, 200);
      try {
        const waits: number[] = [];
        for (let i = 0; i < 5; i++) {
          waits.push(await freshClientWait());
          await new Promise((r) => setTimeout(r, 200));
        }
        expect(Math.max(...waits)).toBeLessThan(1000);
        // Headers that never end are cut off after the headers timeout (checked every second).
        await new Promise((r) => setTimeout(r, HEADERS_TIMEOUT_MS + 2500));
        expect(slowloris.filter((s) => closed.has(s)).length).toBe(500);
        expect(answers.some((a) => a.startsWith('HTTP/1.1 408') && a.includes('{"error":'))).toBe(true);
        // Connections that never sent a byte go the same way.
        expect(sockets.slice(500).filter((s) => closed.has(s)).length).toBe(2000);
        expect(await freshClientWait()).toBeLessThan(1000);
      } finally {
        clearInterval(drip);
      }
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  }, 60_000);

  it('cuts off a body that drips one byte at a time', async () => {
    const socket = await connect();
    let received = '';
    socket.on('data', (chunk) => (received += chunk.toString()));
    const closedAt = new Promise<number>((resolve) => socket.on('close', () => resolve(performance.now())));
    socket.on('error', () => undefined);
    const started = performance.now();
    socket.write(
      'POST /api/launcher/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{',
    );
    const drip = setInterval(() => socket.destroyed || socket.write(' '), 100);
    try {
      const elapsed = (await closedAt) - started;
      expect(elapsed).toBeGreaterThanOrEqual(BODY_TIMEOUT_MS - 100);
      expect(elapsed).toBeLessThan(BODY_TIMEOUT_MS + 2000);
      expect(received).not.toContain('200 OK');
    } finally {
      clearInterval(drip);
    }
  }, 20_000);

  it('keeps a connection whose bodies came whole, and cuts off a later one that drips on it', async () => {
    const socket = await connect();
    let received = '';
    socket.on('data', (chunk) => (received += chunk.toString()));
    let closedAt: number | null = null;
    socket.on('close', () => (closedAt = performance.now()));
    socket.on('error', () => undefined);
    const answered = async (count: number) => {
      while ((received.match(/HTTP\/1\.1 /g) ?? []).length < count) await new Promise((r) => setTimeout(r, 20));
    };
    const beat = '{"deviceId":"kept-alive"}';
    const post = (length: number) =>
      `POST /api/launcher/heartbeat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;
    // A whole body, then one the schema refuses (400): both read, neither may be cut off later.
    socket.write(post(beat.length) + beat);
    await answered(1);
    socket.write(post(14) + '{"deviceId":1}');
    await answered(2);
    await new Promise((r) => setTimeout(r, BODY_TIMEOUT_MS + 2000));
    expect(closedAt, received).toBeNull();
    socket.write('GET /api/server-time HTTP/1.1\r\nHost: x\r\n\r\n');
    await answered(3);
    expect(received.match(/HTTP\/1\.1 \d+/g)).toEqual(['HTTP/1.1 200', 'HTTP/1.1 400', 'HTTP/1.1 200']);
    // The same connection's next body drips: its deadline is its own, from its headers.
    const started = performance.now();
    socket.write(post(1000) + '{');
    const drip = setInterval(() => socket.destroyed || socket.write(' '), 100);
    try {
      while (closedAt === null) await new Promise((r) => setTimeout(r, 50));
      const elapsed = (closedAt as number) - started;
      expect(elapsed).toBeGreaterThanOrEqual(BODY_TIMEOUT_MS - 100);
      expect(elapsed).toBeLessThan(BODY_TIMEOUT_MS + 2000);
    } finally {
      clearInterval(drip);
    }
  }, 30_000);
});
