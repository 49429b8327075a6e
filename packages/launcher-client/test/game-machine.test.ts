/**
 * The game client on a player's real machine (game-files.md, "On a player's real machine"; issue
 * 52), against the real service through the tampering proxy: one operation at a time (`busy`, two
 * real processes of the command), links never followed (`unsafe-path`, the folder outside listed
 * before and after), a refusal before the first rename leaving nothing under way, folders in the
 * way, what the update's JSON tells, the execute bit of an adopted file, durable state writes; and
 * the same lock and link rule for the addon manager and the settings snapshots.
 */
import { randomBytes } from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { BuiltManifest, GameFile } from '../../../test/helpers/game.js';
import {
  AddonManager,
  BlockedError,
  BusyError,
  createSnapshot,
  type TrustedKey,
  UnsafePathError,
  UpdateManager,
} from '../src/index.js';
import { listSnapshots, restoreSnapshot } from '../src/backups/snapshots.js';
import { StateFolder } from '../src/disk/state.js';
import { addonZip, publishAddon } from './addons-fixtures.js';
import {
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
import type { Service } from './helpers.js';

let s: Service;
let pinned: TrustedKey[];

const exe = randomBytes(300 * KiB);
const common1 = randomBytes(512 * KiB);
const common2 = Buffer.from(common1);
randomBytes(128 * KiB).copy(common2, 128 * KiB);
const patch3 = randomBytes(20 * KiB);
const BUILD1: GameFile[] = [
  { path: 'WoW.exe', content: exe, chunkBytes: 64 * KiB, extra: { executable: true } },
  { path: 'Data/common.MPQ', content: common1, chunkBytes: 128 * KiB },
  { path: 'Data/patch-2.mpq', content: randomBytes(10 * KiB) },
  { path: 'old.dll', content: randomBytes(KiB) },
  { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist "a"\n'), extra: { policy: 'initial' } },
];
/** Build 2: common.MPQ's second chunk changed, patch-3 added, patch-2 (a remove match) and old.dll dropped. */
const BUILD2: GameFile[] = [
  BUILD1[0]!,
  { path: 'Data/common.MPQ', content: common2, chunkBytes: 128 * KiB },
  { path: 'Data/patch-3.mpq', content: patch3 },
  BUILD1[4]!,
];
const REMOVE = { remove: ['Data/patch-*.mpq', 'Data/stale-*.mpq'] };
let build2: BuiltManifest;
/** A game folder and its state folder with build 1 installed (copied by `installed1`). */
const base = { state: '', game: '' };

withService(async (service, keys) => {
  s = service;
  pinned = keys;
  await publishGame(s, '1.0.1', 1, BUILD1, REMOVE);
  base.state = tempDir('machine-state-');
  base.game = tempDir('machine-game-');
  await game(base.state, base.game).update();
  build2 = await publishGame(s, '1.0.2', 2, BUILD2, REMOVE);
});

const game = (stateDir: string, gameDir: string, options: GameOptions = {}) =>
  gameManager(s, pinned, stateDir, gameDir, options);
const common = (stateDir: string, gameDir: string) => commonArgs(s, pinned, stateDir, gameDir);
const status = async (stateDir: string) =>
  lastJson((await cli(['game', 'status', '--state', stateDir, '--game-dir', tempDir('machine-any-')])).stdout);
const chunkRequests = () => s.proxy.requests('/api/game/chunks/').length;
const stderrOf = (run: { stderr: string }) => lastJson(run.stderr);

/** A copy of the game folder and state folder with build 1 installed (times kept). */
function installed1(): { stateDir: string; gameDir: string } {
  const stateDir = tempDir('machine-state-');
  const gameDir = tempDir('machine-game-');
  fs.cpSync(base.state, stateDir, { recursive: true, preserveTimestamps: true });
  fs.cpSync(base.game, gameDir, { recursive: true, preserveTimestamps: true });
  return { stateDir, gameDir };
}

/** Chunk requests after the first `pass` wait until `release()`; `held` settles at the first that waits. */
function holdChunks(pass: number) {
  let served = 0;
  let release!: () => void;
  let holding!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const held = new Promise<void>((resolve) => (holding = resolve));
  s.proxy.rule = async (seen) => {
    if (!seen.url.startsWith('/api/game/chunks/') || ++served <= pass) return undefined;
    holding();
    await released;
    return undefined;
  };
  return { held, release };
}

/** On the first chunk request (the plan checked, the download under way), `act` runs once. */
function onFirstChunk(act: () => void) {
  let done = false;
  s.proxy.rule = (seen) => {
    if (seen.url.startsWith('/api/game/chunks/') && !done) {
      done = true;
      act();
    }
    return undefined;
  };
}

function expectBuild(gameDir: string, files: readonly GameFile[]) {
  for (const file of files) expect(read(gameDir, file.path).equals(file.content), file.path).toBe(true);
}

/** A process id no process has now (a child run to its end). */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => child.on('close', resolve));
  return child.pid!;
}

