import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { admin, buildTestApp, type TestApp } from '../../../test/helpers/app.js';
import { type GameFile, RULE_BREAKS, SPEC_EXAMPLE } from '../../../test/helpers/game.js';
import { apiToken, listen } from '../../../test/helpers/tus.js';
import { Chunker, chunkFile, GAME_CHUNK_SIZES } from 'patchwell-client/fastcdc';
import { gameTrustedComment } from 'patchwell-client/minisign';
import { generateKeyPair, parseSecretKey, signFile } from '../src/minisign.js';
import { errorOf, ROOT, type Run, startCli } from './cli-process.js';
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
const proxied = {
  chunkPuts: 0,
  putBytes: 0,
  failures: [] as number[],
  failing: '',
  refusedPuts: 0,
  /** Missing-chunks questions and build creations that reached the service. */
  missingAsks: 0,
  creations: 0,
  /** Done (once) before the next missing-chunks question goes on: what another publisher does meanwhile. */
  beforeMissing: null as (() => Promise<void>) | null,
};

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
    if (req.method === 'POST' && req.url === '/api/admin/game/builds') proxied.creations += 1;
    if (req.method === 'POST' && req.url === '/api/admin/game/chunks/missing') {
      proxied.missingAsks += 1;
      const meanwhile = proxied.beforeMissing;
      proxied.beforeMissing = null;
      if (meanwhile !== null) {
        void meanwhile().then(() => forward(base, req, res, () => undefined));
        return;
      }
    }
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
beforeEach(() =>
  Object.assign(proxied, {
    chunkPuts: 0,
    putBytes: 0,
    failures: [],
    failing: '',
    refusedPuts: 0,
    missingAsks: 0,
    creations: 0,
    beforeMissing: null,
  }),
);

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

