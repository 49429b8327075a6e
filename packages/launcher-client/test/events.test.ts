/**
 * `--events` (docs/launcher-protocol.md) on every command, against the real service through the
 * proxy: each stream read line by line and checked by the harness (`events-harness.ts`), each
 * failure the same kind and exit status as without `--events`.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { type GameFile, manifestOf, publishBuild } from '../../../test/helpers/game.js';
import { Output, PROGRESS_EVERY_MS, ProgressGate } from '../src/cli/output.js';
import type { DeltaOffer } from '../src/index.js';
import { addonZip, gameFolder, publishAddon } from './addons-fixtures.js';
import { type EventRun, type LauncherEvent, runWithEvents } from './events-harness.js';
import { launcherPackage, publishVersion, type Service, startService } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');
/** The command as the package's tests run it: the TypeScript source on this Node. */
const SOURCE = [process.execPath, '--import', 'tsx', CLI];
const KiB = 1024;

let s: Service;
let keysFile: string;

beforeAll(async () => {
  s = await startService();
  keysFile = await s.keysFile();
});
afterEach(() => {
  s.proxy.rule = null;
});
afterAll(() => s.close());

const events = (args: string[], options: Parameters<typeof runWithEvents>[2] = {}) =>
  runWithEvents(SOURCE, args, { cwd: ROOT, ...options });

