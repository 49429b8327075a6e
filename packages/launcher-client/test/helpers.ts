/**
 * The real service on loopback, with a small proxy between it and the client that can tamper with,
 * cut off, refuse or replay what passes, and records every request it saw.
 */
import { spawn } from 'node:child_process';
import { createHash, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import fs from 'node:fs';
import http, { type IncomingHttpHeaders } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { buildApp } from '../../../src/app.js';
import { loadConfig } from '../../../src/config.js';
import { openDatabase } from '../../../src/db/index.js';
import { LocalStorage } from '../../../src/storage/local.js';
import {
  ADMIN,
  admin,
  buildTestApp,
  createPackage,
  createVersion,
  type TestApp,
  upload,
} from '../../../test/helpers/app.js';
import type { TrustedKey } from '../src/index.js';

export interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly at: number;
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** Send the headers and this many bytes of the body, then cut the connection (or `hold` it open). */
  cutAfter?: number;
  /** Keep the connection open after `cutAfter` bytes: for good (true), or until this promise settles, then cut it. */
  hold?: boolean | Promise<unknown>;
  /** Send this instead of `body`, chunked (no Content-Length), as long as the client reads. */
  stream?: () => AsyncIterable<Buffer>;
}

/**
 * Decides a request's answer: `upstream()` fetches the service's (`upstream(url)`: for another path
 * and query); undefined passes it through.
 */
export type Rule = (
  seen: Seen,
  upstream: (url?: string) => Promise<Answer>,
) => Promise<Answer | undefined> | Answer | undefined;

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

export class TamperProxy {
  readonly seen: Seen[] = [];
  rule: Rule | null = null;

  private constructor(
    private readonly server: http.Server,
    readonly url: string,
  ) {}