/** What the fixture folder holds of the player's: the settings as a default, the rest left out. */
const PLAYER = ['--initial', 'WTF/Config.wtf', '--exclude', 'Logs/**', '--exclude', 'Interface/**'];

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
    const chunker = new Chunker(GAME_CHUNK_SIZES);
    const before = new Set((await chunkFile(big, chunker)).chunks.map(([name]) => name));
    const bytes = fs.readFileSync(big);
    randomBytes(MiB).copy(bytes, 2 * MiB);
    fs.writeFileSync(big, Buffer.concat([bytes.subarray(0, 8 * MiB), randomBytes(MiB), bytes.subarray(8 * MiB)]));
    // The chunks around each change: those of the new file the old one did not have.
    const changed = new Map((await chunkFile(big, chunker)).chunks.filter(([name]) => !before.has(name)));
    const changedBytes = [...changed.values()].reduce((n, size) => n + size, 0);
    proxied.failing = 'PUT /api/admin/game/chunks/';
    proxied.failures = [503, 429, 502];
    const result = await run(gameArgs(root, 2, PLAYER));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr.match(/retry \d\/5 in 0 s: PUT \/api\/admin\/game\/chunks\/[0-9a-f]{64}: \d+/g)).toHaveLength(
      3,
    );
    const answer = answerOf(result);
    expect(answer.uploadedBytes).toBeGreaterThan(2 * MiB);
    // Each change costs the chunks around it (at most 4 MiB each), never the whole file again.
    // (and realmlist.wtf, one chunk, which the test before changed)
    expect(answer.uploadedBytes).toBe(changedBytes + fs.statSync(path.join(root, 'realmlist.wtf')).size);
    expect(answer.uploadedBytes).toBeLessThan(12 * MiB);
    expect(answer.totalBytes).toBeGreaterThan(13 * MiB);
    expect(proxied.putBytes).toBe(answer.uploadedBytes);
    const builds = (await admin(t, 'GET', '/api/admin/game/builds')).json<{ buildCode: number }[]>();
    expect(builds.map((b) => b.buildCode)).toEqual([2, 1]);
  });

  it('chunk uploads that fail for good: the run ends with the error as its last line (after the uploads under way), no build', async () => {
    const stops = client('stops');
    proxied.failing = 'PUT /api/admin/game/chunks/';
    proxied.failures = Array<number>(500).fill(503);
    const result = await run(gameArgs(stops, 7, PLAYER));
    expect(result.code).toBe(1);
    expect(errorOf(result)).toMatch(/^PUT \/api\/admin\/game\/chunks\/[0-9a-f]{64}: 503/);
    // The four uploads under way, each tried six times; no further chunk taken.
    expect(proxied.refusedPuts).toBeLessThanOrEqual(4 * 6);
    expect(proxied.chunkPuts).toBe(0);
    const builds = (await admin(t, 'GET', '/api/admin/game/builds')).json<{ buildCode: number }[]>();
    expect(builds.map((b) => b.buildCode)).not.toContain(7);
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
    const args = PLAYER;
    // No service is asked: the app must be given.
    const withoutApp = ['--dir', signed, '--version', '1.18.5', '--build-code', '5', '--manifest-out', out];
    const noApp = await run(['game', ...withoutApp, ...args]);
    expect(noApp.code).toBe(1);
    expect(errorOf(noApp)).toBe("--manifest-out: --app (the service's APP_NAME) or --server (to read it) is required");
    expect(fs.existsSync(out)).toBe(false);
    // With --server and no --app, the service's APP_NAME is read (GET /api/admin/me): the same manifest.
    const fromService = await run(['game', '--server', server, ...withoutApp, ...args]);
    expect(fromService.code, fromService.stderr).toBe(0);
    const read = fs.readFileSync(out, 'utf8');
    expect(JSON.parse(read)).toMatchObject({ app: 'acme', buildCode: 5 });
    fs.rmSync(out);
    const written = await run([
      'game',
      ...['--dir', signed, '--app', 'acme', '--version', '1.18.5', '--build-code', '5', '--manifest-out', out],
      ...args,
    ]);
    expect(written.code, written.stderr).toBe(0);
    expect(fs.readFileSync(out, 'utf8')).toBe(read);
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

/** A folder holding `files` (a row of the rules' table, or the spec's example). */
function folderOf(name: string, files: readonly GameFile[]): string {
  const root = path.join(dir, name);
  fs.mkdirSync(root, { recursive: true });
  for (const file of files) {
    fs.mkdirSync(path.dirname(path.join(root, file.path)), { recursive: true });
    fs.writeFileSync(path.join(root, file.path), file.content);
  }
  return root;
}

/** Nothing of the build reached the service: no missing-chunks question, no chunk, no creation. */
function nothingSent() {
  expect(proxied).toMatchObject({ missingAsks: 0, chunkPuts: 0, putBytes: 0, creations: 0 });
}

describe("launcher-publish game refuses what would take the player's files, before anything is uploaded", () => {
  const heldCodes = async () =>
    (await admin(t, 'GET', '/api/admin/game/builds')).json<{ buildCode: number }[]>().map((b) => b.buildCode);

  for (const [i, row] of RULE_BREAKS.entries()) {
    it(`${row.name}: exit 1 naming the path and the rule; nothing uploaded, no --manifest-out file`, async () => {
      const folder = folderOf(`rule-${i}`, row.files);
      const remove = ((row.extra?.remove as string[] | undefined) ?? []).flatMap((glob) => ['--remove', glob]);
      const policy = /^files\[\d+\]\.policy: "([^"]+)"/.exec(row.rule)?.[1];
      const expected =
        row.files.length === 0
          ? `--dir: no file to publish in ${folder} (after --exclude): a build lists at least one file`
          : policy !== undefined
            ? `${policy}: is in the player folder`
            : `the manifest would break the rules (game-files.md): ${row.rule.replace(/^files\[\d+\]\./, '')}`;
      const before = await heldCodes();

      const published = await run(gameArgs(folder, 100 + i, remove));
      expect(published.code, published.stderr).toBe(1);
      const error = errorOf(published);
      if (policy !== undefined) {
        // Named with the option that fixes it.
        expect(error).toMatch(new RegExp(`^${policy}: is in the player folder .* --initial '${policy}'`));
      } else if (row.files.length === 0) expect(error).toBe(expected);
      else expect(error.replace(/files\[\d+\]\./, '').startsWith(expected), error).toBe(true);
      nothingSent();
      expect(await heldCodes()).toEqual(before);

      const out = path.join(dir, `rule-${i}.json`);
      const written = await run([
        'game',
        ...['--dir', folder, '--app', 'acme', '--version', '1', '--build-code', String(100 + i), '--manifest-out', out],
        ...remove,
      ]);
      expect(written.code).toBe(1);
      expect(errorOf(written)).toBe(error);
      expect(fs.existsSync(out)).toBe(false);
    });
  }

  it("the spec's example passes (Data/patch-3.mpq listed with --remove 'Data/patch-*.mpq'); a --build-code not above the latest is refused before a file is cut or anything sent", async () => {
    const example = folderOf('spec-example', SPEC_EXAMPLE);
    const args = ['--initial', 'WTF/Config.wtf', '--remove', 'Data/patch-*.mpq'];
    const published = await run(gameArgs(example, 2018, args));
    expect(published.code, published.stderr).toBe(0);
    const manifest = JSON.parse((await t.inject('/api/game/builds/2018/manifest')).body) as { remove: string[] };
    expect(manifest.remove).toEqual(['Data/patch-*.mpq']);

    // Issue 51's row: 1190 after 2018 was stored and never offered to anyone.
    Object.assign(proxied, { missingAsks: 0, chunkPuts: 0, putBytes: 0, creations: 0 });
    const lower = await run(gameArgs(example, 1190, args));
    expect(lower.code).toBe(1);
    expect(errorOf(lower)).toBe(
      '--build-code 1190 is not above 2018, the highest build the service holds (published, scheduled or revoked): ' +
        'launchers only move up, so the service refuses it (409)',
    );
    expect(lower.stderr).not.toContain('chunk:');
    nothingSent();
    expect(await heldCodes()).not.toContain(1190);
  });

  it('the service stays the authority: a higher build published meanwhile makes it refuse the creation (409)', async () => {
    const folder = folderOf('overtaken', [{ path: 'WoW.exe', content: randomBytes(1000) }]);
    // Another publisher's build 2500 lands once this run has checked the builds held.
    proxied.beforeMissing = async () => {
      const other = folderOf('other-publisher', [{ path: 'WoW.exe', content: randomBytes(1000) }]);
      expect((await run(gameArgs(other, 2500))).code).toBe(0);
    };
    const result = await run(gameArgs(folder, 2400));
    expect(result.code).toBe(1);
    expect(errorOf(result)).toMatch(/^POST \/api\/admin\/game\/builds: 409 .*buildCode 2400 is not above 2500/);
    expect(await heldCodes()).not.toContain(2400);
  });
});