function writeLock(stateDir: string, pid: number, processStart: string | null) {
  const lock = { pid, processStart, operation: 'game-update', since: '2026-12-01T10:00:00.000Z' };
  fs.writeFileSync(path.join(stateDir, 'operation.lock'), JSON.stringify(lock));
}

describe('one operation at a time: the lock in the state folder', () => {
  it('a second command stops at once with busy naming the first, which ends whole; addons and snapshots too; status tells', async () => {
    const { stateDir, gameDir } = installed1();
    const { held, release } = holdChunks(1);
    let firstPid = -1;
    const first = cli(['game', 'update', ...common(stateDir, gameDir), '--connections', '1'], {
      started: (pid) => (firstPid = pid),
    });
    await held;
    const checks = s.proxy.requests('/api/game/check-update').length;
    const busy = { kind: 'busy', pid: firstPid, operation: 'game-update' };
    try {
      // At once, while the first holds the lock (each is a process of its own).
      const addons = ['--state', stateDir, '--game-dir', gameDir];
      const [update, verify, remove, list, backup, now] = await Promise.all([
        cli(['game', 'update', ...common(stateDir, gameDir)]),
        cli(['game', 'verify', ...common(stateDir, gameDir)]),
        cli(['addons', 'remove', 'some-addon', ...addons]),
        cli(['addons', 'list', ...addons]),
        cli(['backup', 'create', ...addons]),
        cli(['game', 'status', ...addons]),
      ]);
      for (const second of [update, verify]) {
        expect(second.code).toBe(1);
        expect(stderrOf(second)).toMatchObject(busy);
        expect(stderrOf(second).error).toMatch(new RegExp(`pid ${firstPid}`));
      }
      // The second asked nothing of the service.
      expect(s.proxy.requests('/api/game/check-update').length).toBe(checks);
      // The addon manager and the snapshots share the lock: changes are busy, readers answer.
      expect([remove.code, stderrOf(remove)]).toMatchObject([1, busy]);
      expect([list.code, lastJson(list.stdout)]).toEqual([0, { addons: [] }]);
      expect([backup.code, stderrOf(backup)]).toMatchObject([1, busy]);
      // status takes no lock: it answers, naming who is at work.
      expect(lastJson(now.stdout)).toMatchObject({
        installed: { buildCode: 1 },
        underWay: { from: 1, to: 2 },
        busy: { pid: firstPid, operation: 'game-update' },
      });
    } finally {
      release();
    }
    const ended = await first;
    expect(ended.code, ended.stderr).toBe(0);
    expect(lastJson(ended.stdout)).toMatchObject({ result: 'updated', from: 1, to: 2 });
    expectBuild(gameDir, BUILD2.slice(0, 3));
    expect(await status(stateDir)).toEqual({
      installed: { version: '1.0.2', buildCode: 2 },
      underWay: null,
      inUse: [],
    });
    expect(fs.existsSync(path.join(stateDir, 'operation.lock'))).toBe(false);
  });

  it('a lock whose process is gone is taken over', async () => {
    const { stateDir, gameDir } = installed1();
    writeLock(stateDir, await deadPid(), null);
    expect(await game(stateDir, gameDir).status()).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
    expect(await game(stateDir, gameDir).update()).toMatchObject({ result: 'updated', from: 1, to: 2 });
    expect(fs.existsSync(path.join(stateDir, 'operation.lock'))).toBe(false);
  });

  it('a lock of a running process is busy; on Linux, one whose pid now runs with another start is taken over', async () => {
    const { stateDir, gameDir } = installed1();
    const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)']);
    try {
      // Where no start time is recorded (a lock from Windows, say), a running pid keeps it busy.
      writeLock(stateDir, other.pid!, null);
      const failure = await game(stateDir, gameDir)
        .verify()
        .catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(BusyError);
      expect(failure).toMatchObject({ kind: 'busy', pid: other.pid, operation: 'game-update' });
      expect(await game(stateDir, gameDir).status()).toMatchObject({ busy: { pid: other.pid } });
      if (process.platform === 'linux') {
        // The pid runs, but not the process that took the lock (another start): a reused pid.
        writeLock(stateDir, other.pid!, 'another-boot:12345');
        expect(await game(stateDir, gameDir).verify()).toMatchObject({ ok: true, buildCode: 1 });
      }
    } finally {
      other.kill();
    }
  });

  it('in one process: an operation while another runs is busy; a call inside an operation (its snapshot) runs under its lock', async () => {
    const { stateDir, gameDir } = installed1();
    fs.writeFileSync(path.join(gameDir, 'WTF/Config.wtf'), 'SET realmlist "mine"\n');
    const { held, release } = holdChunks(1);
    const first = game(stateDir, gameDir, { connections: 1 }).update();
    await held;
    try {
      await expect(game(stateDir, gameDir).repair()).rejects.toMatchObject({ kind: 'busy', pid: process.pid });
      const updates = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: pinned, stateDir });
      await expect(new AddonManager({ updates, gameDir }).remove(['x'])).rejects.toBeInstanceOf(BusyError);
      await expect(createSnapshot(new StateFolder(stateDir), gameDir)).rejects.toBeInstanceOf(BusyError);
    } finally {
      release();
    }
    expect(await first).toMatchObject({ result: 'updated', from: 1, to: 2 });
    expect((await listSnapshots(new StateFolder(stateDir))).map((b) => b.reason)).toEqual(['game-update']);
  });
});