/** The same command without `--events`: its exit status, stdout and the last JSON line of stderr. */
function plain(args: string[]): Promise<{ code: number; stdout: string; failure: unknown }> {
  return new Promise((resolve) => {
    const child = spawn(SOURCE[0]!, [...SOURCE.slice(1), ...args], { cwd: ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => {
      const last = stderr.trim().split('\n').at(-1) ?? '';
      resolve({ code: code ?? -1, stdout, failure: last === '' ? null : JSON.parse(last) });
    });
  });
}

/** A failing command: with `--events`, its `error` event is the plain run's stderr JSON, and the exit status the same. */
async function sameFailure(args: string[], kind: string, code: number): Promise<EventRun> {
  const without = await plain(args);
  const run = await events(args);
  expect([without.code, run.code]).toEqual([code, code]);
  expect(without.failure).toMatchObject({ kind });
  expect(run.last).toEqual({ event: 'error', ...(without.failure as object) });
  expect(run.stderr).toBe('');
  return run;
}

const phasesOf = (run: EventRun) => [...new Set(run.progress.map((p) => p.phase))];
const lastOf = (run: EventRun, phase: string) => run.progress.filter((p) => p.phase === phase).at(-1);
/** The event without its `event` field: the command's answer, as plain mode prints it. */
const answerOf = (event: LauncherEvent) => {
  const { event: _event, ...answer } = event;
  return answer;
};

describe('game', () => {
  const exe = randomBytes(200 * KiB);
  const data = randomBytes(320 * KiB);
  const BUILD1: GameFile[] = [
    { path: 'Wow.exe', content: exe, chunkBytes: 16 * KiB, extra: { executable: true } },
    { path: 'Data/a.MPQ', content: data, chunkBytes: 8 * KiB },
    { path: 'WTF/Config.wtf', content: Buffer.from('SET realmlist "a"\n'), extra: { policy: 'initial' } },
  ];
  const data2 = Buffer.from(data);
  randomBytes(64 * KiB).copy(data2, 100 * KiB);
  const BUILD2: GameFile[] = [BUILD1[0]!, { ...BUILD1[1]!, content: data2 }, BUILD1[2]!];
  let stateDir: string;
  let gameDir: string;
  // A game folder of its own for the tests below (the rate test moves to a fresh one).
  beforeAll(() => {
    stateDir = s.stateDir();
    gameDir = gameFolder(s.stateDir());
  });
  const online = () => ['--server', s.proxy.url, '--trust', keysFile, '--state', stateDir, '--game-dir', gameDir];
  const onlineApp = () => [...online(), '--app', 'app'];

  async function publish(version: string, buildCode: number, files: GameFile[]) {
    const res = await publishBuild(s.t, { version, buildCode }, manifestOf({ version, buildCode }, files));
    expect(res.statusCode, res.body).toBe(201);
  }

  const sameFiles = (files: GameFile[]) => {
    for (const file of files) expect(fs.readFileSync(path.join(gameDir, file.path)).equals(file.content)).toBe(true);
  };

  it('status, update (install), verify, verify of a damaged file (exit 3), repair, update: one stream each', async () => {
    await publish('1.0.0', 1, BUILD1);

    const status = await events(['game', 'status', '--state', stateDir, '--game-dir', gameDir]);
    expect(status.events.map((e) => e.event)).toEqual(['start', 'result']);
    expect(status.events[0]).toEqual({ event: 'start', command: 'game status', protocol: 1 });
    expect(status.last).toEqual({ event: 'result', installed: null, underWay: null, inUse: [] });

    const install = await events(['game', 'update', ...onlineApp()]);
    expect(install.code, install.stderr).toBe(0);
    expect(install.events[0]).toMatchObject({ command: 'game update' });
    expect(install.last).toMatchObject({ event: 'result', result: 'installed', from: null, to: 1 });
    sameFiles(BUILD1);
    expect(phasesOf(install)).toEqual(['plan', 'download', 'assemble']);
    expect(lastOf(install, 'plan')).toMatchObject({ unit: 'files', total: 3 });
    expect(lastOf(install, 'assemble')).toMatchObject({ unit: 'files', total: 3 });
    // The download's last report is never dropped: all of it.
    const downloaded = install.last.downloadedBytes as number;
    expect(lastOf(install, 'download')).toMatchObject({ unit: 'bytes', bytes: downloaded, total: downloaded });

    const verify = await events(['game', 'verify', ...onlineApp()]);
    expect([verify.code, verify.last]).toEqual([
      0,
      expect.objectContaining({ event: 'result', ok: true, buildCode: 1 }),
    ]);

    fs.writeFileSync(path.join(gameDir, 'Data/a.MPQ'), 'damaged');
    const damaged = await events(['game', 'verify', ...onlineApp()]);
    const damagedPlain = await plain(['game', 'verify', ...onlineApp()]);
    expect([damaged.code, damagedPlain.code]).toEqual([3, 3]);
    expect(damaged.last).toMatchObject({ event: 'result', ok: false, damaged: ['Data/a.MPQ'] });
    expect(answerOf(damaged.last)).toEqual(JSON.parse(damagedPlain.stdout));

    const repair = await events(['game', 'repair', ...onlineApp()]);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.last).toMatchObject({ event: 'result', repaired: ['Data/a.MPQ'] });
    sameFiles(BUILD1);

    await publish('1.0.1', 2, BUILD2);
    const update = await events(['game', 'update', ...onlineApp()]);
    expect(update.last).toMatchObject({ event: 'result', result: 'updated', from: 1, to: 2 });
    expect(update.last.reusedBytes as number).toBeGreaterThan(0);
    sameFiles(BUILD2);
  });

  it('progress comes at most 10 times a second, the last of each phase kept: a build of 1,000 small chunks', async () => {
    // Far more chunk reports a second than 10, however slow the machine: most are held and replaced.
    const many = randomBytes(1000 * KiB);
    const BUILD3: GameFile[] = [...BUILD2, { path: 'Data/many.MPQ', content: many, chunkBytes: KiB }];
    await publish('1.0.2', 3, BUILD3);
    stateDir = s.stateDir();
    gameDir = gameFolder(s.stateDir());
    const before = s.proxy.requests('/api/game/chunks/').length;
    const run = await events(['game', 'update', ...onlineApp()]);
    expect(run.code, run.stderr).toBe(0);
    sameFiles(BUILD3);
    const chunks = s.proxy.requests('/api/game/chunks/').length - before;
    expect(chunks).toBeGreaterThanOrEqual(1000);
    // The harness checked the rate over the run; here, that reports were held back and the last kept.
    const downloads = run.progress.filter((p) => p.phase === 'download');
    expect(downloads.length).toBeLessThan(chunks / 5);
    const total = run.last.downloadedBytes as number;
    expect(downloads.at(-1)).toMatchObject({ bytes: total, total });
  });

  it('a tampered answer: the error event has the kind (digest) and exit 2 of the plain run', async () => {
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/game/check-update')) return undefined;
      const answer = await upstream();
      // One byte more than the signed digest covers.
      return { ...answer, body: Buffer.concat([answer.body, Buffer.from(' ')]) };
    };
    const run = await sameFailure(['game', 'update', ...onlineApp()], 'digest', 2);
    expect(run.progress).toEqual([]);
  });

  it('a failure that is retried is a warning with its kind and fields (events only: plain stderr stays empty)', async () => {
    let refused = 0;
    s.proxy.rule = (seen) => {
      if (!seen.url.startsWith('/api/game/check-update') || refused++ % 2 === 1) return undefined;
      return { status: 503, headers: { 'retry-after': '0' }, body: Buffer.from('{"error":"busy"}') };
    };
    const run = await events(['game', 'update', ...onlineApp()]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.events.map((e) => e.event).filter((e) => e !== 'progress')).toEqual(['start', 'log', 'result']);
    expect(run.events[1]).toMatchObject({
      level: 'warning',
      kind: 'http',
      status: 503,
      serverMessage: 'busy',
      message: expect.stringMatching(/answered 503: busy; retrying in 0\.0 s \(failure 1\)$/),
    });
    const without = await plain(['game', 'update', ...onlineApp()]);
    expect([without.code, without.failure]).toEqual([0, null]);
  });

  it('usage errors: the start event names what is known, then the error (exit 1)', async () => {
    const run = await sameFailure(['game', 'update', '--state', stateDir], 'usage', 1);
    expect(run.events[0]).toMatchObject({ command: 'game update' });
    const unknown = await sameFailure(['game', '--bogus'], 'usage', 1);
    expect(unknown.events[0]).toMatchObject({ command: 'game' });
  });
});

