import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createVersion, upload } from '../../../test/helpers/app.js';
import { HttpError, IntegrityError, StateError, type UpdateInfo, UpdateManager } from '../src/index.js';
import { downloadsOf, launcherPackage, publishVersion, type Service, startService } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');
const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

/** An installer: a script that writes the arguments it was started with (one a line) to its first one. */
const INSTALLER = '#!/bin/sh\nout="$1"\nshift\nprintf "%s\\n" "$@" > "$out.tmp" && mv "$out.tmp" "$out"\n';

let s: Service;
let keysFile: string;
let installerSha: string;
beforeAll(async () => {
  s = await startService();
  keysFile = path.join(s.stateDir(), 'keys.json');
  fs.writeFileSync(keysFile, JSON.stringify(await s.keys()));
  // An app whose mandatory update 2 is the installer script, uploaded as `acme-setup-2.sh`.
  const full = await launcherPackage(s.t, 'inst-launcher');
  await publishVersion(s.t, full, 1);
  const file = await upload(s.t, 'acme-setup-2.sh', INSTALLER);
  installerSha = file.sha256;
  await createVersion(s.t, full, { version: '2.0', versionCode: 2, filePath: file.filePath, forceUpdate: true });
});
afterAll(() => s.close());

async function manager(app: string, stateDir: string) {
  return new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: await s.keys(), stateDir, app });
}

async function cli(args: string[]) {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', CLI, ...args], {
      cwd: ROOT,
    });
    return { code: 0, stdout, stderr, last: JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as unknown };
  } catch (err) {
    const failed = err as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr, last: null };
  }
}

const updateArgs = (app: string, stateDir: string, versionCode: number, more: string[] = []) => [
  'update',
  ...['--server', s.proxy.url, '--trust', keysFile, '--state', stateDir, '--app', app],
  ...['--version-code', String(versionCode), ...more],
];

/** The lines the installer script wrote to `marker` once it ran. */
async function installerRan(marker: string): Promise<string[]> {
  await vi.waitFor(() => expect(fs.existsSync(marker)).toBe(true), { timeout: 10_000, interval: 20 });
  return fs.readFileSync(marker, 'utf8').trim().split('\n');
}

async function mandatory(m: UpdateManager): Promise<UpdateInfo> {
  const check = await m.checkForUpdates(1);
  expect(check.result).toBe('mandatory');
  return check.update!;
}