describe('links are not followed: refused before the first write, nothing written outside the game folder', () => {
  /** `update` refused with unsafe-path naming `named`: nothing written outside or inside, nothing under way, no chunk fetched. */
  async function refused(stateDir: string, gameDir: string, outside: string, named: string) {
    const before = { outside: tree(outside), game: tree(gameDir) };
    const chunks = chunkRequests();
    const failure = await game(stateDir, gameDir)
      .update()
      .catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(UnsafePathError);
    expect(failure).toMatchObject({ kind: 'unsafe-path', path: named });
    const run = await cli(['game', 'update', ...common(stateDir, gameDir)]);
    expect(run.code).toBe(1);
    expect(stderrOf(run)).toMatchObject({ kind: 'unsafe-path', path: named });
    expect(tree(outside)).toEqual(before.outside);
    expect(tree(gameDir)).toEqual(before.game);
    expect(chunkRequests()).toBe(chunks);
    expect(await status(stateDir)).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
  }

  it('Data a symbolic link to a folder outside: unsafe-path, common.MPQ not written there', async () => {
    const { stateDir, gameDir } = installed1();
    const outside = tempDir('machine-outside-');
    fs.cpSync(path.join(gameDir, 'Data'), outside, { recursive: true });
    fs.rmSync(path.join(gameDir, 'Data'), { recursive: true });
    fs.symlinkSync(outside, path.join(gameDir, 'Data'), 'junction');
    await refused(stateDir, gameDir, outside, 'Data');
  });

  it('WTF a symbolic link to a folder outside: an update that would write WTF/Config.wtf is unsafe-path', async () => {
    const { stateDir, gameDir } = installed1();
    const outside = tempDir('machine-outside-');
    fs.rmSync(path.join(gameDir, 'WTF'), { recursive: true });
    fs.symlinkSync(outside, path.join(gameDir, 'WTF'), 'junction');
    await refused(stateDir, gameDir, outside, 'WTF');
  });

  it('a managed file, a remove match, a dropped file or the work folder that is a link: unsafe-path, the link not followed', async () => {
    const cases: [string, (gameDir: string, victim: string) => void][] = [
      ['WoW.exe', (g, v) => fs.renameSync(path.join(g, 'WoW.exe'), v)],
      ['Data/stale-1.mpq', (g, v) => fs.writeFileSync(v, 'the player’s')],
      ['old.dll', (g, v) => fs.renameSync(path.join(g, 'old.dll'), v)],
      ['.patchwell-work', (_g, v) => fs.mkdirSync(v)],
    ];
    for (const [named, make] of cases) {
      const { stateDir, gameDir } = installed1();
      const outside = tempDir('machine-outside-');
      const victim = path.join(outside, 'victim');
      make(gameDir, victim);
      fs.symlinkSync(victim, path.join(gameDir, named));
      await refused(stateDir, gameDir, outside, named);
    }
  });

  it('the game folder itself may be a link: the update goes on', async () => {
    const { stateDir, gameDir } = installed1();
    const linked = path.join(tempDir('machine-link-'), 'Game');
    fs.symlinkSync(gameDir, linked, 'junction');
    expect(await game(stateDir, linked).update()).toMatchObject({ result: 'updated', from: 1, to: 2 });
    expectBuild(gameDir, BUILD2.slice(0, 3));
  });

  it('a link made while the update downloads is seen before the first rename: unsafe-path, nothing renamed, nothing under way', async () => {
    const { stateDir, gameDir } = installed1();
    const outside = tempDir('machine-outside-');
    onFirstChunk(() => {
      fs.renameSync(path.join(gameDir, 'Data'), path.join(outside, 'Data'));
      fs.symlinkSync(path.join(outside, 'Data'), path.join(gameDir, 'Data'), 'junction');
    });
    const before = tree(base.game);
    await expect(game(stateDir, gameDir).update()).rejects.toMatchObject({ kind: 'unsafe-path', path: 'Data' });
    expect(tree(path.join(outside, 'Data'))).toEqual(
      Object.fromEntries(
        Object.entries(before)
          .filter(([file]) => file.startsWith('Data/'))
          .map(([file, hash]) => [file.slice('Data/'.length), hash]),
      ),
    );
    expect(read(gameDir, 'WoW.exe').equals(exe)).toBe(true);
    expect(await game(stateDir, gameDir).status()).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
  });
});

