import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bucketOf } from '../../../test/helpers/bucket.js';
import { UpdateManager } from '../src/index.js';
import { admin, downloadsOf, launcherPackage, publishVersion, type Service, startService } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');

let s: Service;
let keysFile: string;
beforeAll(async () => {
  s = await startService();
  keysFile = path.join(s.stateDir(), 'keys.json');
  fs.writeFileSync(keysFile, JSON.stringify(await s.keys()));
});
afterAll(() => s.close());

async function manager(app: string, stateDir = s.stateDir()) {
  return new UpdateManager({ serverUrl: s.proxy.url, trustedKeys: await s.keys(), stateDir, app });
}

/** The check-update requests the proxy saw since `from`, as `slug@versionCode`. */
function checks(from: number): string[] {
  return s.proxy.seen
    .slice(from)
    .filter((r) => r.url.startsWith('/api/software/check-update'))
    .map((r) => {
      const q = new URL(r.url, 'http://x').searchParams;
      return `${q.get('slug')}@${q.get('versionCode')}`;
    });
}

/** Runs the `launcher-client` command (from its sources) and answers its exit code and output. */
function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string; last: unknown }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { cwd: ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => {
      const lines = stdout.trim().split('\n');
      let last: unknown = null;
      try {
        last = JSON.parse(lines.at(-1) ?? '');
      } catch {
        // not JSON: the assertions say so
      }
      resolve({ code, stdout, stderr, last });
    });
  });
}

function updateArgs(app: string, stateDir: string, versionCode: number, more: string[] = []) {
  return [
    'update',
    '--server',
    s.proxy.url,
    '--trust',
    keysFile,
    '--state',
    stateDir,
    '--app',
    app,
    '--version-code',
    String(versionCode),
    ...more,
  ];
}

