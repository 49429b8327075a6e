import { execFile, execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createVersion, upload } from '../../../test/helpers/app.js';
import { zlibZstd } from '../src/update/delta.js';
import { AbortedError, type DeltaOffer, type DownloadedUpdate, type UpdateInfo, UpdateManager } from '../src/index.js';
import { downloadsOf, launcherPackage, NODE_24, type Service, signLikeTheService, startService } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');
const MB = 1024 * 1024;
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * Two builds of a launcher: random bytes (as a compressed installer's are), then the next build with
 * bytes inserted, removed and rewritten at a few places.
 */
function twoBuilds(size = 4 * MB): { before: Buffer; after: Buffer } {
  const before = randomBytes(size);
  const edits = [
    { at: 0.1, remove: 0, insert: 30_000 },
    { at: 0.35, remove: 50_000, insert: 0 },
    { at: 0.6, remove: 40_000, insert: 40_000 },
    { at: 0.85, remove: 1000, insert: 5000 },
  ];
  const pieces: Buffer[] = [];
  let from = 0;
  for (const edit of edits) {
    const at = Math.floor(size * edit.at);
    pieces.push(before.subarray(from, at), randomBytes(edit.insert));
    from = at + edit.remove;
  }
  pieces.push(before.subarray(from));
  return { before, after: Buffer.concat(pieces) };
}

const builds = twoBuilds();
const target = { sha256: sha256(builds.after), size: builds.after.length };
/** The service's signing key (`SIGNING_KEY_FILE`), as an attacker who stole it has it. */
const stolen = generateKeyPairSync('ed25519').privateKey;
let s: Service;
let offer: DeltaOffer;
let currentFile: string;
let keysFile: string;
const keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-key-'));

beforeAll(async () => {
  const keyFile = path.join(keyDir, 'signing.pem');
  fs.writeFileSync(keyFile, stolen.export({ type: 'pkcs8', format: 'pem' }));
  s = await startService({ SIGNING_KEY_FILE: keyFile });
  expect(await s.t.app.ctx.deltas.launch((err) => expect.fail(String(err)))).toBe(true);
  const pkg = await launcherPackage(s.t, 'delta-launcher');
  const one = await upload(s.t, 'delta-1.exe', builds.before);
  await createVersion(s.t, pkg, { version: '1.0', versionCode: 1, filePath: one.filePath });
  const two = await upload(s.t, 'delta-2.exe', builds.after);
  await createVersion(s.t, pkg, { version: '2.0', versionCode: 2, filePath: two.filePath, forceUpdate: true });
  const folder = s.stateDir();
  currentFile = path.join(folder, 'delta-launcher-1.0.exe');
  fs.writeFileSync(currentFile, builds.before);
  keysFile = path.join(folder, 'keys.json');
  fs.writeFileSync(keysFile, JSON.stringify(await s.keys()));
  // The service makes the delta in the background: check-update offers it once it is ready
  // (asked through the proxy, so its URLs are those the client sees).
  await vi.waitFor(
    async () => {
      const answer = await fetch(`${s.proxy.url}/api/software/check-update?slug=delta-launcher&versionCode=1`);
      const { latest } = (await answer.json()) as { latest: { delta?: DeltaOffer } };
      expect(latest.delta).toBeDefined();
      offer = latest.delta!;
    },
    { timeout: 60_000, interval: 200 },
  );
}, 60_000);
afterAll(async () => {
  await s.close();
  fs.rmSync(keyDir, { recursive: true, force: true });
});

/** Options of the managers under test: the zstd program rebuilds (on any runtime), unless `extra` says otherwise. */
const managerOptions = (stateDir: string, extra: { zstd?: string; inProcessDeltaMaxBytes?: number } = {}) => ({
  serverUrl: s.proxy.url,
  trustedKeys: [],
  stateDir,
  app: 'delta',
  retry: { baseDelayMs: 10, retries: 2 },
  inProcessDeltaMaxBytes: 0,
  ...extra,
});

function manager(stateDir: string, extra: { zstd?: string } = {}) {
  return new UpdateManager(managerOptions(stateDir, extra));
}

const DIST = pathToFileURL(path.resolve(import.meta.dirname, '../dist/index.js')).href;

/**
 * `downloadUpdate` run by the built package on Node 24 (as a launcher on it would), against the
 * service of this process: its `DownloadedUpdate`.
 */
async function onNode24(
  stateDir: string,
  update: UpdateInfo,
  currentFile: string,
  extra: { zstd?: string; inProcessDeltaMaxBytes?: number },
): Promise<DownloadedUpdate> {
  const script = [
    `import { UpdateManager } from ${JSON.stringify(DIST)};`,
    'const [options, update, currentFile] = process.argv.slice(-3).map((a) => JSON.parse(a));',
    'const done = await new UpdateManager(options).downloadUpdate(update, { currentFile });',
    'console.log(JSON.stringify(done));',
  ].join('\n');
  const options = { inProcessDeltaMaxBytes: 1024 * MB, ...extra };
  const [npx, args] = NODE_24;
  const { stdout } = await promisify(execFile)(
    npx,
    [...args, '--input-type=module', '-e', script, '--'].concat(
      [managerOptions(stateDir, options), update, currentFile].map((a) => JSON.stringify(a)),
    ),
    { cwd: ROOT, timeout: 120_000 },
  );
  return JSON.parse(stdout) as DownloadedUpdate;
}

/** The mandatory update to 2.0 the flow finds for a launcher on 1.0 (answers verified with the service's keys). */
async function mandatoryUpdate(): Promise<UpdateInfo> {
  const m = new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: await s.keys(),
    stateDir: s.stateDir(),
    app: 'delta',
  });
  const check = await m.checkForUpdates(1);
  expect(check.result).toBe('mandatory');
  return check.update!;
}

