import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type BuiltManifest, type GameFile, sha256Of } from '../../../test/helpers/game.js';
import {
  AbortedError,
  AnswerTooLargeError,
  DiskSpaceError,
  ManifestError,
  RollbackError,
  type TrustedKey,
  UpdateManager,
} from '../src/index.js';
import { listSnapshots } from '../src/backups/snapshots.js';
import { gameTrustedComment, prehash } from '../src/trust/minisign.js';
import { StateFolder } from '../src/disk/state.js';
import { generateKeyPair, parseSecretKey, signPrehash } from '../../publish/src/minisign.js';
import {
  CLI,
  cli,
  commonArgs,
  gameManager,
  type GameOptions,
  KiB,
  lastJson,
  publishGame,
  read,
  tempDir,
  tree,
  withService,
} from './game-fixtures.js';
import { type Service, signLikeTheService } from './helpers.js';

let s: Service;
let pinned: TrustedKey[];
/** A trusted key that signs whatever it is given (a service gone wrong): hostile answers the client must refuse itself. */
const rogue = generateKeyPairSync('ed25519');
let withRogue: TrustedKey[];

withService((service, keys) => {
  s = service;
  pinned = keys;
  const raw = Buffer.from(rogue.publicKey.export({ format: 'jwk' }).x ?? '', 'base64url').toString('base64');
  withRogue = [...pinned, { keyId: 'rogue', publicKey: raw }];
});

const game = (stateDir: string, gameDir: string, options: GameOptions = {}) =>
  gameManager(s, pinned, stateDir, gameDir, options);