describe("the specification's client flow", () => {
  it('up to date: the full package, then the patch with the same versionCode, both with the deviceId', async () => {
    const full = await launcherPackage(s.t, 'same-launcher');
    const patch = await launcherPackage(s.t, 'same-launcher-patch');
    await publishVersion(s.t, full, 3);
    await publishVersion(s.t, patch, 3);
    const m = await manager('same');
    const from = s.proxy.seen.length;
    expect(await m.checkForUpdates(3)).toEqual({ result: 'up-to-date', optional: null, update: null });
    expect(checks(from)).toEqual(['same-launcher@3', 'same-launcher-patch@3']);
    const deviceId = await m.deviceId();
    for (const r of s.proxy.seen.slice(from)) {
      expect(new URL(r.url, 'http://x').searchParams.get('deviceId')).toBe(deviceId);
      expect(r.headers['accept-encoding']).toBe('identity');
    }

    const run = await cli(updateArgs('same', s.stateDir(), 3));
    expect(run.code, run.stderr).toBe(0);
    expect(run.last).toEqual({ result: 'up-to-date', optional: null });
  });

  it('an optional update is shown and the flow goes on to the patch, which is downloaded', async () => {
    const full = await launcherPackage(s.t, 'opt-launcher');
    const patch = await launcherPackage(s.t, 'opt-launcher-patch');
    await publishVersion(s.t, full, 1);
    await publishVersion(s.t, full, 2);
    await publishVersion(s.t, patch, 1);
    const p2 = await publishVersion(s.t, patch, 2);
    const m = await manager('opt');
    const from = s.proxy.seen.length;
    const check = await m.checkForUpdates(1);
    expect(checks(from)).toEqual(['opt-launcher@1', 'opt-launcher-patch@1']);
    expect(check).toMatchObject({
      result: 'patch',
      optional: { kind: 'full', version: '1.2', versionCode: 2 },
      update: { kind: 'patch', slug: 'opt-launcher-patch', version: '1.2', versionCode: 2, sha256: p2.sha256 },
    });
    const done = await m.downloadUpdate(check.update!);
    expect(fs.readFileSync(done.file).equals(p2.content)).toBe(true);

    const stateDir = s.stateDir();
    const run = await cli(updateArgs('opt', stateDir, 1));
    expect(run.code, run.stderr).toBe(0);
    expect(run.last).toEqual({
      result: 'patch',
      optional: { version: '1.2', versionCode: 2 },
      version: '1.2',
      versionCode: 2,
      file: path.join(stateDir, 'downloads', p2.sha256, 'opt-launcher-patch-1.2.exe'),
      sha256: p2.sha256,
      downgrade: false,
      delta: false,
      downloadedBytes: 2048,
    });
    // Not a terminal: no progress bar.
    expect(run.stderr).toBe('');
  });

  it('an optional update alone, with no patch newer (or no patch package at all), is up to date with the indicator', async () => {
    const full = await launcherPackage(s.t, 'alone-launcher');
    await publishVersion(s.t, full, 1);
    await publishVersion(s.t, full, 2);
    const from = s.proxy.seen.length;
    expect(await (await manager('alone')).checkForUpdates(1)).toMatchObject({
      result: 'up-to-date',
      optional: { version: '1.2', versionCode: 2 },
      update: null,
    });
    expect(checks(from)).toEqual(['alone-launcher@1', 'alone-launcher-patch@1']);
  });

  it('a mandatory update stops the flow: the patch is not checked, the full package is downloaded', async () => {
    const full = await launcherPackage(s.t, 'force-launcher');
    const patch = await launcherPackage(s.t, 'force-launcher-patch');
    await publishVersion(s.t, full, 1);
    const v2 = await publishVersion(s.t, full, 2, { forceUpdate: true });
    await publishVersion(s.t, patch, 5);
    const stateDir = s.stateDir();
    const from = s.proxy.seen.length;
    const run = await cli(updateArgs('force', stateDir, 1));
    expect(run.code, run.stderr).toBe(0);
    expect(checks(from)).toEqual(['force-launcher@1']);
    expect(run.last).toEqual({
      result: 'mandatory',
      optional: null,
      version: '1.2',
      versionCode: 2,
      file: path.join(stateDir, 'downloads', v2.sha256, 'force-launcher-1.2.exe'),
      sha256: v2.sha256,
      downgrade: false,
      delta: false,
      downloadedBytes: 2048,
    });
    expect(
      fs.readFileSync(path.join(stateDir, 'downloads', v2.sha256, 'force-launcher-1.2.exe')).equals(v2.content),
    ).toBe(true);
  });

  it('--patch-version-code checks the patch package with its own code', async () => {
    const full = await launcherPackage(s.t, 'pcode-launcher');
    const patch = await launcherPackage(s.t, 'pcode-launcher-patch');
    await publishVersion(s.t, full, 1);
    await publishVersion(s.t, patch, 5);
    const p6 = await publishVersion(s.t, patch, 6);
    const from = s.proxy.seen.length;
    const run = await cli(updateArgs('pcode', s.stateDir(), 1, ['--patch-version-code', '5', '--lang', 'en']));
    expect(run.code, run.stderr).toBe(0);
    expect(checks(from)).toEqual(['pcode-launcher@1', 'pcode-launcher-patch@5']);
    expect(run.last).toMatchObject({ result: 'patch', optional: null, versionCode: 6, sha256: p6.sha256 });
    expect(new URL(s.proxy.seen.at(-2)!.url, 'http://x').searchParams.get('lang')).toBe('en');
  });

  it('a staged version is not offered to a device outside its rollout, and is once the ramp includes it', async () => {
    const full = await launcherPackage(s.t, 'stage-launcher');
    await publishVersion(s.t, full, 1);
    const stateDir = s.stateDir();
    const m = await manager('stage', stateDir);
    const deviceId = await m.deviceId();
    // Staged just short of this device's bucket: the device is outside.
    const v2 = await publishVersion(s.t, full, 2, { forceUpdate: true, rolloutPercent: 0 });
    const bucket = bucketOf(v2.id, deviceId);
    await admin(s.t, 'PUT', `/api/software/versions/${v2.id}`, { rolloutPercent: bucket });
    expect(await m.checkForUpdates(1)).toEqual({ result: 'up-to-date', optional: null, update: null });
    // Ramped one step: the device's bucket is inside.
    const ramp = await admin(s.t, 'PUT', `/api/software/versions/${v2.id}`, { rolloutPercent: bucket + 1 });
    expect(ramp.statusCode).toBe(200);
    expect(await m.checkForUpdates(1)).toMatchObject({
      result: 'mandatory',
      update: { versionCode: 2, sha256: v2.sha256, downgrade: false },
    });
  });

  it('a revoked version: a mandatory update to the version below, with downgrade', async () => {
    const full = await launcherPackage(s.t, 'rev-launcher');
    const v1 = await publishVersion(s.t, full, 1);
    const v2 = await publishVersion(s.t, full, 2);
    const stateDir = s.stateDir();
    expect(await (await manager('rev', stateDir)).checkForUpdates(2)).toMatchObject({ result: 'up-to-date' });
    expect((await admin(s.t, 'POST', `/api/software/versions/${v2.id}/revoke`)).statusCode).toBe(200);
    const run = await cli(updateArgs('rev', stateDir, 2));
    expect(run.code, run.stderr).toBe(0);
    expect(run.last).toEqual({
      result: 'mandatory',
      optional: null,
      version: '1.1',
      versionCode: 1,
      file: path.join(stateDir, 'downloads', v1.sha256, 'rev-launcher-1.1.exe'),
      sha256: v1.sha256,
      downgrade: true,
      delta: false,
      downloadedBytes: 2048,
    });
    expect(downloadsOf(stateDir)).toContain(path.join(v1.sha256, 'rev-launcher-1.1.exe'));
  });
});