  static async start(target: string): Promise<TamperProxy> {
    const upstreamUrl = new URL(target);
    let proxy: TamperProxy | null = null;
    const server = http.createServer((req, res) => {
      void (async () => {
        const chunks: Buffer[] = [];
        for await (const chunk of req) chunks.push(chunk as Buffer);
        const body = Buffer.concat(chunks);
        const seen: Seen = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, at: Date.now() };
        proxy!.seen.push(seen);
        const upstream = (url = seen.url) => forward(upstreamUrl, { ...seen, url }, body);
        const answer = (await proxy!.rule?.(seen, upstream)) ?? (await upstream());
        const headers = Object.fromEntries(
          Object.entries(answer.headers).filter(([name, v]) => v !== undefined && !HOP_BY_HOP.has(name.toLowerCase())),
        );
        if (answer.stream !== undefined) {
          res.writeHead(answer.status, headers);
          const source = Readable.from(answer.stream());
          res.on('close', () => source.destroy());
          return void source.pipe(res);
        }
        res.writeHead(answer.status, { ...headers, 'content-length': String(answer.body.length) });
        if (answer.cutAfter === undefined) return void res.end(answer.body);
        res.write(answer.body.subarray(0, answer.cutAfter), () => {
          if (answer.hold instanceof Promise) void answer.hold.finally(() => res.socket?.destroy());
          else if (!answer.hold) setTimeout(() => res.socket?.destroy(), 20);
        });
      })().catch((err: unknown) => {
        res.destroy(err as Error);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = new TamperProxy(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return proxy;
  }

  /** The requests seen whose path starts with `prefix`. */
  requests(prefix: string): Seen[] {
    return this.seen.filter((s) => s.url.startsWith(prefix));
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The answer of the service at `target` to the request `seen` (with `body`), read whole. */
export function forward(target: URL, seen: Seen, body: Buffer = Buffer.alloc(0)): Promise<Answer> {
  return new Promise((resolve, reject) => {
    // The client's Host goes along, so the service's absolute URLs point at the proxy.
    const req = http.request(
      { host: target.hostname, port: target.port, method: seen.method, path: seen.url, headers: seen.headers },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 502, headers: { ...res.headers }, body: Buffer.concat(chunks) });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The service on loopback behind a proxy, with helpers to publish launcher versions. */
export interface Service {
  t: TestApp;
  direct: string;
  proxy: TamperProxy;
  keys(): Promise<TrustedKey[]>;
  /** A file of `keys()`, as the command's `--trust` reads it. */
  keysFile(): Promise<string>;
  /** A fresh state folder (removed by `close`). */
  stateDir(): string;
  close(): Promise<void>;
}

export async function startService(env: Record<string, string> = {}): Promise<Service> {
  const t = await buildTestApp(env);
  const direct = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
  const proxy = await TamperProxy.start(direct);
  const dirs: string[] = [];
  const keys = async () => {
    const listed = (await t.inject('/api/signing-keys')).json<TrustedKey[]>();
    return listed.map((k) => ({ keyId: k.keyId, publicKey: k.publicKey }));
  };
  const stateDir = () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-state-'));
    dirs.push(dir);
    return dir;
  };
  return {
    t,
    direct,
    proxy,
    keys,
    async keysFile() {
      const file = path.join(stateDir(), 'keys.json');
      fs.writeFileSync(file, JSON.stringify(await keys()));
      return file;
    },
    stateDir,
    async close() {
      await proxy.close();
      await t.close();
      for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Another instance of `t`'s service, on the same database (its own caches, so its own signatures),
 * listening on loopback: two instances behind one balancer.
 */
export async function startTwin(t: TestApp): Promise<{ url: string; close(): Promise<void> }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-twin-'));
  const config = loadConfig({ DATA_DIR: dir, ADMIN_USERNAME: ADMIN.username, ADMIN_PASSWORD: ADMIN.password });
  const database = await openDatabase(t.testDb.config);
  const storage = new LocalStorage(path.join(dir, 'uploads'));
  const app = await buildApp({ config: { ...config, database: t.testDb.config }, database, storage, logger: false });
  const url = await app.server.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    async close() {
      await app.close();
      await database.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A launcher package (`slug`) with an uploaded file per version; answers the package id. */
export async function launcherPackage(t: TestApp, slug: string): Promise<string> {
  return (await createPackage(t, { slug, name: slug })).id;
}

/** A version with its own file content (`bytes` long); answers its id, file bytes and sha256. */
export async function publishVersion(
  t: TestApp,
  packageId: string,
  code: number,
  extra: Record<string, unknown> = {},
  bytes = 2048,
) {
  const content = Buffer.alloc(bytes, `v${code}-${packageId}-`);
  const file = await upload(t, `setup-${code}.exe`, content);
  const created = await createVersion(t, packageId, {
    version: `1.${code}`,
    versionCode: code,
    filePath: file.filePath,
    ...extra,
  });
  return { id: created.id, content, sha256: file.sha256 };
}

export { admin };

/**
 * Node 24 (with zstd dictionaries in `zlib`, as the launcher's runtime may have) through npx, from
 * npm's cache or the registry: `[command, leading arguments]`. The service stays on the Node running
 * the tests (its native modules are built for it); Node 24 runs the client against it.
 */
export const nodeFromRegistry = (version: string) => ['npx', ['-y', '--prefer-offline', `node@${version}`]] as const;
export const NODE_24 = nodeFromRegistry('24');

/**
 * Signs `body` as the service signs its answer to the GET `requestUrl` (path and query as sent),
 * with `key` (an attacker's, in tests of refusal).
 */
export function signLikeTheService(
  body: Buffer,
  key: KeyObject,
  keyId: string,
  requestUrl: string,
  created = Math.floor(Date.now() / 1000),
) {
  const digest = `sha-256=:${createHash('sha256').update(body).digest('base64')}:`;
  const url = new URL(requestUrl, 'http://localhost');
  const components: [string, string][] = [['"@path";req', url.pathname]];
  if (url.pathname === '/api/software/check-update') {
    for (const name of ['slug', 'versionCode']) {
      components.push([`"@query-param";name="${name}";req`, encodeURIComponent(url.searchParams.get(name) ?? '')]);
    }
  } else components.push(['"@query";req', url.search || '?']);
  const covered = components.map(([id]) => id).join(' ');
  const params = `("content-digest" ${covered});created=${created};expires=${created + 3600};keyid="${keyId}";alg="ed25519"`;
  const lines = components.map(([id, value]) => `${id}: ${value}`).join('\n');
  const base = `"content-digest": ${digest}\n${lines}\n"@signature-params": ${params}`;
  return {
    'content-digest': digest,
    'signature-input': `sig1=${params}`,
    signature: `sig1=:${sign(null, Buffer.from(base), key).toString('base64')}:`,
  };
}

/**
 * A key pair the client is made to trust beside the service's keys, that signs whatever a test hands
 * it (with `signLikeTheService`): a service, or its signing key, gone wrong. What it signs must be
 * refused by the client's own checks.
 */
export function rogueKey(keyId = 'rogue'): { keyId: string; privateKey: KeyObject; trusted: TrustedKey } {
  const pair = generateKeyPairSync('ed25519');
  const raw = Buffer.from(pair.publicKey.export({ format: 'jwk' }).x ?? '', 'base64url').toString('base64');
  return { keyId, privateKey: pair.privateKey, trusted: { keyId, publicKey: raw } };
}

/** Files left in a state folder's downloads (none after a refused download). */
export function downloadsOf(stateDir: string): string[] {
  const dir = path.join(stateDir, 'downloads');
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, encoding: 'utf8' });
}

/** What a run of the `launcher-client` command printed, and how it exited. */
export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The last line of stdout as JSON (the answer), else null. */
  last: unknown;
  /** The last line of stderr as JSON (the failure's `{error, kind}`), else null. */
  failure: { error?: string; kind?: string } | null;
}

/** Runs the `launcher-client` command from its sources. */
export function runCli(args: string[]): Promise<CliRun> {
  const cli = path.resolve(import.meta.dirname, '../src/cli.ts');
  const lastJson = <T>(text: string): T | null => {
    try {
      return JSON.parse(text.trim().split('\n').at(-1) ?? '') as T;
    } catch {
      return null;
    }
  };
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', cli, ...args]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) =>
      resolve({ code, stdout, stderr, last: lastJson(stdout), failure: lastJson<CliRun['failure']>(stderr) }),
    );
  });
}