describe('folders in the way', () => {
  it('repair: an empty folder is replaced by its file; one with files in it is reported (blocked) after the rest is repaired; verify reports it damaged', async () => {
    const { stateDir, gameDir } = installed1();
    fs.rmSync(path.join(gameDir, 'Data/patch-2.mpq'));
    fs.mkdirSync(path.join(gameDir, 'Data/patch-2.mpq'));
    fs.rmSync(path.join(gameDir, 'old.dll'));
    fs.mkdirSync(path.join(gameDir, 'old.dll'));
    fs.writeFileSync(path.join(gameDir, 'old.dll/mine.txt'), 'the player’s');
    fs.writeFileSync(path.join(gameDir, 'WoW.exe'), 'broken');
    const manager = game(stateDir, gameDir);
    const damaged = ['WoW.exe', 'Data/patch-2.mpq', 'old.dll'];
    expect(await manager.verify()).toMatchObject({ ok: false, missing: [], damaged });
    const full = await cli(['game', 'verify', ...common(stateDir, gameDir), '--full']);
    expect([full.code, lastJson(full.stdout)]).toMatchObject([3, { ok: false, damaged }]);

    const failure = await manager.repair().catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(BlockedError);
    expect(failure).toMatchObject({
      kind: 'blocked',
      paths: ['old.dll'],
      done: { repaired: ['WoW.exe', 'Data/patch-2.mpq'], removed: [] },
    });
    expectBuild(gameDir, BUILD1.slice(0, 3));
    expect(read(gameDir, 'old.dll/mine.txt').toString()).toBe('the player’s');
    expect(await status(stateDir)).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
    expect(await manager.verify({ full: true })).toMatchObject({ ok: false, damaged: ['old.dll'] });
    const run = await cli(['game', 'repair', ...common(stateDir, gameDir)]);
    expect(run.code).toBe(1);
    expect(stderrOf(run)).toMatchObject({ kind: 'blocked', paths: ['old.dll'], repaired: [], removed: [] });

    fs.rmSync(path.join(gameDir, 'old.dll'), { recursive: true });
    expect(await manager.repair()).toMatchObject({ repaired: ['old.dll'] });
    expect(await manager.verify({ full: true })).toMatchObject({ ok: true });
  });

  it('update: a folder with files in it where a new file goes stops it (blocked, exit 1) before a byte is fetched; an empty one is replaced', async () => {
    const { stateDir, gameDir } = installed1();
    fs.mkdirSync(path.join(gameDir, 'Data/patch-3.mpq'));
    fs.writeFileSync(path.join(gameDir, 'Data/patch-3.mpq/mine.txt'), 'mine');
    const before = tree(gameDir);
    const chunks = chunkRequests();
    const run = await cli(['game', 'update', ...common(stateDir, gameDir)]);
    expect(run.code).toBe(1);
    expect(stderrOf(run)).toMatchObject({ kind: 'blocked', paths: ['Data/patch-3.mpq'] });
    expect(chunkRequests()).toBe(chunks);
    expect(tree(gameDir)).toEqual(before);
    expect(await status(stateDir)).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
    fs.rmSync(path.join(gameDir, 'Data/patch-3.mpq/mine.txt'));
    expect(await game(stateDir, gameDir).update()).toMatchObject({ result: 'updated', from: 1, to: 2 });
    expectBuild(gameDir, BUILD2.slice(0, 3));
  });

  it('update: a folder put in the way while it downloads stops it before the first rename; the work files are kept and the rerun fetches nothing', async () => {
    const { stateDir, gameDir } = installed1();
    onFirstChunk(() => {
      fs.mkdirSync(path.join(gameDir, 'Data/patch-3.mpq'));
      fs.writeFileSync(path.join(gameDir, 'Data/patch-3.mpq/mine.txt'), 'mine');
    });
    await expect(game(stateDir, gameDir).update()).rejects.toMatchObject({
      kind: 'blocked',
      paths: ['Data/patch-3.mpq'],
    });
    expectBuild(gameDir, BUILD1.slice(0, 4));
    expect(await game(stateDir, gameDir).status()).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
    fs.rmSync(path.join(gameDir, 'Data/patch-3.mpq'), { recursive: true });
    const chunks = chunkRequests();
    const result = await game(stateDir, gameDir).update();
    expect(result).toMatchObject({ result: 'updated', from: 1, to: 2, downloadedBytes: 0 });
    // Every byte of the two files rebuilt came from disk: the installed common.MPQ and the work files kept.
    expect(result.reusedBytes).toBe(common2.length + patch3.length);
    expect(chunkRequests()).toBe(chunks);
    expectBuild(gameDir, BUILD2.slice(0, 3));
  });
});

