import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { admin, buildTestApp, createPackage, type TestApp } from '../../../test/helpers/app.js';
import { minisign, minisignKeyPair } from '../../../test/helpers/minisign.js';
import { apiToken, listen } from '../../../test/helpers/tus.js';
import { errorOf, ROOT, type Run, startCli } from './cli-process.js';
import { forward } from './forward.js';
import { versionTrustedComment } from 'patchwell-client/minisign';

/**
 * launcher-publish as CI expects it (issue 38), against the real service behind a proxy that counts
 * the upload bytes and can answer like a busy proxy (429/502/503 with Retry-After) first.
 */

let t: TestApp;
let token: string;
let server: string;
let proxy: http.Server;
let dir: string;
/**
 * PATCH bytes forwarded; statuses to answer (one each) before forwarding the requests they match;
 * the first two POSTs to a path ending in `together` are held until both have come, then forwarded at once.
 */
const proxied = { patchBytes: 0, failures: [] as number[], failing: '', together: '', stallPatch: false };
/** Sockets of PATCHes answered early and never read further (`stallPatch`), destroyed after the test. */
const stalled: net.Socket[] = [];
const held: (() => void)[] = [];

beforeAll(async () => {
  t = await buildTestApp();
  const base = new URL(await listen(t));
  token = await apiToken(t);
  await createPackage(t, { slug: 'ci-launcher', name: '启动器' });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-publish-ci-'));
  proxy = http.createServer((req, res) => {
    if (req.url?.startsWith(proxied.failing) && proxied.failures.length > 0) {
      const status = proxied.failures.shift() ?? 503;
      req.resume();
      res.writeHead(status, { 'retry-after': '0', 'content-type': 'text/html' }).end('<html>busy</html>');
      return;
    }
    if (proxied.stallPatch && req.method === 'PATCH') {
      // Answered at once (another run moved the offset), the rest of the body never read: the
      // client's socket stays busy until someone closes it.
      proxied.stallPatch = false;
      req.pause();
      req.socket.pause();
      req.socket.write('HTTP/1.1 409 Conflict\r\ncontent-length: 0\r\n\r\n');
      stalled.push(req.socket);
      return;
    }
    const send = () => forward(base, req, res, (bytes) => (proxied.patchBytes += bytes));
    if (proxied.together !== '' && req.method === 'POST' && req.url?.endsWith(proxied.together)) {
      held.push(send);
      if (held.length === 2) {
        proxied.together = '';
        for (const release of held.splice(0)) release();
      }
      return;
    }
    send();
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  server = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => proxy.close(resolve));
  await t.close();
  fs.rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => {
  Object.assign(proxied, { patchBytes: 0, failures: [], failing: '', together: '', stallPatch: false });
  for (const socket of stalled.splice(0)) socket.destroy();
});

const run = (args: string[], env: Record<string, string> = {}, state = 'state.json'): Promise<Run> =>
  startCli(args, { LAUNCHER_TOKEN: token, LAUNCHER_PUBLISH_STATE: path.join(dir, state), ...env }).done;

function build(name: string, size = 50_000): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, randomBytes(size));
  return file;
}

const versionArgs = (file: string, code: number, extra: string[] = []) => [
  'version',
  ...['--server', server, '--package', 'ci-launcher', '--version', `2.0.${code}`],
  ...['--version-code', String(code), '--file', file, ...extra],
];

async function versions(): Promise<{ versionCode: number; version: string }[]> {
  const res = await admin(t, 'GET', '/api/admin/software/ci-launcher');
  return res.json<{ versions: { versionCode: number; version: string }[] }>().versions;
}

