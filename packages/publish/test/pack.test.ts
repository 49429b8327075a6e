import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { buildWhenOlder, distWhenStale } from '../../launcher-client/test/exe-build.js';

const run = promisify(execFile);
const PACKAGE = path.resolve(import.meta.dirname, '..');
const CLIENT = path.resolve(PACKAGE, '../launcher-client');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lp-pack-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('npm pack', () => {
  it('gives a tarball that installs alone into an empty folder (patchwell-client bundled in) and runs', async () => {
    // The current build packed as is: `prepack` would empty dist/ under the test files running beside
    // this one. It bundles the client's build, so it is stale when either's sources are newer.
    distWhenStale();
    buildWhenOlder(PACKAGE, [path.join(PACKAGE, 'src'), path.join(PACKAGE, 'package.json'), path.join(CLIENT, 'dist')]);
    const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
      cwd: PACKAGE,
    });
    const [info] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
    const files = info.files.map((f) => f.path);
    expect(files).toEqual(
      expect.arrayContaining([
        'README.md',
        'package.json',
        'dist/cli.js',
        'dist/tus.js',
        'dist/tus.d.ts',
        'dist/minisign.js',
      ]),
    );
    expect(files.filter((f) => f.startsWith('src/') || f.startsWith('test/'))).toEqual([]);
    // The docs name the tarball npm pack makes.
    const docs = fs.readFileSync(path.join(PACKAGE, '../../docs/publishing.md'), 'utf8');
    const named = [...docs.matchAll(/\.\/([\w-]+)-\*\.tgz/g)].map((m) => m[1]);
    expect(named.length).toBeGreaterThan(0);
    for (const name of named) expect(info.filename).toMatch(new RegExp(`^${name}-\\d`));
    const manifest = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8'));
    // Only what the registry has: the client is in dist/cli.js, not a dependency to fetch.
    expect(Object.keys(manifest.dependencies)).not.toContain('patchwell-client');

    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    await run('npm', ['init', '-y'], { cwd: app });
    // Its dependencies come from npm's cache, or the registry when the cache lacks them.
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(dir, info.filename)], {
      cwd: app,
      timeout: 120_000,
    });
    expect(fs.existsSync(path.join(app, 'node_modules/patchwell-client'))).toBe(false);
    const help = await run(path.join(app, 'node_modules/.bin/launcher-publish'), ['--help'], { cwd: app });
    expect(help.stdout).toContain('Usage: launcher-publish');
    // keygen runs the bundled client's minisign code: the public key it writes reads back as one.
    const keys = path.join(app, 'keys');
    await run(path.join(app, 'node_modules/.bin/launcher-publish'), ['keygen', '--out', keys], {
      cwd: app,
      env: { ...process.env, LAUNCHER_SIGN_PASSWORD: '' },
    });
    // Its exports load in the installed folder too (the console imports ./tus, tests sign with ./minisign).
    const script = [
      "import { CHUNK_BYTES } from 'patchwell-publish/tus';",
      "import { generateKeyPair } from 'patchwell-publish/minisign';",
      'console.log(JSON.stringify({ chunk: CHUNK_BYTES, key: typeof generateKeyPair }));',
    ].join('\n');
    const imported = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: app });
    expect(JSON.parse(imported.stdout)).toEqual({ chunk: expect.any(Number), key: 'function' });
    // And from `require` in the CommonJS project `npm init -y` made (this Node loads ES modules from require).
    const required = await run(
      process.execPath,
      ['-e', script.replace(/import (\{ \w+ \}) from ('[^']+');/g, 'const $1 = require($2);')],
      { cwd: app },
    );
    expect(JSON.parse(required.stdout)).toEqual({ chunk: expect.any(Number), key: 'function' });
    expect(required.stderr).toBe('');
    const { parsePublicKey } = await import('patchwell-client/minisign');
    expect(parsePublicKey(fs.readFileSync(path.join(keys, 'publisher.pub'), 'utf8')).keyId).toMatch(/^[0-9A-F]{1,16}$/);
  }, 180_000);
});