describe('what the update tells', () => {
  it('a rerun that finishes an update killed while renaming says "updated" from the build installed before it', async () => {
    const { stateDir, gameDir } = installed1();
    // What a run killed midway through its renames leaves: common.MPQ renamed, patch-3 still in its
    // work file, the deletes not done, the journal saying renaming.
    const work = path.join(gameDir, '.patchwell-work');
    fs.mkdirSync(path.join(work, 'files'), { recursive: true });
    fs.writeFileSync(path.join(work, `files/${'b'.repeat(32)}`), patch3);
    fs.writeFileSync(path.join(work, 'manifest.json'), build2.text);
    fs.writeFileSync(path.join(gameDir, 'Data/common.MPQ'), common2);
    fs.writeFileSync(
      path.join(stateDir, 'game/operation.json'),
      JSON.stringify({
        from: 1,
        to: 2,
        phase: 'renaming',
        renames: [
          { work: 'a'.repeat(32), path: 'Data/common.MPQ', kind: 'changed' },
          { work: 'b'.repeat(32), path: 'Data/patch-3.mpq', kind: 'added' },
        ],
        deletes: ['Data/patch-2.mpq', 'old.dll'],
        left: [],
      }),
    );
    expect(await status(stateDir)).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: { from: 1, to: 2 },
      inUse: [],
    });
    const run = await cli(['game', 'update', ...common(stateDir, gameDir)]);
    expect(run.code, run.stderr).toBe(0);
    expect(lastJson(run.stdout)).toMatchObject({
      result: 'updated',
      from: 1,
      to: 2,
      files: { added: 1, changed: 1, removed: 2, unchanged: 2 },
      downloadedBytes: 0,
    });
    expectBuild(gameDir, BUILD2.slice(0, 3));
    expect(fs.existsSync(path.join(gameDir, 'old.dll'))).toBe(false);
    expect(await status(stateDir)).toEqual({
      installed: { version: '1.0.2', buildCode: 2 },
      underWay: null,
      inUse: [],
    });
  });

  it.skipIf(process.platform === 'win32')(
    'an adopted identical file gets the execute bit the manifest asks, and loses one it does not',
    async () => {
      const gameDir = tempDir('machine-adopt-');
      fs.mkdirSync(path.join(gameDir, 'Data'));
      // Unpacked from an old zip that kept no modes: WoW.exe not executable, an archive executable.
      fs.writeFileSync(path.join(gameDir, 'WoW.exe'), exe, { mode: 0o644 });
      fs.writeFileSync(path.join(gameDir, 'Data/patch-3.mpq'), patch3, { mode: 0o755 });
      const result = await game(tempDir('machine-state-'), gameDir).update();
      expect(result).toMatchObject({ result: 'installed', to: 2, files: { unchanged: 2 } });
      expect(fs.statSync(path.join(gameDir, 'WoW.exe')).mode & 0o111).toBe(0o111);
      expect(fs.statSync(path.join(gameDir, 'Data/patch-3.mpq')).mode & 0o111).toBe(0);
      expect(read(gameDir, 'WoW.exe').equals(exe)).toBe(true);
    },
  );
});