describe('addons', () => {
  it('install, list, pin, unpin, outdated, update, scan, remove: one stream each, the answers of the plain mode', async () => {
    await publishAddon(s.t, 'ev-basic', '1.0', addonZip(['EvBasic', 'EvBasic_Options'], '1.0'));
    const state = s.stateDir();
    const game = gameFolder(s.stateDir());
    const online = ['--server', s.proxy.url, '--trust', keysFile, '--state', state, '--game-dir', game];
    const offline = ['--state', state, '--game-dir', game];

    const install = await events(['addons', 'install', 'ev-basic', ...online]);
    expect(install.code, install.stderr).toBe(0);
    expect(install.events[0]).toMatchObject({ command: 'addons install' });
    expect(install.last).toEqual({
      event: 'result',
      installed: [{ slug: 'ev-basic', version: '1.0', folders: ['EvBasic', 'EvBasic_Options'] }],
    });
    expect(phasesOf(install)).toEqual(['download', 'extract', 'swap']);
    expect(fs.readFileSync(path.join(game, 'Interface/AddOns/EvBasic/core.lua'), 'utf8')).toBe('-- EvBasic 1.0\n');
    expect(lastOf(install, 'download')).toMatchObject({ addon: 'ev-basic', unit: 'bytes' });
    const download = lastOf(install, 'download')!;
    expect(download.bytes).toBe(download.total);
    expect(lastOf(install, 'extract')).toMatchObject({ addon: 'ev-basic', bytes: 0, total: 0 });
    // A report per folder renamed, the newest kept when they come faster than 10 a second.
    expect(lastOf(install, 'swap')).toMatchObject({ addon: 'ev-basic', folder: 'EvBasic_Options' });

    for (const args of [
      ['list', ...offline],
      ['pin', 'ev-basic', ...offline],
      ['unpin', 'ev-basic', ...offline],
      ['outdated', ...online],
    ]) {
      const run = await events(['addons', ...args]);
      expect(run.code, JSON.stringify(run.last)).toBe(0);
      expect(run.events.map((e) => e.event)).toEqual(['start', 'result']);
      expect(run.events[0]).toMatchObject({ command: `addons ${args[0]}` });
      expect(answerOf(run.last)).toEqual(JSON.parse((await plain(['addons', ...args])).stdout));
    }

    await publishAddon(s.t, 'ev-basic', '2.0', addonZip(['EvBasic', 'EvBasic_Options'], '2.0'));
    const update = await events(['addons', 'update', ...online]);
    expect(update.last).toMatchObject({ event: 'result', updated: [{ slug: 'ev-basic', from: '1.0', to: '2.0' }] });
    expect(phasesOf(update)).toEqual(['download', 'extract', 'swap']);

    const scan = await events(['addons', 'scan', ...online]);
    expect(scan.last).toMatchObject({ event: 'result', adopted: [], unknown: ['MyOwnAddon'] });

    const removed = await events(['addons', 'remove', 'ev-basic', ...offline]);
    expect(removed.last).toEqual({ event: 'result', removed: ['ev-basic'] });
    expect(fs.existsSync(path.join(game, 'Interface/AddOns/EvBasic'))).toBe(false);
  });

  it('an addon the catalogue does not have: kind not-found, exit 1, as without --events', async () => {
    const state = s.stateDir();
    const game = gameFolder(s.stateDir());
    const args = ['addons', 'install', 'ev-nowhere', '--server', s.proxy.url, '--trust', keysFile];
    await sameFailure([...args, '--state', state, '--game-dir', game], 'not-found', 1);
  });
});