/** Paths of the delta and full downloads the proxy saw since `from`. */
function downloads(from: number) {
  const urls = s.proxy.seen.slice(from).map((r) => new URL(r.url, 'http://x').pathname);
  return {
    delta: urls.filter((u) => /^\/api\/software\/download\/[^/]+\/delta\/1$/.test(u)),
    full: urls.filter((u) => /^\/api\/software\/download\/[^/]+$/.test(u)),
  };
}

const isDelta = (url: string) => url.includes('/delta/');

describe('delta updates in the client', () => {
  it('the flow carries the offer: a delta from 1, much smaller than the file', async () => {
    const update = await mandatoryUpdate();
    expect(update.delta).toEqual(offer);
    expect(offer.fromVersionCode).toBe(1);
    expect(offer.fileSize).toBeLessThan(target.size / 10);
    expect(update).toMatchObject({ fileSize: target.size, sha256: target.sha256 });
  });

  it('rebuilds the update from the current file and the delta: the target exactly, only the delta downloaded', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    const done = await manager(stateDir).downloadUpdate(update, { currentFile });
    expect(done).toMatchObject({
      delta: true,
      deltaEngine: 'program',
      downloadedBytes: offer.fileSize,
      deltaFailure: null,
    });
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(done.file).toBe(path.join(stateDir, 'downloads', target.sha256, 'delta-launcher-2.0.exe'));
    expect(downloads(from)).toMatchObject({ delta: [expect.any(String)], full: [] });
    // Nothing else left: no partial delta, no rebuilt temporary file.
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
    // The next call finds the verified file and downloads nothing.
    const again = await manager(stateDir).downloadUpdate(update, { currentFile });
    expect(again).toMatchObject({ file: done.file, delta: false, downloadedBytes: 0 });
  });

  it('a file rebuilt by a process that died mid-apply is deleted by the next update; one being written is kept', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    const dir = path.join(stateDir, 'downloads');
    fs.mkdirSync(dir, { recursive: true });
    // What zstd had written when its process was killed: for this update and another, by a process
    // that has ended, and by an earlier process that had this process's pid.
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    const other = 'ab'.repeat(32);
    const left = [`${target.sha256}.${dead}.rebuilt`, `${other}.${dead}.rebuilt`, `${other}.${process.pid}.rebuilt`];
    // A rebuild under way in another process that still runs.
    const live = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
    const exited = new Promise((resolve) => live.once('exit', resolve));
    const writing = `${other}.${live.pid}.rebuilt`;
    for (const name of [...left, writing]) fs.writeFileSync(path.join(dir, name), builds.after.subarray(0, 5000));
    const files = [target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')];
    try {
      const done = await manager(stateDir).downloadUpdate(update, { currentFile });
      expect(done.delta).toBe(true);
      expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
      expect(downloadsOf(stateDir).sort()).toEqual([...files, writing].sort());
    } finally {
      live.kill('SIGKILL');
      await exited;
    }
    // Once that process is gone, the next call removes its file too (even one that downloads nothing).
    const again = await manager(stateDir).downloadUpdate(update);
    expect(again.downloadedBytes).toBe(0);
    expect(downloadsOf(stateDir).sort()).toEqual(files);
  });

  it('a cut-off delta download resumes with Range and If-Range, as every download', async () => {
    const update = await mandatoryUpdate();
    let cut = false;
    let cutNow!: () => void;
    const cutting = new Promise<void>((resolve) => (cutNow = resolve));
    s.proxy.rule = async (seen, upstream) => {
      if (!isDelta(seen.url) || cut) return undefined;
      cut = true;
      return { ...(await upstream()), cutAfter: 1000, hold: cutting };
    };
    const from = s.proxy.seen.length;
    const stateDir = s.stateDir();
    const downloading = manager(stateDir).downloadUpdate(update, { currentFile });
    // The connection is cut once the first 1000 bytes are on disk (however busy the machine).
    const part = path.join(stateDir, 'downloads', `${offer.sha256}.part`);
    await vi.waitFor(() => expect(fs.statSync(part).size).toBe(1000), { timeout: 10_000, interval: 20 });
    cutNow();
    const done = await downloading;
    s.proxy.rule = null;
    const tries = s.proxy.seen.slice(from).filter((r) => isDelta(r.url));
    // The resumed request asks for the rest of what arrived before the cut.
    expect(tries.map((r) => r.headers.range)).toEqual([undefined, 'bytes=1000-']);
    expect(tries[1]?.headers['if-range']).toBe(`"${offer.sha256}"`);
    expect(done.delta).toBe(true);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
  });

  it('a cancelled delta download stops (no fallback) and keeps its part; the next call resumes it', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    const controller = new AbortController();
    s.proxy.rule = async (seen, upstream) => {
      if (!isDelta(seen.url)) return undefined;
      const answer = await upstream();
      return { ...answer, cutAfter: 1000, hold: true };
    };
    const from = s.proxy.seen.length;
    const cancelled = manager(stateDir).downloadUpdate(update, { currentFile, signal: controller.signal });
    // Cancelled once the first 1000 bytes are on disk (the proxy holds the rest back).
    const part = path.join(stateDir, 'downloads', `${offer.sha256}.part`);
    await vi.waitFor(() => expect(fs.statSync(part).size).toBe(1000), { timeout: 10_000, interval: 20 });
    controller.abort();
    await expect(cancelled).rejects.toBeInstanceOf(AbortedError);
    s.proxy.rule = null;
    expect(downloads(from).full).toEqual([]);
    expect(downloadsOf(stateDir)).toContain(`${offer.sha256}.part`);
    const resumed = s.proxy.seen.length;
    const done = await manager(stateDir).downloadUpdate(update, { currentFile });
    expect(done).toMatchObject({ delta: true, downloadedBytes: offer.fileSize - 1000 });
    expect(s.proxy.seen.slice(resumed).find((r) => isDelta(r.url))?.headers.range).toBe('bytes=1000-');
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  });

  it('a corrupted delta is refused before zstd reads it, and the full download ends with the verified file', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    s.proxy.rule = async (seen, upstream) => {
      if (!isDelta(seen.url)) return undefined;
      const answer = await upstream();
      const body = Buffer.from(answer.body);
      body[body.length >> 1] = (body[body.length >> 1] ?? 0) ^ 0xff;
      return { ...answer, body };
    };
    const from = s.proxy.seen.length;
    const done = await manager(stateDir).downloadUpdate(update, { currentFile });
    s.proxy.rule = null;
    expect(done).toMatchObject({ delta: false, downloadedBytes: offer.fileSize + target.size });
    expect(done.deltaFailure).toMatch(/SHA-256/);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(downloads(from)).toMatchObject({ delta: [expect.any(String)], full: [expect.any(String)] });
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  });

  it('a wrong current file fails in zstd (the frame checksum), and the full download follows', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    const wrong = path.join(stateDir, 'not-the-installed-file.exe');
    fs.writeFileSync(wrong, randomBytes(builds.before.length));
    const done = await manager(stateDir).downloadUpdate(update, { currentFile: wrong });
    expect(done).toMatchObject({ delta: false, downloadedBytes: offer.fileSize + target.size });
    expect(done.deltaFailure).toMatch(/zstd exited with 1/);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(
      downloadsOf(stateDir)
        .filter((f) => f !== path.basename(wrong))
        .sort(),
    ).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  });

  it('a delta that rebuilds another file is refused by the check against latest, and the full download follows', async () => {
    // A valid patch from the current file, to a file one byte off the target (the offer names it, as a
    // service that mixed up its files would): zstd succeeds, the SHA-256 of latest does not match.
    const folder = s.stateDir();
    const other = Buffer.from(builds.after);
    other[1000] = (other[1000] ?? 0) ^ 0xff;
    fs.writeFileSync(path.join(folder, 'other'), other);
    execFileSync('zstd', [
      '-q',
      '--long=31',
      `--patch-from=${currentFile}`,
      path.join(folder, 'other'),
      '-o',
      path.join(folder, 'patch'),
    ]);
    const patch = fs.readFileSync(path.join(folder, 'patch'));
    const update = await mandatoryUpdate();
    const misnamed = { ...update, delta: { ...offer, fileSize: patch.length, sha256: sha256(patch) } };
    s.proxy.rule = async (seen, upstream) => (isDelta(seen.url) ? { ...(await upstream()), body: patch } : undefined);
    const stateDir = s.stateDir();
    const done = await manager(stateDir).downloadUpdate(misnamed, { currentFile });
    s.proxy.rule = null;
    expect(done).toMatchObject({ delta: false, downloadedBytes: patch.length + target.size });
    expect(done.deltaFailure).toMatch(new RegExp(`SHA-256 is ${sha256(other)}`));
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  });

  it('a delta the service no longer has (404), a missing current file or no zstd: the full download', async () => {
    const update = await mandatoryUpdate();
    s.proxy.rule = (seen) =>
      isDelta(seen.url) ? { status: 404, headers: {}, body: Buffer.from('{"error":"gone"}') } : undefined;
    let from = s.proxy.seen.length;
    const missing = await manager(s.stateDir()).downloadUpdate(update, { currentFile });
    s.proxy.rule = null;
    expect(missing).toMatchObject({ delta: false, downloadedBytes: target.size });
    expect(missing.deltaFailure).toMatch(/404/);
    expect(downloads(from).delta).toHaveLength(1);

    from = s.proxy.seen.length;
    const noFile = await manager(s.stateDir()).downloadUpdate(update, { currentFile: '/nonexistent/launcher.exe' });
    expect(noFile).toMatchObject({ delta: false, downloadedBytes: target.size });
    expect(noFile.deltaFailure).toMatch(/ENOENT/);
    const noZstd = await manager(s.stateDir(), { zstd: '/nonexistent/zstd' }).downloadUpdate(update, { currentFile });
    expect(noZstd).toMatchObject({ delta: false, downloadedBytes: target.size });
    expect(noZstd.deltaFailure).toMatch(/cannot run/);
    // Neither asked for the delta: it would not have been used.
    expect(downloads(from)).toMatchObject({ delta: [], full: [expect.any(String), expect.any(String)] });
    for (const done of [missing, noFile, noZstd]) expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
  });

  it('no current file: the full download, the delta not asked for', async () => {
    const update = await mandatoryUpdate();
    const from = s.proxy.seen.length;
    const done = await manager(s.stateDir()).downloadUpdate(update);
    expect(done).toMatchObject({ delta: false, downloadedBytes: target.size, deltaFailure: null });
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(downloads(from)).toMatchObject({ delta: [], full: [expect.any(String)] });
  });

  it('the command: --current-file takes the delta; its JSON line says delta and downloadedBytes', async () => {
    const run = (stateDir: string, more: string[]) =>
      promisify(execFile)(
        process.execPath,
        ['--import', 'tsx', CLI, 'update', '--server', s.proxy.url, '--trust', keysFile, '--state', stateDir].concat([
          '--app',
          'delta',
          '--version-code',
          '1',
          ...more,
        ]),
        { cwd: ROOT },
      );
    const lastLine = (stdout: string) => JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>;
    const withDelta = await run(s.stateDir(), ['--current-file', currentFile]);
    expect(lastLine(withDelta.stdout)).toMatchObject({
      result: 'mandatory',
      versionCode: 2,
      sha256: target.sha256,
      delta: true,
      deltaEngine: zlibZstd() === null ? 'program' : 'node',
      downloadedBytes: offer.fileSize,
    });
    const full = await run(s.stateDir(), []);
    expect(lastLine(full.stdout)).toMatchObject({ sha256: target.sha256, delta: false, downloadedBytes: target.size });
    expect(lastLine(full.stdout)).not.toHaveProperty('deltaEngine');
    // A delta that fails says why on stderr, and the line still ends with the verified file.
    const wrong = path.join(s.stateDir(), 'wrong.exe');
    fs.writeFileSync(wrong, randomBytes(1000));
    const fellBack = await run(s.stateDir(), ['--current-file', wrong]);
    expect(lastLine(fellBack.stdout)).toMatchObject({ sha256: target.sha256, delta: false });
    expect(JSON.parse(fellBack.stderr.trim().split('\n').at(-1) ?? '')).toMatchObject({
      warning: expect.stringMatching(zlibZstd() === null ? /^delta not used: zstd exited/ : /^delta not used: /),
    });
  });

  it('the installed package file the state folder keeps is the default current file', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    // As `startup` leaves it after the library installed 1.0 (its verified file kept in downloads).
    const kept = path.join(stateDir, 'downloads', sha256(builds.before), 'delta-launcher-1.0');
    fs.mkdirSync(path.dirname(kept), { recursive: true });
    fs.copyFileSync(currentFile, kept);
    const full = { version: '1.0', versionCode: 1, file: kept, sha256: sha256(builds.before) };
    const record = { installed: { full, patch: null }, pending: { install: null, patch: null } };
    fs.writeFileSync(path.join(stateDir, 'lifecycle.json'), JSON.stringify(record));
    const done = await manager(stateDir).downloadUpdate(update);
    expect(done).toMatchObject({ delta: true, downloadedBytes: offer.fileSize });
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
  });
});