const big = randomBytes(1024 * KiB);
const exe = randomBytes(300 * KiB);
const BUILD1: GameFile[] = [
  { path: 'WoW.exe', content: exe, chunkBytes: 64 * KiB, extra: { executable: true } },
  { path: 'Data/big.MPQ', content: big, chunkBytes: 128 * KiB },
  { path: 'Data/patch-2.mpq', content: randomBytes(10 * KiB) },
  { path: 'old.dll', content: randomBytes(KiB) },
  { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist "a"\n'), extra: { policy: 'initial' } },
];
const big2 = Buffer.from(big);
randomBytes(128 * KiB).copy(big2, 256 * KiB);
const BUILD2: GameFile[] = [
  BUILD1[0]!,
  { path: 'Data/big.MPQ', content: big2, chunkBytes: 128 * KiB },
  { path: 'Data/patch-3.mpq', content: randomBytes(20 * KiB) },
  { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist "b"\n'), extra: { policy: 'initial' } },
];
let build1: BuiltManifest;
let build2: BuiltManifest;

const publish = (version: string, buildCode: number, files: GameFile[], extra: Record<string, unknown> = {}) =>
  publishGame(s, version, buildCode, files, extra);

const chunkRequests = () => s.proxy.requests('/api/game/chunks/').length;

describe('GameManager against the service through the proxy', () => {
  const stateDir = tempDir('game-state-');
  const gameDir = tempDir('game-dir-');

  it('installs build 1 into an empty folder: every file whole, executable bit, nothing else touched', async () => {
    build1 = await publish('1.18.1', 1, BUILD1, { remove: ['Data/stale-*.mpq'] });
    // The player's own files, before the first install.
    fs.mkdirSync(path.join(gameDir, 'Interface/AddOns/Mine'), { recursive: true });
    fs.writeFileSync(path.join(gameDir, 'Interface/AddOns/Mine/Mine.lua'), 'x');
    fs.mkdirSync(path.join(gameDir, 'Screenshots'));
    fs.writeFileSync(path.join(gameDir, 'Screenshots/a.jpg'), 'y');
    fs.writeFileSync(path.join(gameDir, 'mine.txt'), 'z');
    const manager = game(stateDir, gameDir);
    expect(await manager.status()).toEqual({ installed: null, underWay: null, inUse: [] });
    const result = await manager.update();
    expect(result).toMatchObject({
      result: 'installed',
      from: null,
      to: 1,
      files: { added: 5, changed: 0, removed: 0, unchanged: 0 },
      reusedBytes: 0,
    });
    expect(result.downloadedBytes).toBe([...build1.chunks.values()].reduce((n, c) => n + c.length, 0));
    for (const file of BUILD1) expect(read(gameDir, file.path).equals(file.content)).toBe(true);
    if (process.platform !== 'win32') {
      expect(fs.statSync(path.join(gameDir, 'WoW.exe')).mode & 0o111).not.toBe(0);
      expect(fs.statSync(path.join(gameDir, 'old.dll')).mode & 0o111).toBe(0);
    }
    expect(read(gameDir, 'mine.txt').toString()).toBe('z');
    expect(read(gameDir, 'Interface/AddOns/Mine/Mine.lua').toString()).toBe('x');
    expect(fs.existsSync(path.join(gameDir, '.patchwell-work'))).toBe(false);
    expect(await manager.status()).toEqual({
      installed: { version: '1.18.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
  });

  it('a second update is up to date: no manifest fetched, no chunk downloaded, files not hashed again', async () => {
    const manifests = s.proxy.requests('/api/game/builds/').length;
    const chunks = chunkRequests();
    const result = await game(stateDir, gameDir).update();
    expect(result).toMatchObject({ result: 'up-to-date', from: 1, to: 1, downloadedBytes: 0 });
    expect(result.files.unchanged).toBe(5);
    expect(s.proxy.requests('/api/game/builds/').length).toBe(manifests);
    expect(chunkRequests()).toBe(chunks);
  });

  it('updates to build 2: only changed chunks downloaded, the rest reused from disk; deletes, remove matches, initial kept', async () => {
    build2 = await publish('1.18.2', 2, BUILD2, { remove: ['Data/stale-*.mpq'] });
    fs.writeFileSync(path.join(gameDir, 'WTF/Config.wtf'), 'SET realmlist "mine"\n');
    fs.writeFileSync(path.join(gameDir, 'Data/stale-1.MPQ'), 'old patch');
    const result = await game(stateDir, gameDir).update();
    expect(result).toMatchObject({
      result: 'updated',
      from: 1,
      to: 2,
      files: { added: 1, changed: 1, removed: 3, unchanged: 2 },
    });
    // One 128 KiB chunk of big.MPQ and the new 20 KiB file; the other 7 chunks came from disk.
    expect(result.downloadedBytes).toBe(128 * KiB + 20 * KiB);
    expect(result.reusedBytes).toBe(7 * 128 * KiB);
    expect(read(gameDir, 'Data/big.MPQ').equals(big2)).toBe(true);
    expect(fs.existsSync(path.join(gameDir, 'old.dll'))).toBe(false);
    expect(fs.existsSync(path.join(gameDir, 'Data/patch-2.mpq'))).toBe(false);
    expect(fs.existsSync(path.join(gameDir, 'Data/stale-1.MPQ'))).toBe(false);
    expect(read(gameDir, 'WTF/Config.wtf').toString()).toBe('SET realmlist "mine"\n');
    expect(read(gameDir, 'mine.txt').toString()).toBe('z');
    // WTF was kept before the update touched the game (none before the first install: there was no WTF).
    expect((await listSnapshots(new StateFolder(stateDir))).map((b) => [b.reason, b.files])).toEqual([
      ['game-update', 1],
    ]);
  });

  it('verify: quick trusts size and time, --full hashes; missing, damaged, extra; repair fetches only the damaged chunk', async () => {
    const manager = game(stateDir, gameDir);
    // Nothing hashed, nothing written: the record of sizes and times (replaced durably, so a new inode) is kept.
    const record = path.join(stateDir, 'game/files.json');
    const kept = fs.statSync(record).ino;
    expect(await manager.verify()).toEqual({ ok: true, buildCode: 2, missing: [], damaged: [], extra: [] });
    expect(fs.statSync(record).ino).toBe(kept);
    // A byte flipped, size and time kept: quick cannot see it, full does. (A whole-second time, so
    // that setting it back is exact: a time that differs from the one recorded is hashed, and recorded.)
    const file = path.join(gameDir, 'Data/big.MPQ');
    fs.utimesSync(file, 1_700_000_000, 1_700_000_000);
    expect((await manager.verify()).ok).toBe(true);
    expect(fs.statSync(record).ino).not.toBe(kept);
    const damaged = Buffer.from(big2);
    damaged[5] = damaged[5]! ^ 0xff;
    fs.writeFileSync(file, damaged);
    fs.utimesSync(file, 1_700_000_000, 1_700_000_000);
    expect((await manager.verify()).ok).toBe(true);
    fs.rmSync(path.join(gameDir, 'Data/patch-3.mpq'));
    fs.writeFileSync(path.join(gameDir, 'Data/stale-9.mpq'), 'x');
    fs.rmSync(path.join(gameDir, 'WTF/Config.wtf'));
    const full = await manager.verify({ full: true });
    expect(full).toEqual({
      ok: false,
      buildCode: 2,
      missing: ['Data/patch-3.mpq', 'WTF/Config.wtf'],
      damaged: ['Data/big.MPQ'],
      extra: ['Data/stale-9.mpq'],
    });
    const run = await cli(['game', 'verify', ...common(stateDir, gameDir), '--full']);
    expect(run.code).toBe(3);
    expect(lastJson(run.stdout)).toEqual(full);

    const repaired = await manager.repair();
    // WTF changed (its Config.wtf deleted): kept before the repair wrote it again.
    expect((await listSnapshots(new StateFolder(stateDir)))[0]).toMatchObject({ reason: 'game-repair', files: 0 });
    expect(repaired.repaired.sort()).toEqual(['Data/big.MPQ', 'Data/patch-3.mpq', 'WTF/Config.wtf']);
    expect(repaired.removed).toEqual(['Data/stale-9.mpq']);
    // The damaged 128 KiB chunk, the missing 20 KiB file and the initial file; nothing else.
    expect(repaired.downloadedBytes).toBe(128 * KiB + 20 * KiB + BUILD2[3]!.content.length);
    expect((await manager.verify({ full: true })).ok).toBe(true);
    expect(read(gameDir, 'WTF/Config.wtf').toString()).toBe('SET realmlist "b"\n');
  });

  it('the CLI: status and update print their JSON', async () => {
    const status = await cli(['game', 'status', '--state', stateDir, '--game-dir', gameDir]);
    expect(status.code).toBe(0);
    expect(lastJson(status.stdout)).toEqual({
      installed: { version: '1.18.2', buildCode: 2 },
      underWay: null,
      inUse: [],
    });
    const update = await cli(['game', 'update', ...common(stateDir, gameDir)]);
    expect(update.code, update.stderr).toBe(0);
    expect(lastJson(update.stdout)).toMatchObject({ result: 'up-to-date', from: 2, to: 2, downloadedBytes: 0 });
  });
});

const common = (stateDir: string, gameDir: string, keys: TrustedKey[] = pinned) =>
  commonArgs(s, keys, stateDir, gameDir);

describe('a first install into a folder holding an old copy reuses the chunks it finds', () => {
  it('unpacked files at the manifest offsets are reused, not downloaded', async () => {
    const gameDir = tempDir('game-copy-');
    fs.mkdirSync(path.join(gameDir, 'Data'));
    fs.writeFileSync(path.join(gameDir, 'Data/big.MPQ'), big); // the old zip's (build 1's) copy
    fs.writeFileSync(path.join(gameDir, 'WoW.exe'), exe);
    const result = await game(tempDir('game-state-'), gameDir).update();
    expect(result).toMatchObject({ result: 'installed', to: 2 });
    expect(result.files.unchanged).toBe(1); // WoW.exe matches whole
    expect(result.reusedBytes).toBe(7 * 128 * KiB);
    expect(result.downloadedBytes).toBe(128 * KiB + 20 * KiB + BUILD2[3]!.content.length);
  });
});

/** A static mirror of the chunk store on loopback; `lie` names chunks it answers wrong. */
async function mirror(chunks: Map<string, Buffer>, lie: Set<string> = new Set()) {
  const served: string[] = [];
  const server = http.createServer((req, res) => {
    const name = (req.url ?? '').split('/').at(-1) ?? '';
    served.push(name);
    const bytes = chunks.get(name);
    if (bytes === undefined) return void res.writeHead(404).end();
    res.writeHead(200).end(lie.has(name) ? randomBytes(bytes.length) : bytes);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/game-chunks`,
    served,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('mirrors, cuts and kills', () => {
  it('mirrors first; a lying mirror is skipped and reported, every chunk checked against its name', async () => {
    const all = new Map([...build1.chunks, ...build2.chunks]);
    const liar = await mirror(all, new Set(all.keys()));
    const good = await mirror(all);
    try {
      const chunks = chunkRequests();
      const gameDir = tempDir('game-mirror-');
      const options = { mirrors: [liar.url, good.url], connections: 1 };
      const result = await game(tempDir('game-state-'), gameDir, options).update();
      // Skipped after its first lie (with one connection: one failure).
      expect(result.mirrors).toEqual([
        { url: liar.url, chunks: 0, failures: 1 },
        { url: good.url, chunks: build2.chunks.size, failures: 0 },
      ]);
      expect(liar.served).toHaveLength(1);
      expect(chunkRequests()).toBe(chunks);
      for (const file of BUILD2) expect(read(gameDir, file.path).equals(file.content)).toBe(true);
    } finally {
      await liar.close();
      await good.close();
    }
  });

  it('chunk answers redirected (as a presigned store or an offload answers) are followed; a redirect loop is a network failure', async () => {
    // Every chunk through the proxy answers a redirect: 302 to the service itself, or first a relative
    // 302 back to the proxy that then answers 307 to the service.
    let redirected = 0;
    s.proxy.rule = (seen) => {
      if (!seen.url.startsWith('/api/game/chunks/')) return Promise.resolve(undefined);
      redirected++;
      const [where, query] = seen.url.split('?');
      const location = query === undefined && redirected % 2 === 0 ? `${where}?again=1` : `${s.direct}${where}`;
      return Promise.resolve({ status: query === undefined ? 302 : 307, headers: { location }, body: Buffer.alloc(0) });
    };
    const gameDir = tempDir('game-redirect-');
    const result = await game(tempDir('game-state-'), gameDir).update();
    expect(result.downloadedBytes).toBeGreaterThan(0);
    expect(redirected).toBeGreaterThanOrEqual(build2.chunks.size);
    for (const file of BUILD2) expect(read(gameDir, file.path).equals(file.content)).toBe(true);

    // A chunk that redirects to itself forever: given up after a few hops, as a network failure (retried, then refused).
    s.proxy.rule = (seen) =>
      Promise.resolve(
        seen.url.startsWith('/api/game/chunks/')
          ? { status: 302, headers: { location: seen.url }, body: Buffer.alloc(0) }
          : undefined,
      );
    await expect(game(tempDir('game-state-'), tempDir('game-loop-')).update()).rejects.toThrow(/more than 5 redirects/);
  });

  it('a connection cut mid-chunk is retried; the game ends whole', async () => {
    let cuts = 0;
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/chunks/') || cuts >= 2) return undefined;
      cuts++;
      return { ...(await upstream()), cutAfter: 100 };
    };
    const gameDir = tempDir('game-cut-');
    await game(tempDir('game-state-'), gameDir, { connections: 2 }).update();
    expect(cuts).toBe(2);
    for (const file of BUILD2) expect(read(gameDir, file.path).equals(file.content)).toBe(true);
  });

  it('a chunk answer that stalls is given up at the speed floor and fetched again; the game ends whole', async () => {
    let stalled = 0;
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/chunks/') || stalled >= 2) return undefined;
      stalled++;
      return { ...(await upstream()), cutAfter: 10, hold: true };
    };
    const gameDir = tempDir('game-stall-');
    const started = performance.now();
    await game(tempDir('game-state-'), gameDir, {
      connections: 1,
      deadlines: { minBytesPerSecond: 1000, stallTimeoutMs: 300 },
    }).update();
    expect(stalled).toBe(2);
    // Each stall ended within its window (and a backoff), not at the 30 s default nor never.
    expect(performance.now() - started).toBeLessThan(15_000);
    for (const file of BUILD2) expect(read(gameDir, file.path).equals(file.content)).toBe(true);
  });

  it('a run stopped mid-download shows underWay; the next run resumes with the chunks already fetched', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-kill-');
    const stop = new AbortController();
    let served = 0;
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/chunks/')) return undefined;
      if (++served > 3) {
        stop.abort();
        return { ...(await upstream()), hold: true, cutAfter: 0 };
      }
      return undefined;
    };
    await expect(game(stateDir, gameDir, { connections: 1 }).update({ signal: stop.signal })).rejects.toBeInstanceOf(
      AbortedError,
    );
    s.proxy.rule = null;
    expect(await game(stateDir, gameDir).status()).toEqual({
      installed: null,
      underWay: { from: null, to: 2 },
      inUse: [],
    });
    // Nothing of the game written yet.
    expect(fs.readdirSync(gameDir)).toEqual(['.patchwell-work']);
    // The chunks fetched are in their work file (WoW.exe's, 300 KiB, its first three 64 KiB chunks);
    // the first damaged meanwhile: fetched again, the other two used.
    const files = path.join(gameDir, '.patchwell-work/files');
    // (A work file is made by its first write: as long as what was written.)
    const exeWork = fs.readdirSync(files).find((f) =>
      read(files, f)
        .subarray(0, 64 * KiB)
        .equals(exe.subarray(0, 64 * KiB)),
    );
    expect(
      read(files, exeWork!)
        .subarray(0, 3 * 64 * KiB)
        .equals(exe.subarray(0, 3 * 64 * KiB)),
    ).toBe(true);
    const damage = fs.openSync(path.join(files, exeWork!), 'r+');
    fs.writeSync(damage, Buffer.from([exe[0]! ^ 0xff]), 0, 1, 0); // another byte, whatever the first was
    fs.closeSync(damage);
    const before = chunkRequests();
    const result = await game(stateDir, gameDir).update();
    expect(result.result).toBe('installed');
    expect(chunkRequests() - before).toBe(build2.chunks.size - 2);
    // The two chunks the work file kept count as reused.
    expect(result.reusedBytes).toBe(2 * 64 * KiB);
    expect(await game(stateDir, gameDir).status()).toMatchObject({ underWay: null });
  });

  it('the command killed (SIGKILL) mid-download: the game folder untouched, underWay shown, the rerun finishes with what was fetched', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-sigkill-');
    // A player's own files, before the first install.
    const own: Record<string, Buffer> = {
      'WTF/Config.wtf': Buffer.from('SET realmlist "mine"\n'),
      'Interface/AddOns/Mine/Mine.toc': Buffer.from('## Title: Mine\n'),
      'Screenshots/shot.jpg': randomBytes(2 * KiB),
      'notes.txt': Buffer.from('my notes'),
    };
    for (const [file, bytes] of Object.entries(own)) {
      fs.mkdirSync(path.dirname(path.join(gameDir, file)), { recursive: true });
      fs.writeFileSync(path.join(gameDir, file), bytes);
    }
    let served = 0;
    let held!: () => void;
    const holding = new Promise<void>((resolve) => (held = resolve));
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/chunks/')) return undefined;
      if (++served <= 3) return undefined;
      held();
      return { ...(await upstream()), hold: true, cutAfter: 0 };
    };
    const child = spawn(process.execPath, [
      '--import',
      'tsx',
      CLI,
      'game',
      'update',
      ...common(stateDir, gameDir),
      '--connections',
      '1',
    ]);
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.on('exit', (_code, signal) => resolve(signal)),
    );
    await holding;
    child.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');
    s.proxy.rule = null;
    const status = await cli(['game', 'status', '--state', stateDir, '--game-dir', gameDir]);
    expect(lastJson(status.stdout)).toEqual({ installed: null, underWay: { from: null, to: 2 }, inUse: [] });
    for (const [file, bytes] of Object.entries(own)) expect(read(gameDir, file).equals(bytes)).toBe(true);
    expect(fs.existsSync(path.join(gameDir, 'WoW.exe'))).toBe(false);

    const before = chunkRequests();
    const run = await cli(['game', 'update', ...common(stateDir, gameDir)]);
    expect(run.code, run.stderr).toBe(0);
    expect(lastJson(run.stdout)).toMatchObject({ result: 'installed', to: 2, reusedBytes: 3 * 64 * KiB });
    // The three chunks fetched before the kill are not fetched again, nor the `initial` WTF/Config.wtf's
    // (the player has one).
    expect(chunkRequests() - before).toBe(build2.chunks.size - 3 - 1);
    for (const file of BUILD2.filter((f) => f.path !== 'WTF/Config.wtf')) {
      expect(read(gameDir, file.path).equals(file.content)).toBe(true);
    }
    for (const [file, bytes] of Object.entries(own)) expect(read(gameDir, file).equals(bytes)).toBe(true);
    expect(await game(stateDir, gameDir).status()).toEqual({
      installed: { version: '1.18.2', buildCode: 2 },
      underWay: null,
      inUse: [],
    });
  });

  it('a run killed while renaming is finished by the next command', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-rename-');
    const manager = game(stateDir, gameDir);
    await manager.update();
    // Damage two files, repair, and stop it just after the journal says renaming: simulated by
    // putting back the record a killed repair leaves (work files ready, one renamed already).
    fs.writeFileSync(path.join(gameDir, 'Data/patch-3.mpq'), 'broken');
    fs.writeFileSync(path.join(gameDir, 'WoW.exe'), 'broken');
    const work = path.join(gameDir, '.patchwell-work');
    fs.mkdirSync(path.join(work, 'files'), { recursive: true });
    fs.writeFileSync(path.join(work, `files/${'0'.repeat(32)}`), BUILD2[0]!.content);
    fs.writeFileSync(path.join(work, 'manifest.json'), build2.text);
    fs.writeFileSync(path.join(gameDir, 'Data/patch-3.mpq'), BUILD2[2]!.content); // renamed before the kill
    fs.writeFileSync(
      path.join(stateDir, 'game/operation.json'),
      JSON.stringify({
        from: 2,
        to: 2,
        phase: 'renaming',
        renames: [
          { work: '0'.repeat(32), path: 'WoW.exe' },
          { work: '1'.repeat(32), path: 'Data/patch-3.mpq' },
        ],
        deletes: [],
      }),
    );
    expect(await manager.status()).toMatchObject({ underWay: { from: 2, to: 2 } });
    expect((await manager.verify({ full: true })).ok).toBe(true);
    expect(fs.existsSync(work)).toBe(false);
    expect(await manager.status()).toMatchObject({ underWay: null });
  });
});

describe('hostile answers are refused before a byte is written', () => {
  /** Serves `manifest` (text) as build `buildCode`'s, with check-update rewritten to match, all signed by the rogue key. */
  function serve(
    text: string,
    buildCode: number,
    latest: Record<string, unknown> = {},
    answer: Record<string, unknown> = {},
  ) {
    const bytes = Buffer.from(text);
    s.proxy.rule = async (seen, upstream) => {
      const url = new URL(seen.url, 'http://x');
      let body: Buffer;
      const base = await upstream(
        url.pathname.startsWith('/api/game/builds/') ? '/api/game/builds/2/manifest' : seen.url,
      );
      if (url.pathname === '/api/game/check-update') {
        const parsed = JSON.parse(base.body.toString()) as { latest: Record<string, unknown> };
        body = Buffer.from(
          JSON.stringify({
            ...parsed,
            hasUpdate: true,
            ...answer,
            latest: {
              ...parsed.latest,
              buildCode,
              manifestSha256: sha256Of(bytes),
              manifestSize: bytes.length,
              manifestUrl: `${s.proxy.url}/api/game/builds/${buildCode}/manifest`,
              ...latest,
            },
          }),
        );
      } else if (url.pathname.startsWith('/api/game/builds/')) body = bytes;
      else return undefined;
      return {
        ...base,
        status: 200,
        body,
        headers: { ...base.headers, ...signLikeTheService(body, rogue.privateKey, 'rogue', seen.url) },
      };
    };
  }

  const hostile: [string, (m: Record<string, unknown>) => void][] = [
    ['a path out of the folder', (m) => ((m.files as { path: string }[])[0]!.path = '../evil.exe')],
    ['an absolute path', (m) => ((m.files as { path: string }[])[0]!.path = '/etc/evil')],
    ['a reserved name', (m) => ((m.files as { path: string }[])[0]!.path = 'Data/con.txt')],
    ['a path not in NFC', (m) => ((m.files as { path: string }[])[0]!.path = 'Cafe\u0301.txt')],
    ['two paths differing in case', (m) => ((m.files as { path: string }[])[1]!.path = 'wow.EXE')],
    ['a file under a file', (m) => ((m.files as { path: string }[])[1]!.path = 'WoW.exe/x')],
    ['sizes that do not add up', (m) => ((m.files as { size: number }[])[0]!.size += 1)],
    ['a chunk above 8 MiB', (m) => ((m.files as { chunks: [string, number][] }[])[0]!.chunks[0]![1] = 9 * 1024 * 1024)],
    ['a remove pattern into WTF/', (m) => (m.remove = ['WTF/*'])],
    ['a remove pattern at the top of the game folder', (m) => (m.remove = ['*'])],
    ['a remove pattern into Logs/', (m) => (m.remove = ['Logs/*'])],
    ['an exact file in a player folder', (m) => delete (m.files as { policy?: string }[])[3]!.policy],
    ['no file', (m) => (m.files = [])],
    ['another app', (m) => (m.app = 'other')],
    ['another buildCode than check-update', (m) => (m.buildCode = 7)],
  ];

  for (const [name, spoil] of hostile) {
    it(`a manifest with ${name}: kind manifest, exit 2, nothing written`, async () => {
      const manifest = JSON.parse(build2.text) as Record<string, unknown>;
      spoil(manifest);
      serve(JSON.stringify(manifest), 2);
      const gameDir = tempDir('game-hostile-');
      const stateDir = tempDir('game-state-');
      await expect(game(stateDir, gameDir, { trustedKeys: withRogue }).update()).rejects.toBeInstanceOf(ManifestError);
      expect(fs.readdirSync(gameDir)).toEqual([]);
      const run = await cli(['game', 'update', ...common(stateDir, gameDir, withRogue)]);
      expect(run.code).toBe(2);
      expect(lastJson(run.stderr)).toMatchObject({ kind: 'manifest' });
    });
  }

  it('a manifest whose bytes are not what check-update says (sha256, size) is refused', async () => {
    serve(build2.text, 2, { manifestSha256: sha256Of('other') });
    await expect(
      game(tempDir('game-state-'), tempDir('game-x-'), { trustedKeys: withRogue }).update(),
    ).rejects.toBeInstanceOf(ManifestError);
  });

  it('a manifest longer than manifestSize is not read past it: not the signed manifest (kind manifest, exit 2)', async () => {
    serve(build2.text, 2, { manifestSize: 100 });
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-x-');
    await expect(game(stateDir, gameDir, { trustedKeys: withRogue }).update()).rejects.toMatchObject({
      kind: 'manifest',
      message: expect.stringMatching(/longer than its signed manifestSize 100/) as unknown,
    });
    const run = await cli(['game', 'update', ...common(stateDir, gameDir, withRogue)]);
    expect(run.code).toBe(2);
    expect(lastJson(run.stderr)).toMatchObject({ kind: 'manifest' });
    expect(fs.readdirSync(gameDir)).toEqual([]);
    expect(await game(stateDir, gameDir).status()).toEqual({ installed: null, underWay: null, inUse: [] });
  });

  it('a build below the installed one is a rollback unless downgrade', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-rb-');
    await game(stateDir, gameDir).update();
    serve(build1.text, 1, { version: '1.18.1' }, { downgrade: false });
    await expect(game(stateDir, gameDir, { trustedKeys: withRogue }).update()).rejects.toBeInstanceOf(RollbackError);
    // Off a revoked build, the service says downgrade: the lower build is installed.
    serve(build1.text, 1, { version: '1.18.1' }, { downgrade: true });
    const result = await game(stateDir, gameDir, { trustedKeys: withRogue }).update();
    expect(result).toMatchObject({ result: 'updated', from: 2, to: 1 });
    for (const file of BUILD1.slice(0, 4)) expect(read(gameDir, file.path).equals(file.content)).toBe(true);
  });

  it('with publisher keys pinned, the manifest needs their signature naming this app, build and SHA-256', async () => {
    const pair = await generateKeyPair('');
    const secret = await parseSecretKey(pair.secretKeyFile, '');
    const digest = await prehash([Buffer.from(build2.text)]);
    const sign = (buildCode: number) =>
      signPrehash(secret, digest, gameTrustedComment({ app: 'app', buildCode, sha256: sha256Of(build2.text) }));
    const pinnedGame = (gameDir: string) =>
      game(tempDir('game-state-'), gameDir, {
        trustedKeys: withRogue,
        updates: new UpdateManager({
          serverUrl: s.proxy.url,
          trustedKeys: withRogue,
          stateDir: tempDir('game-state-'),
          publisherKeys: [pair.publicKeyFile],
        }),
      });
    const gameDir = tempDir('game-pub-');
    // The service holds no signature (published unsigned): refused.
    await expect(pinnedGame(gameDir).update()).rejects.toMatchObject({ kind: 'publisher-signature' });
    serve(build2.text, 2, { manifestSignature: sign(3) });
    await expect(pinnedGame(gameDir).update()).rejects.toMatchObject({ kind: 'publisher-signature' });
    expect(fs.readdirSync(gameDir)).toEqual([]);
    serve(build2.text, 2, { manifestSignature: sign(2) });
    expect(await pinnedGame(gameDir).update()).toMatchObject({ result: 'installed', to: 2 });
  });

  it('a build larger than the free space stops before a byte is downloaded or written (disk-space, exit 1)', async () => {
    const gameDir = tempDir('game-full-');
    const { bavail, bsize } = fs.statfsSync(gameDir);
    const chunk = 8 * 1024 * 1024;
    const count = Math.ceil((bavail * bsize * 2) / chunk);
    const name = sha256Of('never downloaded');
    const huge = JSON.stringify({
      format: 1,
      app: 'app',
      version: '1.18.2',
      buildCode: 2,
      files: [
        {
          path: 'huge.bin',
          size: count * chunk,
          sha256: name,
          chunks: Array.from({ length: count }, () => [name, chunk]),
        },
      ],
    });
    serve(huge, 2);
    const chunks = chunkRequests();
    const stateDir = tempDir('game-state-');
    const failure = await game(stateDir, gameDir, { trustedKeys: withRogue })
      .update()
      .catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(DiskSpaceError);
    expect((failure as DiskSpaceError).bytesNeeded).toBeGreaterThanOrEqual(count * chunk);
    expect(chunkRequests()).toBe(chunks);
    expect(fs.readdirSync(gameDir).filter((f) => f !== '.patchwell-work')).toEqual([]);
    const run = await cli(['game', 'update', ...common(stateDir, gameDir, withRogue)]);
    expect(run.code).toBe(1);
    expect(lastJson(run.stderr)).toMatchObject({ kind: 'disk-space' });
    // Refused before the first rename: nothing under way (a launcher may start the game).
    expect(await game(stateDir, gameDir).status()).toEqual({ installed: null, underWay: null, inUse: [] });
  });

  it('a chunk answer that streams past its size (no Content-Length) is cut there, nothing written (too-large)', async () => {
    let sent = 0;
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/chunks/')) return undefined;
      const answer = await upstream();
      return {
        ...answer,
        stream: async function* () {
          for (;;) {
            sent += 64 * KiB;
            yield randomBytes(64 * KiB);
          }
        },
      };
    };
    const gameDir = tempDir('game-endless-');
    const failure = await game(tempDir('game-state-'), gameDir, { connections: 1 })
      .update()
      .catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(AnswerTooLargeError);
    // The largest chunk is 128 KiB: read up to it, never on (the sockets on the way hold a few MiB more).
    expect(sent).toBeLessThan(32 * 1024 * KiB);
    expect(fs.readdirSync(gameDir).filter((f) => f !== '.patchwell-work')).toEqual([]);
  });

  it('a chunk that does not hash to its name is never used (integrity, exit 2)', async () => {
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/chunks/')) return undefined;
      const answer = await upstream();
      return { ...answer, body: randomBytes(answer.body.length) };
    };
    const gameDir = tempDir('game-lie-');
    const run = await cli(['game', 'update', ...common(tempDir('game-state-'), gameDir), '--connections', '1']);
    expect(run.code).toBe(2);
    expect(lastJson(run.stderr)).toMatchObject({ kind: 'integrity' });
    expect(fs.readdirSync(gameDir).filter((f) => f !== '.patchwell-work')).toEqual([]);
  });
});

describe('files a build no longer lists: only exact files still as installed are deleted, the player’s never', () => {
  it('an unchanged exact file is deleted; a changed one is left and named; initial files and player folders kept byte for byte', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-drop-');
    const b10: GameFile[] = [
      { path: 'WoW.exe', content: exe, extra: { executable: true } },
      { path: 'Data/keep.mpq', content: randomBytes(3 * KiB) },
      { path: 'Data/gone.mpq', content: randomBytes(2 * KiB) },
      { path: 'Data/edited.mpq', content: randomBytes(2 * KiB) },
      { path: 'defaults.ini', content: Buffer.from('volume=5\n'), extra: { policy: 'initial' } },
      { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist "a"\n'), extra: { policy: 'initial' } },
      { path: 'Interface/AddOns/Foo/Foo.toc', content: Buffer.from('## Title: Foo\n'), extra: { policy: 'initial' } },
    ];
    await publish('1.18.10', 10, b10);
    await game(stateDir, gameDir).update();
    fs.writeFileSync(path.join(gameDir, 'WTF/Config.wtf'), 'SET realmlist "mine"\n');
    fs.writeFileSync(path.join(gameDir, 'Data/edited.mpq'), 'changed by the player');
    fs.writeFileSync(path.join(gameDir, 'Interface/AddOns/Foo/Foo.lua'), 'print("mine")');
    const before = tree(gameDir);

    await publish('1.18.11', 11, [b10[0]!, b10[1]!]);
    const result = await game(stateDir, gameDir).update();
    expect(result).toMatchObject({
      result: 'updated',
      from: 10,
      to: 11,
      files: { added: 0, changed: 0, removed: 1, unchanged: 2 },
      left: ['Data/edited.mpq'],
    });
    const { 'Data/gone.mpq': gone, ...kept } = before;
    expect(gone).toBeDefined();
    expect(tree(gameDir)).toEqual(kept);
  });

  it('the CLI prints "left" always (empty when nothing was left)', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-drop-');
    const run = await cli(['game', 'update', ...common(stateDir, gameDir)]);
    expect(run.code, run.stderr).toBe(0);
    expect(lastJson(run.stdout)).toMatchObject({ result: 'installed', to: 11, left: [] });
  });

  it('an installed build accepted before the player-safety rules: its player-folder files and refused remove patterns are never acted on', async () => {
    const stateDir = tempDir('game-state-');
    const gameDir = tempDir('game-drop-');
    await game(stateDir, gameDir).update(); // build 11
    // What an older launcher installed from an older service: WTF listed as exact, patterns reaching the player's files.
    const installed = path.join(stateDir, 'game/manifest.json');
    const old = JSON.parse(fs.readFileSync(installed, 'utf8')) as {
      files: Record<string, unknown>[];
      remove?: string[];
    };
    const config = Buffer.from('SET realmlist "a"\n');
    old.files.push({
      path: 'WTF/Config.wtf',
      size: config.length,
      sha256: sha256Of(config),
      chunks: [[sha256Of(config), config.length]],
    });
    old.remove = ['*', 'Logs/*', 'WTF/*'];
    fs.writeFileSync(installed, JSON.stringify(old));
    fs.mkdirSync(path.join(gameDir, 'WTF'));
    fs.writeFileSync(path.join(gameDir, 'WTF/Config.wtf'), config); // as that build installed it
    fs.mkdirSync(path.join(gameDir, 'Logs'));
    fs.writeFileSync(path.join(gameDir, 'Logs/game.log'), 'log');
    fs.writeFileSync(path.join(gameDir, 'mine.txt'), 'mine');
    const before = tree(gameDir);

    const manager = game(stateDir, gameDir);
    expect(await manager.verify()).toMatchObject({ ok: true, extra: [] });
    expect(await manager.repair()).toMatchObject({ repaired: [], removed: [] });
    await publish('1.18.12', 12, [{ path: 'WoW.exe', content: exe, extra: { executable: true } }]);
    const result = await manager.update();
    // Data/keep.mpq, exact and as installed, is the one file build 12 drops.
    expect(result).toMatchObject({ result: 'updated', from: 11, to: 12, files: { removed: 1 }, left: [] });
    const { 'Data/keep.mpq': dropped, ...kept } = before;
    expect(dropped).toBeDefined();
    expect(tree(gameDir)).toEqual(kept);
  });
});

describe('the command in a process of its own', () => {
  // Node 20 and 22 set V8's flags back when a worker thread starts (the hashing thread does, at the
  // start of an operation): there the young generation grows as before. Node 24 keeps them.
  it.skipIf(Number(process.versions.node.split('.')[0]) < 24)(
    'game update holds the young generation of V8 at its size when the downloads start: a long install does not grow it',
    async () => {
      // 32 MiB in 64 KiB chunks: 512 requests, whose objects survive the young generation's collections.
      const files = Array.from({ length: 8 }, (_, i) => ({
        path: `Data/part-${i}.MPQ`,
        content: randomBytes(4096 * KiB),
        chunkBytes: 64 * KiB,
      }));
      await publish('1.18.13', 13, files);
      const probeDir = tempDir('game-probe-');
      const probe = path.join(probeDir, 'probe.mjs');
      const largest = path.join(probeDir, 'largest');
      // The young generation's size at the command's first request to the service (its modules loaded:
      // under tsx, their transforms grow it at start), and its largest from then to the end.
      fs.writeFileSync(
        probe,
        `import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import v8 from 'node:v8';
const size = () => v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space').space_size;
let first = null;
let most = 0;
const look = () => {
  if (first !== null) most = Math.max(most, size());
};
diagnostics.subscribe('undici:request:create', () => {
  first ??= size();
  look();
});
setInterval(look, 10).unref();
process.on('exit', () => {
  look();
  fs.writeFileSync(${JSON.stringify(largest)}, JSON.stringify({ first, most }));
});
`,
      );
      const stateDir = tempDir('game-state-');
      const gameDir = tempDir('game-young-');
      const run = await cli(['game', 'update', ...common(stateDir, gameDir)], {
        under: ['env', `NODE_OPTIONS=--import=${probe}`],
      });
      expect(run.code, run.stderr).toBe(0);
      expect(lastJson(run.stdout)).toMatchObject({ result: 'installed', to: 13 });
      // Left to grow, it doubled at least once during the downloads (8 MiB to 16 here).
      const { first, most } = JSON.parse(fs.readFileSync(largest, 'utf8')) as { first: number; most: number };
      expect(first).toBeGreaterThan(0);
      expect(most).toBe(first);
    },
  );
});
