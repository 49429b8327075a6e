import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp } from '../../../test/helpers/app.js';
import { apiToken, listen } from '../../../test/helpers/tus.js';
import { gameTrustedComment } from 'patchwell-client/minisign';
import { generateKeyPair, parseSecretKey, signFile } from '../src/minisign.js';
import { errorOf, type Run, startCli } from './cli-process.js';
import { forward } from './forward.js';

/**
 * `launcher-publish game` against the real service (APP_NAME=acme) behind a proxy that counts chunk
 * uploads and can answer like a busy proxy first.
 */

const MiB = 1024 * 1024;
let t: TestApp;
let token: string;
let server: string;
let proxy: http.Server;
let dir: string;
let keys: { pub: string; key: string };
/** `failing`: a prefix of `METHOD /path` answered with the `failures` statuses (one each) first. */
const proxied = { chunkPuts: 0, putBytes: 0, failures: [] as number[], failing: '', refusedPuts: 0 };

beforeAll(async () => {
  const pair = await generateKeyPair('');
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lp-game-'));
  keys = { pub: path.join(dir, 'publisher.pub'), key: path.join(dir, 'publisher.key') };
  fs.writeFileSync(keys.pub, pair.publicKeyFile);
  fs.writeFileSync(keys.key, pair.secretKeyFile);
  t = await buildTestApp({ APP_NAME: 'acme', PUBLISHER_KEYS: keys.pub });
  const base = new URL(await listen(t));
  token = await apiToken(t);
  proxy = http.createServer((req, res) => {
    if (`${req.method} ${req.url}`.startsWith(proxied.failing) && proxied.failures.length > 0) {
      const status = proxied.failures.shift() ?? 503;
      if (req.method === 'PUT') proxied.refusedPuts += 1;
      req.resume();
      res.writeHead(status, { 'retry-after': '0', 'content-type': 'text/html' }).end('<html>busy</html>');
      return;
    }
    if (req.method === 'PUT' && req.url?.startsWith('/api/admin/game/chunks/')) proxied.chunkPuts += 1;
    forward(base, req, res, (bytes) => (proxied.putBytes += bytes));
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  server = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => proxy.close(resolve));
  await t.close();
  fs.rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => Object.assign(proxied, { chunkPuts: 0, putBytes: 0, failures: [], failing: '', refusedPuts: 0 }));

const run = (args: string[], env: Record<string, string> = {}): Promise<Run> =>
  startCli(args, { LAUNCHER_TOKEN: token, LAUNCHER_PUBLISH_STATE: path.join(dir, 'state.json'), ...env }).done;

const gameArgs = (client: string, code: number, extra: string[] = []) => [
  'game',
  ...['--server', server, '--dir', client, '--version', `1.18.${code}`],
  ...['--build-code', String(code), '--sign-key', keys.key, ...extra],
];

interface Answer {
  build: { version: string; buildCode: number };
  files: number;
  chunks: number;
  uploadedChunks: number;
  uploadedBytes: number;
  totalBytes: number;
}

const answerOf = (result: Run): Answer => JSON.parse(result.stdout.trim().split('\n').at(-1) ?? '') as Answer;

/** A small client: a large MPQ-like file, an executable, small files, an empty one, settings, logs. */
function client(name: string): string {
  const root = path.join(dir, name);
  const write = (rel: string, bytes: Buffer | string, mode = 0o644) => {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), bytes, { mode });
  };
  write('WoW.exe', randomBytes(300_000), 0o755);
  write('Data/common.MPQ', randomBytes(12 * MiB));
  write('Data/patch-acme-1.mpq', randomBytes(700_000));
  write('Data/empty.txt', '');
  write('realmlist.wtf', 'set realmlist logon.example.test\n');
  write('WTF/Config.wtf', 'SET locale "zhCN"\n');
  write('Logs/today.log', 'not published');
  write('Interface/AddOns/Mine/Mine.toc', '## Title: mine');
  return root;
}