describe('the install lifecycle', () => {
  it('a full package with no version (a mistyped app) is an HttpError 404; the command exits 1 with kind http', async () => {
    const m = await manager('no-such-app', s.stateDir());
    const errors: Error[] = [];
    m.on('error', (err) => errors.push(err));
    const failed = await m.checkForUpdates(1).catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(HttpError);
    expect(failed).toMatchObject({ status: 404, kind: 'http' });
    expect(errors).toEqual([failed]);
    const run = await cli(updateArgs('no-such-app', s.stateDir(), 1));
    expect(run.code).toBe(1);
    expect(JSON.parse(run.stderr.trim())).toMatchObject({ kind: 'http', error: expect.stringMatching(/404/) });
  });

  it('a mandatory update is installed: verified, its original extension, executable, started detached with the args, pending; the next start confirms it and prunes downloads', async () => {
    const stateDir = s.stateDir();
    const m = await manager('inst', stateDir);
    const events: string[] = [];
    for (const name of [
      'checking-for-update',
      'update-available',
      'update-not-available',
      'update-downloaded',
    ] as const)
      m.on(name, () => events.push(name));
    m.on('download-progress', () => events.push('download-progress'));
    const downloaded = await m.downloadUpdate(await mandatory(m));
    expect(events.filter((e, i) => e !== events[i - 1])).toEqual([
      'checking-for-update',
      'update-available',
      'download-progress',
      'update-downloaded',
    ]);
    // The extension of the signed latest.fileName (acme-setup-2.sh), from the start.
    expect(downloaded.file).toBe(path.join(stateDir, 'downloads', installerSha, 'inst-launcher-2.0.sh'));

    const marker = path.join(stateDir, 'ran');
    const install = await m.installUpdate(downloaded, [marker, '--silent', 'two words']);
    expect(install).toMatchObject({ installer: downloaded.file, file: downloaded.file });
    expect(fs.statSync(install.installer).mode & 0o111).not.toBe(0);
    expect(await installerRan(marker)).toEqual(['--silent', 'two words']);
    expect(await m.pending()).toEqual({ install, patch: null });

    // Leftovers the next confirmed install prunes: another version's download, an abandoned part;
    // a part still fresh is kept for its resume.
    const downloads = path.join(stateDir, 'downloads');
    const other = 'ab'.repeat(32);
    fs.mkdirSync(path.join(downloads, other));
    fs.writeFileSync(path.join(downloads, other, 'inst-launcher-1.1'), 'old');
    const stale = path.join(downloads, `${'cd'.repeat(32)}.part`);
    const fresh = path.join(downloads, `${'ef'.repeat(32)}.part`);
    fs.writeFileSync(stale, 'x');
    fs.writeFileSync(fresh, 'y');
    const fourDaysAgo = new Date(Date.now() - 4 * 24 * 3600 * 1000);
    fs.utimesSync(stale, fourDaysAgo, fourDaysAgo);

    // A start still on 1 (the installer did not finish) confirms nothing.
    const again = await manager('inst', stateDir);
    expect((await again.startup(1)).confirmed).toBeNull();
    expect((await again.pending()).install).toEqual(install);
    // The start on 2 confirms it: installed, its file kept for the next delta, the rest pruned.
    const started = await (await manager('inst', stateDir)).startup(2);
    expect(started.confirmed).toEqual(install);
    expect(started.record).toEqual({
      installed: {
        full: { version: '2.0', versionCode: 2, file: downloaded.file, sha256: installerSha },
        patch: null,
      },
      pending: { install: null, patch: null },
    });
    expect(downloadsOf(stateDir).sort()).toEqual(
      [installerSha, path.join(installerSha, 'inst-launcher-2.0.sh'), `${'ef'.repeat(32)}.part`].sort(),
    );
    // Its version code is now the default of the flow; nothing to download is told as such.
    const after = await manager('inst', stateDir);
    const told: unknown[] = [];
    after.on('update-not-available', (check) => told.push(check));
    const upToDate = await after.checkForUpdates();
    expect(upToDate).toMatchObject({ result: 'up-to-date' });
    expect(told).toEqual([upToDate]);
  });

  it('nothing unverified is started: a file changed after its download is refused and deleted, nothing pending', async () => {
    const stateDir = s.stateDir();
    const m = await manager('inst', stateDir);
    const downloaded = await m.downloadUpdate(await mandatory(m));
    fs.writeFileSync(downloaded.file, INSTALLER.replace('printf', 'echo tampered;printf'));
    const marker = path.join(stateDir, 'ran');
    await expect(m.installUpdate(downloaded, [marker])).rejects.toBeInstanceOf(IntegrityError);
    expect(await m.pending()).toEqual({ install: null, patch: null });
    expect(downloadsOf(stateDir)).toEqual([installerSha]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(fs.existsSync(marker)).toBe(false);
  });

  it('the command: update --install -- ARGS starts it and records it; pending shows it; the start on 2 confirms it', async () => {
    const stateDir = s.stateDir();
    const marker = path.join(stateDir, 'ran');
    const run = await cli(updateArgs('inst', stateDir, 1, ['--install', '--', marker, '--lang', 'de']));
    expect(run.code, run.stderr).toBe(0);
    const file = path.join(stateDir, 'downloads', installerSha, 'inst-launcher-2.0.sh');
    expect(run.last).toMatchObject({
      result: 'mandatory',
      versionCode: 2,
      file,
      install: { installer: file, args: [marker, '--lang', 'de'] },
    });
    expect(await installerRan(marker)).toEqual(['--lang', 'de']);
    const pending = await cli(['pending', '--state', stateDir]);
    expect(pending.last).toMatchObject({ install: { versionCode: 2, installer: file }, patch: null });
    const confirmed = await cli(updateArgs('inst', stateDir, 2));
    expect(confirmed.last).toEqual({ result: 'up-to-date', optional: null });
    expect((await cli(['pending', '--state', stateDir])).last).toEqual({ install: null, patch: null });
    // Arguments after -- without --install are a usage error.
    const misuse = await cli(['pending', '--state', stateDir, '--', 'x']);
    expect(misuse.code).toBe(1);
    expect(JSON.parse(misuse.stderr.trim())).toMatchObject({ kind: 'usage' });
  });

  it('a downloaded patch is pending until the launcher applies it; applied, its code is the next check', async () => {
    const full = await launcherPackage(s.t, 'pat-launcher');
    const patch = await launcherPackage(s.t, 'pat-launcher-patch');
    await publishVersion(s.t, full, 1);
    await publishVersion(s.t, patch, 1);
    const p2 = await publishVersion(s.t, patch, 2);
    const stateDir = s.stateDir();
    const m = await manager('pat', stateDir);
    await m.startup(1);
    const check = await m.checkForUpdates();
    expect(check).toMatchObject({ result: 'patch', update: { versionCode: 2 } });
    const done = await m.downloadUpdate(check.update!);
    const pending = { file: done.file, versionCode: 2, sha256: p2.sha256 };
    expect((await cli(['pending', '--state', stateDir])).last).toEqual({ install: null, patch: pending });
    // Another code than the pending one is refused.
    const wrong = await cli(['applied', '--state', stateDir, '--patch-version-code', '3']);
    expect(wrong.code).toBe(1);
    expect(JSON.parse(wrong.stderr.trim())).toMatchObject({ kind: 'state' });
    await expect(m.markPatchApplied(3)).rejects.toBeInstanceOf(StateError);
    const applied = await cli(['applied', '--state', stateDir, '--patch-version-code', '2']);
    expect(applied.last).toEqual({ applied: pending });
    expect((await cli(['pending', '--state', stateDir])).last).toEqual({ install: null, patch: null });
    expect((await m.lifecycleRecord()).installed.patch).toMatchObject({ ...pending, fullVersionCode: 1 });
    const from = s.proxy.seen.length;
    expect(await m.checkForUpdates()).toMatchObject({ result: 'up-to-date' });
    const asked = s.proxy.seen.slice(from).map((r) => new URL(r.url, 'http://x').searchParams.get('versionCode'));
    expect(asked).toEqual(['1', '2']);
    // The command checks with the applied patch too.
    const run = await cli(updateArgs('pat', stateDir, 1));
    expect(run.last).toEqual({ result: 'up-to-date', optional: null });
    // The applied patch stays in downloads (what is installed stays).
    expect(downloadsOf(stateDir)).toContain(path.relative(path.join(stateDir, 'downloads'), done.file));
    expect(sha256(fs.readFileSync(done.file))).toBe(p2.sha256);
  });

  it('every record is written whole: a temporary file a kill left behind is ignored, the record reads back', async () => {
    const stateDir = s.stateDir();
    const m = await manager('inst', stateDir);
    await m.startup(1);
    const record = fs.readFileSync(path.join(stateDir, 'lifecycle.json'), 'utf8');
    // What a process killed between writing and renaming leaves: half a record beside the whole one.
    fs.writeFileSync(path.join(stateDir, `lifecycle.json.999.${'0'.repeat(8)}.tmp`), record.slice(0, 20));
    expect((await (await manager('inst', stateDir)).lifecycleRecord()).installed.full).toMatchObject({
      versionCode: 1,
    });
    const changes = await Promise.all([m.startup(5), m.startup(6), m.startup(7)]);
    expect(changes.map((c) => c.record.installed.full?.versionCode)).toEqual([5, 6, 7]);
    expect(JSON.parse(fs.readFileSync(path.join(stateDir, 'lifecycle.json'), 'utf8'))).toMatchObject({
      installed: { full: { versionCode: 7 } },
    });
  });
});