describe('the launcher-client command', () => {
  it('draws a progress bar on a terminal (stderr), and still ends stdout with the JSON line', async () => {
    const full = await launcherPackage(s.t, 'tty-launcher');
    await publishVersion(s.t, full, 1);
    const v2 = await publishVersion(s.t, full, 2, { forceUpdate: true }, 512 * 1024);
    const command = [process.execPath, '--import', 'tsx', CLI, ...updateArgs('tty', s.stateDir(), 1)].join(' ');
    // util-linux's script runs the command on a pseudo-terminal.
    const output = await new Promise<string>((resolve) => {
      const child = spawn('script', ['-qec', command, '/dev/null'], { cwd: ROOT });
      let text = '';
      child.stdout.on('data', (c: Buffer) => (text += c.toString()));
      child.on('close', () => resolve(text));
    });
    expect(output).toMatch(/\[#{30}\] 100% 0\.5\/0\.5 MiB/);
    const last = output.trim().split(/\r?\n/).at(-1) ?? '';
    expect(JSON.parse(last)).toMatchObject({ result: 'mandatory', sha256: v2.sha256 });
  });

  it('device-id prints the id kept in the state folder; heartbeat --once beats with it', async () => {
    const stateDir = s.stateDir();
    const first = await cli(['device-id', '--state', stateDir]);
    expect(first.code).toBe(0);
    const { deviceId } = first.last as { deviceId: string };
    expect((await cli(['device-id', '--state', stateDir])).last).toEqual({ deviceId });
    const beat = await cli([
      'heartbeat',
      '--server',
      s.proxy.url,
      '--state',
      stateDir,
      '--version-code',
      '7',
      '--once',
    ]);
    expect(beat.code, beat.stderr).toBe(0);
    expect(beat.last).toEqual({ ok: true, deviceId });
  });

  it('usage errors and unreachable servers exit 1 with {error, kind}; --help exits 0', async () => {
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('launcher-client update --server URL');
    const missing = await cli(['update', '--server', s.proxy.url]);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr.trim())).toMatchObject({ kind: 'usage' });
    const badKeys = path.join(s.stateDir(), 'bad-keys.json');
    fs.writeFileSync(badKeys, JSON.stringify([{ keyId: 'k', publicKey: 'too short' }]));
    const bad = await cli([
      'update',
      '--server',
      s.proxy.url,
      '--trust',
      badKeys,
      '--state',
      s.stateDir(),
      '--app',
      'x',
      '--version-code',
      '1',
    ]);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr.trim())).toMatchObject({ kind: 'usage' });
    const unknown = await cli(['frobnicate']);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stderr.trim())).toMatchObject({ kind: 'usage' });
    const down = await cli([
      'heartbeat',
      '--server',
      'http://127.0.0.1:1',
      '--state',
      s.stateDir(),
      '--version-code',
      '1',
      '--once',
    ]);
    expect(down.code).toBe(1);
    expect(JSON.parse(down.stderr.trim())).toMatchObject({ kind: 'network' });
  });
});
