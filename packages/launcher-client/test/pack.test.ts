import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { distWhenStale } from './exe-build.js';
import { nodeFromRegistry } from './helpers.js';

const run = promisify(execFile);
const PACKAGE = path.resolve(import.meta.dirname, '..');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-pack-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A project made by `npm init -y` (CommonJS) or an ES module one, with only the packed tarball installed. */
async function project(name: string, type: 'commonjs' | 'module', tarball: string): Promise<string> {
  const app = path.join(dir, name);
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name, private: true, type }));
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], { cwd: app });
  return app;
}

const USE = [
  "const m = new UpdateManager({ serverUrl: 'http://127.0.0.1:1', trustedKeys: [], stateDir: process.argv.at(-1) });",
  'const cut = new Chunker(GAME_CHUNK_SIZES).cut(new Uint8Array(100), 0, 100);',
  'm.deviceId().then((id) => console.log(JSON.stringify({ id, kind: new SignatureError("x").kind, pub: typeof parsePublicKeys, cut })));',
].join('\n');
const REQUIRE = [
  "const { UpdateManager, SignatureError } = require('patchwell-client');",
  "const { parsePublicKeys } = require('patchwell-client/minisign');",
  "const { Chunker, GAME_CHUNK_SIZES } = require('patchwell-client/fastcdc');",
  USE,
].join('\n');
const IMPORT = [
  "import { UpdateManager, SignatureError } from 'patchwell-client';",
  "import { parsePublicKeys } from 'patchwell-client/minisign';",
  "import { Chunker, GAME_CHUNK_SIZES } from 'patchwell-client/fastcdc';",
  USE,
].join('\n');
const WORKS = { id: expect.stringMatching(/^[0-9a-f-]{36}$/), kind: 'signature', pub: 'function', cut: 100 };

describe('npm pack', () => {
  let tarball: string;
  let commonjs: string;
  let esm: string;

  beforeAll(async () => {
    // The current build packed as is: `prepack` would empty dist/ under the test files running beside this one.
    distWhenStale();
    const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
      cwd: PACKAGE,
    });
    const [info] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
    const files = info.files.map((f) => f.path);
    expect(files).toEqual(
      expect.arrayContaining(['package.json', 'README.md', 'dist/index.js', 'dist/index.d.ts', 'dist/cli.js']),
    );
    expect(files.filter((f) => f.startsWith('src/') || f.startsWith('test/'))).toEqual([]);
    tarball = path.join(dir, info.filename);
    commonjs = await project('cjs-app', 'commonjs', tarball);
    esm = await project('esm-app', 'module', tarball);
  }, 120_000);

  it("installs alone, with three runtime dependencies (the addon archive reader, the snapshot writer, the chunk downloads' HTTP client); its bin answers --help", async () => {
    const installed = JSON.parse(fs.readFileSync(path.join(esm, 'node_modules/patchwell-client/package.json'), 'utf8'));
    expect(Object.keys(installed.dependencies ?? {})).toEqual(['undici', 'yauzl', 'yazl']);
    const help = await run(path.join(esm, 'node_modules/.bin/launcher-client'), ['--help'], { cwd: esm });
    expect(help.stdout).toContain('launcher-client update --server URL');
  });

  it.each([
    ['require', 'commonjs'],
    ['import', 'module'],
  ] as const)('%s works from a %s project on this Node, with no warning', async (how, type) => {
    const cwd = how === 'require' ? commonjs : esm;
    const script = how === 'require' ? REQUIRE : IMPORT;
    const out = await run(process.execPath, [`--input-type=${type}`, '-e', script, path.join(dir, `state-${how}`)], {
      cwd,
    });
    expect(JSON.parse(out.stdout)).toMatchObject(WORKS);
    expect(out.stderr).toBe('');
  });

  // Node 24 (the LTS); 22.14.0 is the Node inside Electron 35, the oldest Electron the README names:
  // its main process loads packages with that Node's loader (no Electron binary can be fetched here).
  it.each([
    ['24', /^v24\./],
    ['22.14.0', /^v22\.14\.0$/],
  ])(
    'on Node %s: require, import and the bin, with no warning',
    async (version, printed) => {
      const [npx, args] = nodeFromRegistry(version);
      const node = (cwd: string, more: string[]) => run(npx, [...args, ...more], { cwd, timeout: 120_000 });
      expect((await node(esm, ['--version'])).stdout.trim()).toMatch(printed);
      const state = path.join(dir, `state-${version}`);
      const required = await node(commonjs, ['--input-type=commonjs', '-e', REQUIRE, state]);
      expect(JSON.parse(required.stdout)).toMatchObject(WORKS);
      expect(required.stderr).toBe('');
      const imported = await node(esm, ['--input-type=module', '-e', IMPORT, state]);
      expect(JSON.parse(imported.stdout)).toMatchObject(WORKS);
      expect(imported.stderr).toBe('');
      const help = await node(esm, [path.join(esm, 'node_modules/patchwell-client/dist/cli.js'), '--help']);
      expect(help.stdout).toContain('launcher-client update --server URL');
    },
    180_000,
  );
});