describe('durable state', () => {
  const strace = spawnSync('strace', ['-V']).status === 0;
  if (!strace) console.log('strace is not installed: the test of the flushes before each rename is skipped');

  it.runIf(strace)(
    'every state file is flushed before it is renamed into place, its folder after; the journal before the first rename of the game, the state after the last',
    async () => {
      const { stateDir, gameDir } = installed1();
      const log = path.join(tempDir('machine-strace-'), 'trace');
      const trace = ['strace', '-f', '-y', '-qq', '-o', log, '-e', 'trace=fsync,fdatasync,rename,renameat,renameat2'];
      const run = await cli(['game', 'update', ...common(stateDir, gameDir)], { under: trace });
      expect(run.code, run.stderr).toBe(0);
      // One line per call (a call split by another thread's is joined back), in order.
      const calls = fs
        .readFileSync(log, 'utf8')
        .split('\n')
        .filter((line) => !line.includes('resumed>'))
        .map((line) => line.replace(/^\d+\s+/, ''));
      const renameTo = (file: string) =>
        calls.findIndex((c) => /^rename/.test(c) && c.includes(`"${file}"`) && c.includes('.tmp"'));
      const game = path.join(stateDir, 'game');
      for (const file of ['manifest.json', 'files.json', 'operation.json']) {
        const at = renameTo(path.join(game, file));
        expect(at, file).toBeGreaterThan(0);
        const temp = /"([^"]+\.tmp)"/.exec(calls[at]!)![1]!;
        expect(
          calls.slice(0, at).some((c) => c.startsWith('fsync(') && c.includes(`<${temp}>`)),
          file,
        ).toBe(true);
        expect(
          calls.slice(at).some((c) => c.startsWith('fsync(') && c.includes(`<${game}>`)),
          file,
        ).toBe(true);
      }
      const intoGame = calls
        .map((c, i) => [c, i] as const)
        .filter(([c]) => /^rename/.test(c) && c.includes(`${gameDir}/.patchwell-work/files/`))
        .map(([, i]) => i);
      expect(intoGame.length).toBe(2);
      const journals = calls
        .map((c, i) => [c, i] as const)
        .filter(([c]) => /^rename/.test(c) && c.includes(`"${path.join(game, 'operation.json')}"`))
        .map(([, i]) => i);
      // Written assembling, then renaming: the second before the first rename into the game folder.
      expect(journals.length).toBe(2);
      expect(journals[1]).toBeLessThan(intoGame[0]!);
      // Each work file renamed into the game was flushed before the journal said renaming.
      for (const at of intoGame) {
        const work = /"([^"]+\/\.patchwell-work\/files\/[^"]+)"/.exec(calls[at]!)![1]!;
        const flushed = calls.findIndex((c) => c.startsWith('fsync(') && c.includes(`<${work}>`));
        expect(flushed, work).toBeGreaterThanOrEqual(0);
        expect(flushed, work).toBeLessThan(journals[1]!);
      }
      expect(renameTo(path.join(game, 'manifest.json'))).toBeGreaterThan(intoGame.at(-1)!);
      // The game's folders flushed after the renames, before the state says the build is installed.
      const flushedData = calls.findIndex((c, i) => i > intoGame.at(-1)! && c.includes(`<${gameDir}/Data>`));
      expect(flushedData).toBeGreaterThan(0);
      expect(flushedData).toBeLessThan(renameTo(path.join(game, 'manifest.json')));
    },
  );

  it('a state file cut before its rename leaves the old one whole: the temporary file left beside it is never read', async () => {
    const { stateDir, gameDir } = installed1();
    // What a crash between the write and the rename leaves: the new text half written, beside.
    fs.writeFileSync(path.join(stateDir, 'game/manifest.json.4242.cut.tmp'), build2.text.slice(0, 100));
    fs.writeFileSync(path.join(stateDir, 'game/operation.json.4242.cut.tmp'), '{"from": 1, "to"');
    const manager = game(stateDir, gameDir);
    expect(await manager.status()).toEqual({
      installed: { version: '1.0.1', buildCode: 1 },
      underWay: null,
      inUse: [],
    });
    expect(await manager.verify({ full: true })).toMatchObject({ ok: true, buildCode: 1 });
    expect(await manager.update()).toMatchObject({ result: 'updated', from: 1, to: 2 });
    expect(fs.readFileSync(path.join(stateDir, 'game/manifest.json'), 'utf8')).toBe(build2.text);
  });
});