describe('patch deltas', () => {
  it("the applied patch's file is the next patch's delta source: the second patch downloads only its delta", async () => {
    const pkg = await launcherPackage(s.t, 'delta-launcher-patch');
    const patches = twoBuilds(MB);
    const three = await upload(s.t, 'patch-3.zip', patches.before);
    await createVersion(s.t, pkg, { version: '2.0.1', versionCode: 3, filePath: three.filePath });
    const stateDir = s.stateDir();
    const m = new UpdateManager({ ...managerOptions(stateDir), trustedKeys: await s.keys() });
    await m.startup(2);
    const first = await m.checkForUpdates();
    expect(first).toMatchObject({ result: 'patch', update: { kind: 'patch', versionCode: 3 } });
    const applied = await m.downloadUpdate(first.update!);
    expect(applied).toMatchObject({ delta: false, downloadedBytes: patches.before.length });
    await m.markPatchApplied(3);

    const four = await upload(s.t, 'patch-4.zip', patches.after);
    await createVersion(s.t, pkg, { version: '2.0.2', versionCode: 4, filePath: four.filePath });
    const check = await vi.waitFor(
      async () => {
        const found = await m.checkForUpdates();
        expect(found.update?.delta?.fromVersionCode).toBe(3);
        return found;
      },
      { timeout: 60_000, interval: 200 },
    );
    const update = check.update!;
    const from = s.proxy.seen.length;
    const done = await m.downloadUpdate(update);
    expect(done).toMatchObject({ delta: true, downloadedBytes: update.delta!.fileSize, deltaFailure: null });
    expect(update.delta!.fileSize).toBeLessThan(patches.after.length / 10);
    expect(sha256(fs.readFileSync(done.file))).toBe(sha256(patches.after));
    const seen = s.proxy.seen.slice(from).map((r) => new URL(r.url, 'http://x').pathname);
    expect(seen.filter((u) => u.startsWith('/api/software/download/'))).toEqual([expect.stringMatching(/\/delta\/3$/)]);
    // Applied in turn, it is the source of the patch after it; the one before is pruned.
    await m.markPatchApplied(4);
    expect((await m.lifecycleRecord()).installed.patch).toMatchObject({ versionCode: 4, file: done.file });
    expect(downloadsOf(stateDir)).not.toContain(path.relative(path.join(stateDir, 'downloads'), applied.file));
    expect(fs.existsSync(done.file)).toBe(true);
  }, 90_000);
});

