import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admin, buildTestApp, createPackage, type TestApp } from '../../../test/helpers/app.js';
import { apiToken, listen } from '../../../test/helpers/tus.js';
import { startCli } from './cli-process.js';
import { forward } from './forward.js';

/**
 * launcher-publish (issue 27) as a program, against the real service on loopback through a proxy
 * that counts the upload bytes it forwards (tus PATCH bodies).
 */

let t: TestApp;
let token: string;
let server: string;
let proxy: http.Server;
let dir: string;
/** Bytes of PATCH bodies forwarded to the service, and a delay before each is forwarded. */
const counted = { patchBytes: 0, delayMs: 0 };

beforeAll(async () => {
  t = await buildTestApp();
  const base = new URL(await listen(t));
  token = await apiToken(t);
  await createPackage(t, { slug: 'cli-launcher', name: '启动器' });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-publish-'));
  proxy = http.createServer((req, res) => {
    const send = () => forward(base, req, res, (bytes) => (counted.patchBytes += bytes));
    if (req.method === 'PATCH' && counted.delayMs > 0) setTimeout(send, counted.delayMs);
    else send();
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  server = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => proxy.close(resolve));
  await t.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const start = (args: string[], env: Record<string, string | undefined> = {}) =>
  startCli(args, { LAUNCHER_TOKEN: token, LAUNCHER_PUBLISH_STATE: path.join(dir, 'state.json'), ...env });

const run = (args: string[], env?: Record<string, string | undefined>) => start(args, env).done;

function build(name: string, size: number): { file: string; sha256: string } {
  const data = randomBytes(size);
  const file = path.join(dir, name);
  fs.writeFileSync(file, data);
  return { file, sha256: createHash('sha256').update(data).digest('hex') };
}

const versionArgs = (file: string, code: number, extra: string[] = []) => [
  'version',
  '--server',
  server,
  '--package',
  'cli-launcher',
  '--version',
  `1.0.${code}`,
  '--version-code',
  String(code),
  '--file',
  file,
  ...extra,
];

/** `args` run again with another file (its last value): exit 1, and `{error}` naming the conflict. */
async function expectConflict(args: string[], otherName: string, error: RegExp): Promise<void> {
  const other = build(otherName, 100);
  const clash = await run([...args.slice(0, -1), other.file]);
  expect(clash.code).toBe(1);
  expect(JSON.parse(clash.stderr)).toEqual({ error: expect.stringMatching(error) });
}

async function versionsOf(): Promise<{ id: string; versionCode: number }[]> {
  const res = await admin(t, 'GET', '/api/admin/software/cli-launcher');
  return res.json<{ versions: { id: string; versionCode: number }[] }>().versions;
}

describe('launcher-publish', () => {
  it('--help for the program and each command; no token → exit 1 with {error}', async () => {
    const top = await run(['--help']);
    expect(top.code).toBe(0);
    for (const command of ['version', 'release', 'rollout', 'halt', 'revoke', 'unrevoke']) {
      expect(top.stdout).toContain(command);
      const help = await run([command, '--help']);
      expect(help.code, command).toBe(0);
      expect(help.stdout).toMatch(/--server URL/);
    }
    const noToken = await run(['halt', '--server', server, '--version-id', 'x'], { LAUNCHER_TOKEN: '' });
    expect(noToken.code).toBe(1);
    expect(JSON.parse(noToken.stderr)).toEqual({ error: expect.stringMatching(/LAUNCHER_TOKEN/) });
    const unknown = await run(['publish']);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stderr)).toEqual({ error: expect.stringMatching(/unknown command/) });
  });

  it('a finished command is not held by a timer or connection left behind: it exits within its 2 s grace, with its code', async () => {
    // A library's stray interval (loaded before the command) would keep the process alive for ever.
    const stray = { NODE_OPTIONS: '--import data:text/javascript,setInterval(()=>{},1000)' };
    for (const [args, code] of [
      [['--version'], 0],
      [['publish'], 1],
    ] as const) {
      const started = performance.now();
      const result = await run([...args], stray);
      expect(result.code, result.stderr).toBe(code);
      expect(performance.now() - started).toBeLessThan(15_000);
    }
  });

  it('publishes a version at 10 %, a rerun prints it again without a second upload, another file is a conflict', async () => {
    const { file, sha256 } = build('launcher-100.exe', 1_300_000);
    counted.patchBytes = 0;
    const first = await run(versionArgs(file, 100, ['--rollout', '10', '--changelog-en', 'First']));
    expect(first.code, first.stderr).toBe(0);
    const lines = first.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const version = JSON.parse(lines[0] ?? '') as Record<string, unknown>;
    expect(version).toMatchObject({ versionCode: 100, version: '1.0.100', sha256, rolloutPercent: 10 });
    expect(counted.patchBytes).toBe(1_300_000);
    // Not a terminal: plain progress lines.
    expect(first.stderr).toMatch(/upload launcher-100\.exe: 100% \(1300000 of 1300000 bytes\)/);
    expect(first.stdout + first.stderr).not.toContain(token);

    const again = await run(versionArgs(file, 100, ['--rollout', '10']));
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ id: version.id, sha256 });
    expect(counted.patchBytes).toBe(1_300_000);
    expect((await versionsOf()).filter((v) => v.versionCode === 100)).toHaveLength(1);

    const other = build('launcher-100-other.exe', 1000);
    const clash = await run(versionArgs(other.file, 100));
    expect(clash.code).toBe(1);
    expect(clash.stdout).toBe('');
    const error = JSON.parse(clash.stderr) as { error: string };
    expect(error.error).toMatch(
      /^conflict: cli-launcher versionCode 100 \(version 1\.0\.100, id [^)]+\) already exists with a different file/,
    );
    expect(error.error).toContain(sha256);
    expect(counted.patchBytes).toBe(1_300_000);
  });

  it('an interrupted upload is resumed by a rerun: only the rest is sent', async () => {
    const SIZE = 3_000_000;
    const { file, sha256 } = build('launcher-200.exe', SIZE);
    counted.patchBytes = 0;
    counted.delayMs = 150;
    const first = start(versionArgs(file, 200, ['--chunk-size', '300000']));
    // Killed once a third has gone out (at most one chunk more is in flight).
    await new Promise<void>((resolve) => {
      first.child.stderr?.on('data', () => {
        if (counted.patchBytes >= SIZE / 3) {
          first.child.kill('SIGKILL');
          resolve();
        }
      });
    });
    await first.done;
    counted.delayMs = 0;
    const state = JSON.parse(fs.readFileSync(path.join(dir, 'state.json'), 'utf8')) as Record<
      string,
      { uploadUrl: string }
    >;
    const entry = Object.entries(state).find(([key]) => key.endsWith(`${SIZE} ${sha256}`));
    expect(entry).toBeDefined();
    const head = await fetch(entry?.[1].uploadUrl ?? '', {
      method: 'HEAD',
      headers: { authorization: `Bearer ${token}`, 'tus-resumable': '1.0.0' },
    });
    const offset = Number(head.headers.get('upload-offset'));
    expect(offset).toBeGreaterThanOrEqual(SIZE / 3 - 300_000);
    expect(offset).toBeLessThan(SIZE);

    counted.patchBytes = 0;
    const rerun = await run(versionArgs(file, 200, ['--chunk-size', '300000']));
    expect(rerun.code, rerun.stderr).toBe(0);
    expect(counted.patchBytes).toBe(SIZE - offset);
    expect(JSON.parse(rerun.stdout)).toMatchObject({ versionCode: 200, sha256, fileSize: SIZE });
    // Done: the upload is forgotten.
    const after = JSON.parse(fs.readFileSync(path.join(dir, 'state.json'), 'utf8')) as Record<string, unknown>;
    expect(Object.keys(after).filter((key) => key.endsWith(sha256))).toEqual([]);
  });

  it('rollout, halt, revoke and unrevoke answer the version as the API does', async () => {
    const { file } = build('launcher-300.exe', 10_000);
    const published = await run(versionArgs(file, 300, ['--rollout', '10']));
    const id = (JSON.parse(published.stdout) as { id: string }).id;
    const op = async (args: string[]) => {
      const result = await run([...args, '--server', server, '--version-id', id]);
      expect(result.code, result.stderr).toBe(0);
      return JSON.parse(result.stdout) as { rolloutPercent: number; revokedAt: string | null };
    };
    expect((await op(['rollout', '--percent', '50'])).rolloutPercent).toBe(50);
    expect((await op(['halt'])).rolloutPercent).toBe(0);
    expect((await op(['revoke'])).revokedAt).not.toBeNull();
    expect((await op(['unrevoke'])).revokedAt).toBeNull();
    const bad = await run(['rollout', '--server', server, '--version-id', id, '--percent', '150']);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr)).toEqual({ error: '--percent: must be an integer from 0 to 100' });
    const missing = await run(['halt', '--server', server, '--version-id', 'no-such-version']);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr)).toEqual({ error: expect.stringMatching(/404/) });
  });

  it('publishes an addon release; a rerun prints it without a second upload', async () => {
    const addon = await admin(t, 'POST', '/api/addons', { slug: 'cli-addon', name: '插件', summary: '简介' });
    expect(addon.statusCode).toBe(201);
    const { file, sha256 } = build('addon-1.zip', 50_000);
    const args = ['release', '--server', server, '--addon', 'cli-addon', '--version', '1.0.0', '--file', file];
    counted.patchBytes = 0;
    const first = await run(args);
    expect(first.code, first.stderr).toBe(0);
    const release = JSON.parse(first.stdout) as { id: string };
    expect(release).toMatchObject({ version: '1.0.0', sha256 });
    const again = await run(args);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ id: release.id });
    expect(counted.patchBytes).toBe(50_000);
    await expectConflict(args, 'addon-1-other.zip', /^conflict: cli-addon release 1\.0\.0 \(id [^)]+\) already exists/);
    expect(counted.patchBytes).toBe(50_000);
  });

  it('a rerun finds a release scheduled for later (not yet public) and prints it: no second upload, no duplicate', async () => {
    const addon = await admin(t, 'POST', '/api/addons', { slug: 'cli-scheduled', name: '定时', summary: '简介' });
    expect(addon.statusCode).toBe(201);
    const addonId = addon.json<{ id: string }>().id;
    const { file, sha256 } = build('scheduled-2.zip', 20_000);
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(fs.readFileSync(file))]), 'scheduled-2.zip');
    const uploaded = await fetch(`${server}/api/upload`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: form,
    });
    expect(uploaded.status).toBe(201);
    const publishAt = new Date(Date.now() + 7 * 86_400_000).toISOString();
    const scheduled = await admin(t, 'POST', '/api/releases', {
      addonId,
      version: '2.0.0',
      downloadType: 'local',
      filePath: ((await uploaded.json()) as { filePath: string }).filePath,
      publishAt,
    });
    expect(scheduled.statusCode, scheduled.body).toBe(201);
    const release = scheduled.json<{ id: string }>();
    const releasesOf = async () =>
      (await admin(t, 'GET', '/api/admin/addons/cli-scheduled')).json<{ releases: { version: string }[] }>().releases;
    // Not public yet.
    const publicRead = await t.inject('/api/addons/cli-scheduled');
    expect(publicRead.json<{ releases: unknown[] }>().releases).toEqual([]);

    const args = ['release', '--server', server, '--addon', 'cli-scheduled', '--version', '2.0.0', '--file', file];
    counted.patchBytes = 0;
    const again = await run(args);
    expect(again.code, again.stderr).toBe(0);
    const printed = JSON.parse(again.stdout) as { publishAt: string };
    expect(printed).toMatchObject({ id: release.id, version: '2.0.0', sha256 });
    expect(Date.parse(printed.publishAt)).toBe(Date.parse(publishAt));
    expect(counted.patchBytes).toBe(0);
    expect(await releasesOf()).toHaveLength(1);
    await expectConflict(
      args,
      'scheduled-2-other.zip',
      /^conflict: cli-scheduled release 2\.0\.0 \(id [^)]+\) already exists/,
    );
    expect(counted.patchBytes).toBe(0);
    expect(await releasesOf()).toHaveLength(1);
  });
});