describe('the addon manager and the settings snapshots: the same link rule', () => {
  beforeAll(async () => {
    await publishAddon(s.t, 'machine-addon', '1.0.0', addonZip(['MachineAddon'], 'v1'));
  });
  // The game command's options but --app.
  const addonArgs = (stateDir: string, gameDir: string) => common(stateDir, gameDir).slice(0, -2);

  it('Interface/AddOns, or an addon folder, a link to a folder outside: install refused (unsafe-path), nothing written there', async () => {
    for (const named of ['Interface/AddOns', 'Interface/AddOns/MachineAddon']) {
      const gameDir = tempDir('machine-addons-');
      const stateDir = tempDir('machine-state-');
      const outside = tempDir('machine-outside-');
      fs.writeFileSync(path.join(outside, 'keep.lua'), '-- the player’s');
      fs.mkdirSync(path.dirname(path.join(gameDir, named)), { recursive: true });
      fs.symlinkSync(outside, path.join(gameDir, named), 'junction');
      const before = tree(outside);
      const run = await cli(['addons', 'install', 'machine-addon', ...addonArgs(stateDir, gameDir)]);
      expect(run.code, named).toBe(1);
      expect(stderrOf(run), named).toMatchObject({ kind: 'unsafe-path', path: named });
      expect(tree(outside), named).toEqual(before);
      const list = await cli(['addons', 'list', '--state', stateDir, '--game-dir', gameDir]);
      expect(lastJson(list.stdout), named).toEqual({ addons: [] });
    }
  });

  it('a snapshot reads WTF through a link; restoring into a linked WTF is refused (unsafe-path), the folder outside unchanged', async () => {
    const gameDir = tempDir('machine-wtf-');
    const stateDir = tempDir('machine-state-');
    const outside = tempDir('machine-outside-');
    fs.writeFileSync(path.join(outside, 'Config.wtf'), 'SET realmlist "mine"\n');
    fs.symlinkSync(outside, path.join(gameDir, 'WTF'), 'junction');
    const state = new StateFolder(stateDir);
    const taken = await createSnapshot(state, gameDir);
    expect(taken.files).toBe(1);
    fs.writeFileSync(path.join(outside, 'Config.wtf'), 'SET realmlist "changed"\n');
    const before = tree(outside);
    await expect(restoreSnapshot(state, gameDir, taken.id)).rejects.toMatchObject({
      kind: 'unsafe-path',
      path: 'WTF',
    });
    expect(tree(outside)).toEqual(before);
    expect(fs.readdirSync(gameDir)).toEqual(['WTF']);
    expect(fs.existsSync(path.join(stateDir, 'backups-restore.json'))).toBe(false);
  });
});