describe('launcher-publish game', () => {
  let root: string;

  it("first publish: walks, cuts, uploads every chunk once and creates the signed build, named for the service's APP_NAME", async () => {
    root = client('client');
    const result = await run(
      gameArgs(root, 1, [
        ...['--exclude', 'Logs/**', '--exclude', 'Interface/**'],
        ...['--initial', 'WTF/Config.wtf', '--remove', 'Data/patch-old-*.mpq'],
        ...['--changelog-zh', '首个', '--changelog-en', 'First'],
      ]),
    );
    expect(result.code, result.stderr).toBe(0);
    const answer = answerOf(result);
    const manifestText = (await t.inject('/api/game/builds/1/manifest')).body;
    const manifest = JSON.parse(manifestText) as {
      app: string;
      files: { path: string; executable?: boolean; policy?: string; chunks: [string, number][] }[];
      remove: string[];
    };
    expect(manifest.app).toBe('acme');
    expect(manifest.remove).toEqual(['Data/patch-old-*.mpq']);
    expect(manifest.files.map((f) => f.path)).toEqual([
      'Data/common.MPQ',
      'Data/empty.txt',
      'Data/patch-acme-1.mpq',
      'WTF/Config.wtf',
      'WoW.exe',
      'realmlist.wtf',
    ]);
    expect(manifest.files.find((f) => f.path === 'WoW.exe')?.executable).toBe(true);
    expect(manifest.files.find((f) => f.path === 'WTF/Config.wtf')?.policy).toBe('initial');
    expect(manifest.files.find((f) => f.path === 'Data/empty.txt')?.chunks).toEqual([]);
    const distinct = new Set(manifest.files.flatMap((f) => f.chunks.map(([sha256]) => sha256)));
    const totalBytes = 12 * MiB + 300_000 + 700_000 + 33 + 18;
    expect(answer).toEqual({
      build: { version: '1.18.1', buildCode: 1 },
      files: 6,
      chunks: distinct.size,
      uploadedChunks: distinct.size,
      uploadedBytes: totalBytes,
      totalBytes,
    });
    expect(proxied.chunkPuts).toBe(distinct.size);
    expect(proxied.putBytes).toBe(totalBytes);
    // Signed with the trusted comment the service checks (PUBLISHER_KEYS is set).
    const build = (await admin(t, 'GET', '/api/admin/game/builds')).json<{ manifestSignature: string }[]>()[0];
    const sha256 = createHash('sha256').update(manifestText).digest('hex');
    expect(build?.manifestSignature).toContain(
      `trusted comment: ${gameTrustedComment({ app: 'acme', buildCode: 1, sha256 })}`,
    );
  });

  it('a rerun of the same folder uploads nothing and creates nothing new (--app may repeat the APP_NAME)', async () => {
    const args = gameArgs(root, 1, [
      ...['--app', 'acme', '--exclude', 'Logs/**', '--exclude', 'Interface/**'],
      ...['--initial', 'WTF/Config.wtf', '--remove', 'Data/patch-old-*.mpq'],
      ...['--changelog-zh', '首个', '--changelog-en', 'First'],
    ]);
    const result = await run(args);
    expect(result.code, result.stderr).toBe(0);
    expect(answerOf(result)).toMatchObject({ uploadedChunks: 0, uploadedBytes: 0, files: 6 });
    expect(proxied.chunkPuts).toBe(0);
    expect((await admin(t, 'GET', '/api/admin/game/builds')).json<unknown[]>()).toHaveLength(1);

    // The same buildCode with another folder: the documented conflict, nothing uploaded.
    fs.writeFileSync(path.join(root, 'realmlist.wtf'), 'set realmlist other.example.test\n');
    const other = await run(args);
    expect(other.code).toBe(1);
    expect(errorOf(other)).toMatch(/^conflict: buildCode 1 already exists with another manifest/);
    expect(proxied.chunkPuts).toBe(0);
  });

  it('a changed file uploads only its changed chunks (1 MiB rewritten, 1 MiB inserted), through a flaky proxy', async () => {
    const big = path.join(root, 'Data/common.MPQ');
    const bytes = fs.readFileSync(big);
    randomBytes(MiB).copy(bytes, 2 * MiB);
    fs.writeFileSync(big, Buffer.concat([bytes.subarray(0, 8 * MiB), randomBytes(MiB), bytes.subarray(8 * MiB)]));
    proxied.failing = 'PUT /api/admin/game/chunks/';
    proxied.failures = [503, 429, 502];
    const result = await run(gameArgs(root, 2, ['--exclude', 'Logs/**', '--exclude', 'Interface/**']));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr.match(/retry \d\/5 in 0 s: PUT \/api\/admin\/game\/chunks\/[0-9a-f]{64}: \d+/g)).toHaveLength(
      3,
    );
    const answer = answerOf(result);
    expect(answer.uploadedBytes).toBeGreaterThan(2 * MiB);
    // Each change costs the chunks around it (at most 4 MiB each), never the whole file again.
    expect(answer.uploadedBytes).toBeLessThan(9 * MiB);
    expect(answer.totalBytes).toBeGreaterThan(13 * MiB);
    expect(proxied.putBytes).toBe(answer.uploadedBytes);
    const builds = (await admin(t, 'GET', '/api/admin/game/builds')).json<{ buildCode: number }[]>();
    expect(builds.map((b) => b.buildCode)).toEqual([2, 1]);
  });

  it('chunk uploads that fail for good: the run ends with the error as its last line (after the uploads under way), no build', async () => {
    const stops = client('stops');
    proxied.failing = 'PUT /api/admin/game/chunks/';
    proxied.failures = Array<number>(500).fill(503);
    const result = await run(gameArgs(stops, 7, ['--exclude', 'Logs/**', '--exclude', 'Interface/**']));
    expect(result.code).toBe(1);
    expect(errorOf(result)).toMatch(/^PUT \/api\/admin\/game\/chunks\/[0-9a-f]{64}: 503/);
    // The four uploads under way, each tried six times; no further chunk taken.
    expect(proxied.refusedPuts).toBeLessThanOrEqual(4 * 6);
    expect(proxied.chunkPuts).toBe(0);
    const builds = (await admin(t, 'GET', '/api/admin/game/builds')).json<{ buildCode: number }[]>();
    expect(builds.map((b) => b.buildCode)).not.toContain(7);
  });

  it('a manifest the service refuses: its {error} naming the fault, no build', async () => {
    const bad = client('bad');
    fs.writeFileSync(path.join(bad, 'Data', 'AUX.mpq'), 'reserved');
    const result = await run(gameArgs(bad, 3, ['--exclude', 'Logs/**']));
    expect(result.code).toBe(1);
    expect(errorOf(result)).toMatch(/400 .*Data\/AUX\.mpq/);
    expect((await admin(t, 'GET', '/api/admin/game/builds')).json<unknown[]>()).toHaveLength(2);
  });

  it("--app other than the service's APP_NAME: a usage error before anything is uploaded, no build", async () => {
    const result = await run(gameArgs(client('other-app'), 8, ['--app', 'other', '--exclude', 'Logs/**']));
    expect(result.code).toBe(1);
    expect(errorOf(result)).toBe("--app: the service's APP_NAME is acme, not other (leave --app out to use it)");
    expect(proxied.putBytes).toBe(0);
    const builds = (await admin(t, 'GET', '/api/admin/game/builds')).json<{ buildCode: number }[]>();
    expect(builds.map((b) => b.buildCode)).not.toContain(8);
  });

  it('refuses symbolic links and other non-regular files before sending anything', async () => {
    const linked = client('linked');
    fs.symlinkSync('/etc/hostname', path.join(linked, 'Data', 'link.mpq'));
    const result = await run(gameArgs(linked, 4));
    expect(result.code).toBe(1);
    expect(errorOf(result)).toMatch(/^Data\/link\.mpq: a symbolic link; only regular files are published/);
    expect(proxied.putBytes).toBe(0);
  });

  it('--manifest-out writes the manifest and uploads nothing; --signature made elsewhere over it publishes it', async () => {
    const signed = client('signed');
    const out = path.join(dir, 'manifest.json');
    const args = ['--exclude', 'Logs/**', '--exclude', 'Interface/**'];
    // No service is asked: the app must be given.
    const withoutApp = ['--dir', signed, '--version', '1.18.5', '--build-code', '5', '--manifest-out', out];
    const noApp = await run(['game', ...withoutApp, ...args]);
    expect(noApp.code).toBe(1);
    expect(errorOf(noApp)).toBe("--manifest-out: --app is required (the service's APP_NAME)");
    expect(fs.existsSync(out)).toBe(false);
    const written = await run([
      'game',
      ...['--dir', signed, '--app', 'acme', '--version', '1.18.5', '--build-code', '5', '--manifest-out', out],
      ...args,
    ]);
    expect(written.code, written.stderr).toBe(0);
    const sha256 = createHash('sha256').update(fs.readFileSync(out)).digest('hex');
    const comment = gameTrustedComment({ app: 'acme', buildCode: 5, sha256 });
    expect(JSON.parse(written.stdout)).toMatchObject({ manifest: out, sha256, trustedComment: comment, files: 6 });
    expect(proxied.putBytes).toBe(0);

    // Elsewhere (an offline machine): the manifest signed with the publisher's key.
    const signature = path.join(dir, 'manifest.json.minisig');
    fs.writeFileSync(
      signature,
      await signFile(await parseSecretKey(fs.readFileSync(keys.key, 'utf8'), ''), out, comment),
    );
    const publishArgs = gameArgs(signed, 5, [...args, '--signature', signature, '--publisher-key', keys.pub]);
    publishArgs.splice(publishArgs.indexOf('--sign-key'), 2);
    publishArgs[publishArgs.indexOf('--version') + 1] = '1.18.5';
    const published = await run(publishArgs);
    expect(published.code, published.stderr).toBe(0);
    const manifest = await t.inject('/api/game/builds/5/manifest');
    expect(manifest.body).toBe(fs.readFileSync(out, 'utf8'));

    // A signature over another build is refused before anything is sent.
    const wrong = gameArgs(signed, 6, [...args, '--signature', signature]);
    wrong.splice(wrong.indexOf('--sign-key'), 2);
    const refused = await run(wrong);
    expect(refused.code).toBe(1);
    expect(errorOf(refused)).toMatch(/--signature: its trusted comment is "game=acme buildCode=5 /);
  });
});