describe("deltas rebuilt in the launcher's process (Node 24 zlib, the service on this Node)", () => {
  it('rebuilds with zlib, no zstd program needed: the target exactly, only the delta downloaded', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    const done = await onNode24(stateDir, update, currentFile, { zstd: '/nonexistent/zstd' });
    expect(done).toMatchObject({
      delta: true,
      deltaEngine: 'node',
      downloadedBytes: offer.fileSize,
      deltaFailure: null,
    });
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(downloads(from)).toMatchObject({ delta: [expect.any(String)], full: [] });
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  }, 120_000);

  it('a wrong current file fails in zlib (the frame checksum or the dictionary): the full download, nothing left', async () => {
    const update = await mandatoryUpdate();
    const stateDir = s.stateDir();
    const wrong = path.join(s.stateDir(), 'not-the-installed-file.exe');
    fs.writeFileSync(wrong, randomBytes(builds.before.length));
    const done = await onNode24(stateDir, update, wrong, { zstd: '/nonexistent/zstd' });
    expect(done).toMatchObject({ delta: false, deltaEngine: null, downloadedBytes: offer.fileSize + target.size });
    expect(done.deltaFailure).toMatch(/\S/);
    expect(done.deltaFailure).not.toMatch(/zstd exited|cannot run/);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  }, 120_000);

  it('a pair above the in-process cap goes to the zstd program; with no program either, the full download', async () => {
    const update = await mandatoryUpdate();
    const cap = 2 * builds.before.length + target.size - 1;
    const byProgram = await onNode24(s.stateDir(), update, currentFile, { inProcessDeltaMaxBytes: cap });
    expect(byProgram).toMatchObject({ delta: true, deltaEngine: 'program', downloadedBytes: offer.fileSize });
    expect(sha256(fs.readFileSync(byProgram.file))).toBe(target.sha256);
    const neither = await onNode24(s.stateDir(), update, currentFile, {
      inProcessDeltaMaxBytes: cap,
      zstd: '/nonexistent/zstd',
    });
    expect(neither).toMatchObject({ delta: false, downloadedBytes: target.size });
    expect(neither.deltaFailure).toMatch(/cannot run/);
    // At the cap exactly, zlib rebuilds it.
    const atCap = await onNode24(s.stateDir(), update, currentFile, { inProcessDeltaMaxBytes: cap + 1 });
    expect(atCap).toMatchObject({ delta: true, deltaEngine: 'node' });
  }, 180_000);

  it('the command on Node 24 says deltaEngine node', async () => {
    const [npx, args] = NODE_24;
    const cliDist = path.resolve(import.meta.dirname, '../dist/cli.js');
    const { stdout } = await promisify(execFile)(
      npx,
      [...args, cliDist, 'update', '--server', s.proxy.url, '--trust', keysFile, '--state', s.stateDir()].concat([
        '--app',
        'delta',
        '--version-code',
        '1',
        '--current-file',
        currentFile,
      ]),
      { cwd: ROOT, timeout: 120_000 },
    );
    expect(JSON.parse(stdout.trim().split('\n').at(-1) ?? '')).toMatchObject({
      result: 'mandatory',
      delta: true,
      deltaEngine: 'node',
      downloadedBytes: offer.fileSize,
    });
  }, 120_000);
});