describe('backup', () => {
  it('create, list, restore, remove; an unknown id is not-found (exit 1) as without --events', async () => {
    const state = s.stateDir();
    const game = gameFolder(s.stateDir());
    const created = await events(['backup', 'create', '--state', state, '--game-dir', game, '--label', 'before']);
    expect(created.code, created.stderr).toBe(0);
    expect(created.events[0]).toMatchObject({ command: 'backup create' });
    const { backup } = created.last as unknown as { backup: { id: string; label: string } };
    expect(backup).toMatchObject({ label: 'before', reason: 'manual' });

    const listed = await events(['backup', 'list', '--state', state]);
    expect(answerOf(listed.last)).toEqual(JSON.parse((await plain(['backup', 'list', '--state', state])).stdout));
    expect(listed.last).toMatchObject({ backups: [expect.objectContaining({ id: backup.id })] });

    fs.writeFileSync(path.join(game, 'WTF/Account/SavedVariables.lua'), 'settings = false\n');
    const restored = await events(['backup', 'restore', backup.id, '--state', state, '--game-dir', game]);
    expect(restored.last).toEqual({ event: 'result', restored: backup.id });
    expect(fs.readFileSync(path.join(game, 'WTF/Account/SavedVariables.lua'), 'utf8')).toBe('settings = true\n');

    const removed = await events(['backup', 'remove', backup.id, '--state', state]);
    expect(removed.last).toEqual({ event: 'result', removed: backup.id });
    await sameFailure(['backup', 'remove', backup.id, '--state', state], 'not-found', 1);
  });
});

describe('the launcher commands', () => {
  it('device-id, pending, heartbeat --once, update (download progress with the file name), applied', async () => {
    const state = s.stateDir();
    const id = await events(['device-id', '--state', state]);
    expect(id.events).toEqual([
      { event: 'start', command: 'device-id', protocol: 1 },
      { event: 'result', deviceId: expect.stringMatching(/^[0-9a-f-]{36}$/) },
    ]);
    const pending = await events(['pending', '--state', state]);
    expect(pending.last).toEqual({ event: 'result', install: null, patch: null });
    const beat = await events([
      'heartbeat',
      '--server',
      s.proxy.url,
      '--state',
      state,
      '--version-code',
      '1',
      '--once',
    ]);
    expect(beat.last).toEqual({ event: 'result', ok: true, deviceId: id.last.deviceId as string });

    const pkg = await launcherPackage(s.t, 'ev-launcher');
    await publishVersion(s.t, pkg, 1);
    const v2 = await publishVersion(s.t, pkg, 2, { forceUpdate: true }, 512 * KiB);
    const args = ['update', '--server', s.proxy.url, '--trust', keysFile, '--state', state, '--app', 'ev'];
    const update = await events([...args, '--version-code', '1']);
    expect(update.last).toMatchObject({ event: 'result', result: 'mandatory', sha256: v2.sha256, delta: false });
    expect(lastOf(update, 'download')).toMatchObject({
      unit: 'bytes',
      bytes: 512 * KiB,
      total: 512 * KiB,
      file: 'setup-2.exe',
    });

    await sameFailure(['applied', '--state', state, '--patch-version-code', '9'], 'state', 1);
    await sameFailure(['update', '--state', state], 'usage', 1);
  });

  it('heartbeat: each failed beat is a log event with its kind; SIGTERM ends it with its result', async () => {
    const args = ['heartbeat', '--server', 'http://127.0.0.1:1', '--state', s.stateDir(), '--version-code', '1'];
    const run = await events(args, {
      onEvent: (event, child) => {
        if (event.event === 'log') child.kill('SIGTERM');
      },
    });
    expect(run.code).toBe(0);
    expect(run.events.find((e) => e.event === 'log')).toMatchObject({
      level: 'error',
      kind: 'network',
      message: expect.any(String),
    });
    expect(run.last).toMatchObject({ event: 'result', ok: true });
  });

  it('a delta that cannot be applied: its download is phase delta, the warning a log event, then the full download', async () => {
    expect(await s.t.app.ctx.deltas.launch((err) => expect.fail(String(err)))).toBe(true);
    const pkg = await launcherPackage(s.t, 'evd-launcher');
    const before = randomBytes(256 * KiB);
    const after = Buffer.concat([before.subarray(0, 128 * KiB), randomBytes(4 * KiB), before.subarray(128 * KiB)]);
    const { upload, createVersion } = await import('../../../test/helpers/app.js');
    const one = await upload(s.t, 'evd-1.exe', before);
    await createVersion(s.t, pkg, { version: '1.0', versionCode: 1, filePath: one.filePath });
    const two = await upload(s.t, 'evd-2.exe', after);
    await createVersion(s.t, pkg, { version: '2.0', versionCode: 2, filePath: two.filePath, forceUpdate: true });
    let offer: DeltaOffer | undefined;
    await vi.waitFor(
      async () => {
        const answer = await fetch(`${s.proxy.url}/api/software/check-update?slug=evd-launcher&versionCode=1`);
        offer = ((await answer.json()) as { latest: { delta?: DeltaOffer } }).latest.delta;
        expect(offer).toBeDefined();
      },
      { timeout: 60_000, interval: 200 },
    );
    const wrong = path.join(s.stateDir(), 'wrong.exe');
    fs.writeFileSync(wrong, randomBytes(1000));
    const state = s.stateDir();
    const args = ['update', '--server', s.proxy.url, '--trust', keysFile, '--state', state, '--app', 'evd'];
    const run = await events([...args, '--version-code', '1', '--current-file', wrong]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.events.map((e) => e.event).filter((e) => e !== 'progress')).toEqual(['start', 'log', 'result']);
    expect(run.events.find((e) => e.event === 'log')).toMatchObject({
      level: 'warning',
      message: expect.stringMatching(/^delta not used: /),
    });
    expect(phasesOf(run)).toEqual(['delta', 'download']);
    expect(lastOf(run, 'delta')).toMatchObject({ bytes: offer!.fileSize, total: offer!.fileSize });
    expect(lastOf(run, 'download')).toMatchObject({ bytes: after.length, total: after.length });
    // The delta's last report comes before the warning: events keep their order.
    const order = run.events.map((e) => (e.event === 'progress' ? String(e.phase) : e.event));
    expect(order.lastIndexOf('delta')).toBeLessThan(order.indexOf('log'));
    expect(run.last).toMatchObject({ event: 'result', delta: false, downloadedBytes: offer!.fileSize + after.length });
  });

  it('--version and --help answer a result; no command at all is the help with exit 1', async () => {
    const { version } = JSON.parse(fs.readFileSync(path.resolve(import.meta.dirname, '../package.json'), 'utf8')) as {
      version: string;
    };
    const run = await events(['--version']);
    expect(run.events).toEqual([
      { event: 'start', command: 'version', protocol: 1 },
      { event: 'result', version },
    ]);
    expect((await plain(['--version'])).stdout).toBe(`${version}\n`);
    const help = await events(['--help']);
    expect([help.code, help.last]).toEqual([0, { event: 'result', help: expect.stringContaining('--events') }]);
    expect((await events([])).code).toBe(1);
  });
});