/** The arguments (`game …`) of the `launcher-publish game` command a document shows (after `<!-- example: launcher-publish game -->`). */
function documentedCommand(file: string): string[] {
  const doc = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const block =
    /```sh\n([\s\S]*?)```/.exec(doc.slice(doc.indexOf('<!-- example: launcher-publish game -->')))?.[1] ?? '';
  const command =
    block
      .replace(/\\\n/g, ' ')
      .split('\n')
      .find((line) => line.startsWith('launcher-publish game ')) ?? '';
  return [...command.matchAll(/'([^']*)'|(\S+)/g)].map(([, quoted, word]) => quoted ?? word ?? '').slice(1);
}

describe("the documents' launcher-publish game command", () => {
  /** A played copy of the client: the game's files, and what the player and the game wrote in the player folders. */
  const played: GameFile[] = [
    ...SPEC_EXAMPLE,
    { path: 'Data/common.MPQ', content: randomBytes(300_000) },
    { path: 'realmlist.wtf', content: Buffer.from('set realmlist logon.example.test\n') },
    { path: 'WTF/Account/PLAYER/SavedVariables/Foo.lua', content: Buffer.from('Foo = {}\n') },
    { path: 'Interface/AddOns/Foo/Foo.toc', content: Buffer.from('## Title: Foo\n') },
    { path: 'Screenshots/WoWScrnShot_1.jpg', content: Buffer.from('jpg') },
    { path: 'Logs/Chat.log', content: Buffer.from('log') },
    { path: 'Errors/crash.txt', content: Buffer.from('crash') },
    { path: 'WDB/creaturecache.wdb', content: Buffer.from('wdb') },
    { path: 'Cache/x.bin', content: Buffer.from('cache') },
  ];

  for (const [i, file] of ['docs/publishing.md', 'packages/publish/README.md'].entries()) {
    it(`${file}: publishes a played copy of the client, leaving the player's files out`, async () => {
      const args = documentedCommand(file);
      expect(args).toContain('--initial');
      const value = (name: string, given: string) => {
        const at = args.indexOf(name);
        expect(at, name).toBeGreaterThan(-1);
        args[at + 1] = given;
      };
      const buildCode = 5000 + i;
      value('--server', server);
      value('--dir', folderOf(`played-${i}`, played));
      value('--sign-key', keys.key);
      value('--build-code', String(buildCode));
      const result = await run(args);
      expect(result.code, result.stderr).toBe(0);
      const manifest = JSON.parse((await t.inject(`/api/game/builds/${buildCode}/manifest`)).body) as {
        files: { path: string; policy?: string }[];
      };
      expect(manifest.files.map((f) => [f.path, f.policy ?? 'exact'])).toEqual([
        ['Data/common.MPQ', 'exact'],
        ['Data/patch-3.mpq', 'exact'],
        ['WTF/Config.wtf', 'initial'],
        ['WoW.exe', 'exact'],
        ['realmlist.wtf', 'exact'],
      ]);
    });
  }
});