/**
 * Check-update answers offer `bytes` as the delta from 1 (served by the proxy), re-signed with the
 * stolen key: the client has every reason to believe them.
 */
async function offerForgedDelta(bytes: Buffer): Promise<void> {
  const [{ keyId } = { keyId: '' }] = await s.keys();
  s.proxy.rule = async (seen, upstream) => {
    if (seen.url === '/forged-delta') return { status: 200, headers: {}, body: bytes };
    if (!seen.url.startsWith('/api/software/check-update')) return undefined;
    const answer = await upstream();
    const json = JSON.parse(answer.body.toString('utf8')) as { latest: { delta?: DeltaOffer } };
    json.latest.delta = {
      fromVersionCode: 1,
      downloadUrl: `${s.proxy.url}/forged-delta`,
      fileSize: bytes.length,
      sha256: sha256(bytes),
    };
    const body = Buffer.from(JSON.stringify(json));
    return { ...answer, body, headers: { ...answer.headers, ...signLikeTheService(body, stolen, keyId, seen.url) } };
  };
}

/**
 * A zstd bomb: 16 frames of 64 MiB of zeros each (2 MiB windows, no content size), 1 GiB from
 * 34 kB, far past the 4 MB update the answer promises.
 */
function bomb(): Buffer {
  const frame = execFileSync('zstd', ['-q', '-c'], { input: Buffer.alloc(64 * MB), maxBuffer: MB });
  return Buffer.concat(Array.from({ length: 16 }, () => frame));
}