describe('the progress gate', () => {
  it('lets one report through per 100 ms, holds the newest of each phase, and flushes them in order', async () => {
    const sent: { at: number; report: string }[] = [];
    const gate = new ProgressGate<string>((report) => sent.push({ at: performance.now(), report }), PROGRESS_EVERY_MS);
    const started = performance.now();
    let n = 0;
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        gate.offer('download', `download ${++n}`);
        if (performance.now() - started > 1000) {
          clearInterval(timer);
          resolve();
        }
      }, 1);
    });
    gate.offer('assemble', 'assemble 1');
    gate.flush();
    const gaps = sent.slice(0, -2).map((s, i) => (i === 0 ? Infinity : s.at - sent[i - 1]!.at));
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(PROGRESS_EVERY_MS - 1);
    expect(sent.length).toBeGreaterThanOrEqual(5);
    expect(sent.length).toBeLessThanOrEqual(13);
    expect(n).toBeGreaterThan(sent.length * 3);
    // The last of each phase, in the order they came.
    expect(sent.slice(-2).map((s) => s.report)).toEqual([`download ${n}`, 'assemble 1']);
  });

  it('a phase never goes back (a download started again from 0 holds at its most); its last report is kept', () => {
    const lines: string[] = [];
    const out = Output.of(true, 'game update', { write: (text: string) => lines.push(text) });
    out.start('game update');
    // 300 goes out at once; 100 comes within 100 ms, is held, and goes out (as 300) before the result.
    for (const bytes of [300, 100]) out.progress({ phase: 'download', unit: 'bytes', bytes, total: 1000, rate: 1 });
    expect(out.finish({ answer: { done: true } })).toBe(0);
    const events = lines.map((line) => JSON.parse(line) as LauncherEvent);
    expect(events.map((e) => (e.event === 'progress' ? e.bytes : e.event))).toEqual(['start', 300, 300, 'result']);
    expect(events.at(-1)).toEqual({ event: 'result', done: true });
  });
});