describe('launcher-publish in CI', () => {
  it('-h on the command and every subcommand; --version; the help states the ranges accepted', async () => {
    const top = await run(['-h']);
    expect(top.code).toBe(0);
    for (const command of ['keygen', 'version', 'release', 'game', 'rollout', 'halt', 'revoke', 'unrevoke']) {
      const help = await run([command, '-h']);
      expect(help.code, command).toBe(0);
      expect(help.stdout).toContain('-h, --help');
    }
    const version = await run(['--version']);
    expect(version.code).toBe(0);
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'packages/publish/package.json'), 'utf8')) as {
      version: string;
    };
    expect(version.stdout.trim()).toBe(pkg.version);
    const help = (await run(['version', '-h'])).stdout;
    expect(help).toMatch(/--rollout P\s+staged rollout percentage \(0-100/);
    // What the help says is what is accepted: 0 and 100 are, 101 is not.
    const file = build('range.bin');
    const out = await run(versionArgs(file, 10, ['--rollout', '101']));
    expect(errorOf(out)).toMatch(/--rollout: must be an integer from 0 to 100/);
  });

  it('retries 429, 502, 503 (Retry-After) with each retry on stderr, then publishes', async () => {
    proxied.failing = '/api/admin/';
    proxied.failures = [429, 502, 503];
    const result = await run(versionArgs(build('retry.bin'), 100));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr.match(/retry \d\/5/g)).toHaveLength(3);
    expect(JSON.parse(result.stdout)).toMatchObject({ versionCode: 100 });
  });

  it('gives up after its bounded retries with {error}', async () => {
    proxied.failing = '/api/admin/';
    proxied.failures = [503, 503, 503, 503, 503, 503, 503];
    const result = await run(versionArgs(build('gives-up.bin'), 101));
    expect(result.code).toBe(1);
    expect(result.stderr.match(/retry \d\/5/g)).toHaveLength(5);
    expect(errorOf(result)).toMatch(/503/);
  });

  it('refuses a versionCode at or below the latest unless --allow-older, before uploading', async () => {
    const low = await run(versionArgs(build('older.bin'), 50));
    expect(low.code).toBe(1);
    expect(errorOf(low)).toMatch(/not above the latest \(100\).*--allow-older/);
    expect(proxied.patchBytes).toBe(0);
    const allowed = await run(versionArgs(build('older.bin'), 50, ['--allow-older']));
    expect(allowed.code, allowed.stderr).toBe(0);
    expect((await versions()).map((v) => v.versionCode)).toContain(50);
  });

  it('refuses a rerun whose --version differs from the stored one', async () => {
    const file = build('rerun.bin');
    expect((await run(versionArgs(file, 110))).code).toBe(0);
    const args = versionArgs(file, 110);
    args[args.indexOf('--version') + 1] = '9.9.9';
    const rerun = await run(args);
    expect(rerun.code).toBe(1);
    expect(errorOf(rerun)).toMatch(/stored with version 2\.0\.110, not 9\.9\.9/);
  });

  it("checks the token's role and --publish-at before uploading anything", async () => {
    const editor = await admin(t, 'POST', '/api/admin/tokens', { name: 'editor-ci', role: 'editor' });
    const editorToken = editor.json<{ token: string }>().token;
    const refused = await run(versionArgs(build('editor.bin'), 120), { LAUNCHER_TOKEN: editorToken });
    expect(refused.code).toBe(1);
    expect(errorOf(refused)).toMatch(/role is editor/);
    const badTime = await run(versionArgs(build('time.bin'), 120, ['--publish-at', 'tomorrow']));
    expect(badTime.code).toBe(1);
    expect(errorOf(badTime)).toMatch(/--publish-at/);
    expect(proxied.patchBytes).toBe(0);
  });

  it('two concurrent runs of the same build make one version, their creations racing', async () => {
    const file = build('twice.bin', 400_000);
    proxied.together = '/versions';
    const [a, b] = await Promise.all([
      run(versionArgs(file, 400), {}, 'state-a.json'),
      run(versionArgs(file, 400), {}, 'state-b.json'),
    ]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    expect(JSON.parse(a.stdout).id).toBe(JSON.parse(b.stdout).id);
    expect((await versions()).filter((v) => v.versionCode === 400)).toHaveLength(1);
  });

  it('two concurrent runs of the same addon release make one release, their creations racing', async () => {
    expect(
      (await admin(t, 'POST', '/api/addons', { slug: 'ci-addon', name: '插件', summary: '简介' })).statusCode,
    ).toBe(201);
    const file = build('twice.zip', 300_000);
    const args = ['release', '--server', server, '--addon', 'ci-addon', '--version', '1.0.0', '--file', file];
    proxied.together = '/api/releases';
    const [a, b] = await Promise.all([run(args, {}, 'state-ra.json'), run(args, {}, 'state-rb.json')]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    expect(JSON.parse(a.stdout).id).toBe(JSON.parse(b.stdout).id);
    const releases = (await admin(t, 'GET', '/api/admin/addons/ci-addon')).json<{ releases: unknown[] }>().releases;
    expect(releases).toHaveLength(1);
  });

  it('tus requests follow the same policy: 429/502/503/504 on POST and PATCH retried after Retry-After, then gives up after 5', async () => {
    proxied.failing = '/api/admin/uploads';
    proxied.failures = [429, 503, 502, 504, 429];
    const started = Date.now();
    const result = await run(versionArgs(build('tus-retry.bin'), 420));
    expect(result.code, result.stderr).toBe(0);
    const retries = result.stderr.match(/retry \d\/5 in 0 s: POST \/api\/admin\/uploads: \d+/g);
    expect(retries).toHaveLength(5);
    // Retry-After: 0 honoured (the policy's own delays would wait 31 s, tus-js-client's 9 s).
    expect(Date.now() - started).toBeLessThan(8000);

    proxied.failing = '/api/admin/uploads';
    proxied.failures = [503, 503, 503, 503, 503, 503];
    const gaveUp = await run(versionArgs(build('tus-gives-up.bin'), 421));
    expect(gaveUp.code).toBe(1);
    expect(gaveUp.stderr.match(/retry \d\/5/g)).toHaveLength(5);
    expect(errorOf(gaveUp)).toMatch(/503/);
  });

  it('exits when its work is done, even with a PATCH the server answered early and stopped reading', async () => {
    proxied.stallPatch = true;
    const started = Date.now();
    const result = await run(versionArgs(build('stalled.bin', 24 << 20), 430, ['--chunk-size', String(8 << 20)]));
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/retry 1\/5 in 1 s: PATCH .*: 409/);
    expect(JSON.parse(result.stdout)).toMatchObject({ versionCode: 430 });
    // Without closing its connections it would wait for the proxy to drop the stalled one (never).
    expect(Date.now() - started).toBeLessThan(20_000);
  });

  it('two concurrent runs with one versionCode and different files: one version, the other run a conflict', async () => {
    proxied.together = '/versions';
    const [a, b] = await Promise.all([
      run(versionArgs(build('code-a.bin'), 440), {}, 'state-ca.json'),
      run(versionArgs(build('code-b.bin'), 440), {}, 'state-cb.json'),
    ]);
    expect([a.code, b.code].sort()).toEqual([0, 1]);
    const failed = a.code === 1 ? a : b;
    expect(errorOf(failed)).toMatch(/^conflict: ci-launcher versionCode 440 .*already exists with a different file/);
    expect((await versions()).filter((v) => v.versionCode === 440)).toHaveLength(1);
  });

  it("--signature FILE.minisig: Debian's minisign -S on an offline machine; checked before anything is sent", async () => {
    const offline = minisignKeyPair(dir, 'offline');
    const other = minisignKeyPair(dir, 'other');
    const file = build('signed.bin');
    const sha256 = createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    const sign = (comment: string, name: string) => {
      const signature = path.join(dir, name);
      minisign(['-S', '-s', offline.key, '-m', file, '-x', signature, '-t', comment], { cwd: dir });
      return signature;
    };
    const good = sign(versionTrustedComment({ slug: 'ci-launcher', versionCode: 600, sha256 }), 'good.minisig');
    const wrongCode = sign(versionTrustedComment({ slug: 'ci-launcher', versionCode: 599, sha256 }), 'old.minisig');

    const mismatch = await run(versionArgs(file, 600, ['--signature', wrongCode]));
    expect(mismatch.code).toBe(1);
    expect(errorOf(mismatch)).toMatch(/--signature: its trusted comment is "package=ci-launcher versionCode=599/);
    const untrusted = await run(versionArgs(file, 600, ['--signature', good, '--publisher-key', other.pub]));
    expect(untrusted.code).toBe(1);
    expect(errorOf(untrusted)).toMatch(/--signature: signed by key .* not a trusted key/);
    expect(proxied.patchBytes).toBe(0);

    const signed = await run(versionArgs(file, 600, ['--signature', good, '--publisher-key', offline.pub]));
    expect(signed.code, signed.stderr).toBe(0);
    expect(JSON.parse(signed.stdout)).toMatchObject({ versionCode: 600, sha256 });
    const row = await t.app.ctx.db
      .selectFrom('softwareVersions')
      .select('fileSignature')
      .where('versionCode', '=', 600)
      .executeTakeFirstOrThrow();
    expect(row.fileSignature).toBe(fs.readFileSync(good, 'utf8'));
  });

  it('--create-package with --name and --description (-zh/-en) creates a missing package; without it: 404', async () => {
    const args = (extra: string[]) => {
      const list = versionArgs(build('new.bin'), 1, extra);
      list[list.indexOf('--package') + 1] = 'ci-new';
      return list;
    };
    const missing = await run(args([]));
    expect(missing.code).toBe(1);
    expect(errorOf(missing)).toMatch(/404/);
    const noName = await run(args(['--create-package']));
    expect(errorOf(noName)).toMatch(/--name/);
    const created = await run(
      args(['--create-package', '--name', '新启动器', '--name-en', 'New launcher', '--description-en', 'Fresh']),
    );
    expect(created.code, created.stderr).toBe(0);
    const pkg = await admin(t, 'GET', '/api/admin/software/ci-new');
    expect(pkg.json()).toMatchObject({ nameZh: '新启动器', nameEn: 'New launcher', descriptionEn: 'Fresh' });
    expect(pkg.json<{ versions: unknown[] }>().versions).toHaveLength(1);
  });

  it('two concurrent first runs with --create-package: the package one of them made is used by both', async () => {
    const file = build('race.bin');
    const args = versionArgs(file, 1, ['--create-package', '--name', '竞速']);
    args[args.indexOf('--package') + 1] = 'ci-race';
    proxied.together = '/api/software';
    const [a, b] = await Promise.all([run(args, {}, 'state-pa.json'), run(args, {}, 'state-pb.json')]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    expect(JSON.parse(a.stdout).id).toBe(JSON.parse(b.stdout).id);
    const list = (await admin(t, 'GET', '/api/software')).json<{ slug: string }[] | { items: { slug: string }[] }>();
    const slugs = (Array.isArray(list) ? list : list.items).map((p) => p.slug);
    expect(slugs.filter((slug) => slug === 'ci-race')).toHaveLength(1);
  });
});