/** `work`'s result and the largest rebuilt file seen in `stateDir`'s downloads meanwhile (looked at every 2 ms). */
async function largestRebuilt<T>(stateDir: string, work: () => Promise<T>): Promise<{ result: T; largest: number }> {
  const dir = path.join(stateDir, 'downloads');
  let largest = 0;
  const look = setInterval(() => {
    for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
      if (!name.endsWith('.rebuilt')) continue;
      largest = Math.max(largest, fs.statSync(path.join(dir, name), { throwIfNoEntry: false })?.size ?? 0);
    }
  }, 2);
  try {
    return { result: await work(), largest };
  } finally {
    clearInterval(look);
  }
}

describe('a delta that rebuilds past the size the answer promises (signed with a stolen key)', () => {
  const bombBytes = bomb();
  const stopped = new RegExp(`more than the ${target.size} bytes latest promises`);

  /** The mandatory update as the forged answers offer it, verified with the service's (stolen) key. */
  async function forgedUpdate(bytes: Buffer): Promise<UpdateInfo> {
    await offerForgedDelta(bytes);
    const update = await mandatoryUpdate();
    expect(update.delta).toMatchObject({ fileSize: bytes.length, sha256: sha256(bytes) });
    return update;
  }

  it('the zstd program: stopped at the promised size, a failed delta, then the full file, verified', async () => {
    const update = await forgedUpdate(bombBytes);
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    const started = performance.now();
    const { result: done, largest } = await largestRebuilt(stateDir, () =>
      manager(stateDir).downloadUpdate(update, { currentFile }),
    );
    s.proxy.rule = null;
    expect(performance.now() - started).toBeLessThan(20_000);
    expect(largest).toBeLessThanOrEqual(target.size);
    expect(done).toMatchObject({ delta: false, deltaEngine: null, downloadedBytes: bombBytes.length + target.size });
    expect(done.deltaFailure).toMatch(stopped);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(downloads(from).full).toHaveLength(1);
    expect(downloadsOf(stateDir).sort()).toEqual([target.sha256, path.join(target.sha256, 'delta-launcher-2.0.exe')]);
  });

  it("the runtime's zlib (Node 24): stopped at the promised size, the warning, then the full file, verified", async () => {
    const update = await forgedUpdate(bombBytes);
    const stateDir = s.stateDir();
    const { result: done, largest } = await largestRebuilt(stateDir, () =>
      onNode24(stateDir, update, currentFile, { zstd: '/nonexistent/zstd' }),
    );
    // The command says it as a warning, and still ends with the verified file.
    const [npx, args] = NODE_24;
    const run = await promisify(execFile)(
      npx,
      [...args, path.resolve(import.meta.dirname, '../dist/cli.js'), 'update', '--server', s.proxy.url].concat([
        '--trust',
        keysFile,
        '--state',
        s.stateDir(),
        '--app',
        'delta',
        '--version-code',
        '1',
        '--current-file',
        currentFile,
      ]),
      { cwd: ROOT, timeout: 120_000 },
    );
    s.proxy.rule = null;
    expect(largest).toBeLessThanOrEqual(target.size);
    expect(done).toMatchObject({ delta: false, deltaEngine: null, downloadedBytes: bombBytes.length + target.size });
    expect(done.deltaFailure).toMatch(stopped);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
    expect(JSON.parse(run.stderr.trim().split('\n').at(-1) ?? '')).toMatchObject({
      warning: expect.stringMatching(stopped),
    });
    expect(JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '')).toMatchObject({
      sha256: target.sha256,
      delta: false,
      downloadedBytes: bombBytes.length + target.size,
    });
  }, 180_000);

  it("the runtime's zlib (Node 24): a frame asking a window larger than the promised file is refused before any byte", async () => {
    // 1 MiB of zeros with a 1 GiB window and no content size: the decoder would reserve the window.
    const wide = execFileSync('zstd', ['-q', '-c', '--zstd=wlog=30'], { input: Buffer.alloc(MB), maxBuffer: MB });
    const update = await forgedUpdate(wide);
    const stateDir = s.stateDir();
    const { result: done, largest } = await largestRebuilt(stateDir, () =>
      onNode24(stateDir, update, currentFile, { zstd: '/nonexistent/zstd' }),
    );
    s.proxy.rule = null;
    expect(largest).toBe(0);
    expect(done).toMatchObject({ delta: false, downloadedBytes: wide.length + target.size });
    expect(done.deltaFailure).toMatch(/too much memory/);
    expect(sha256(fs.readFileSync(done.file))).toBe(target.sha256);
  }, 120_000);
});
