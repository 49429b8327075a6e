import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const PACKAGE = path.resolve(import.meta.dirname, '..');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-pack-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

// The package is the same on both engines: packed and installed once, in the SQLite project.
describe.runIf(process.env.TEST_ENGINE === 'sqlite')('npm pack', () => {
  it('gives a package that installs and works on its own: its bin answers --help, its module imports', async () => {
    const packed = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: PACKAGE });
    const [info] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
    const files = info.files.map((f) => f.path);
    expect(files).toEqual(
      expect.arrayContaining(['package.json', 'README.md', 'dist/index.js', 'dist/index.d.ts', 'dist/cli.js']),
    );
    expect(files.filter((f) => f.startsWith('src/') || f.startsWith('test/'))).toEqual([]);

    const app = path.join(dir, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    await run('npm', ['install', '--no-audit', '--no-fund', '--offline', path.join(dir, info.filename)], { cwd: app });
    const installed = JSON.parse(fs.readFileSync(path.join(app, 'node_modules/patchwell-client/package.json'), 'utf8'));
    // The one runtime dependency: the addon archive reader.
    expect(Object.keys(installed.dependencies ?? {})).toEqual(['yauzl']);

    const help = await run(path.join(app, 'node_modules/.bin/launcher-client'), ['--help'], { cwd: app });
    expect(help.stdout).toContain('launcher-client update --server URL');

    const script = [
      "import { UpdateManager, SignatureError } from 'patchwell-client';",
      "const m = new UpdateManager({ serverUrl: 'http://127.0.0.1:1', trustedKeys: [], stateDir: process.argv[1] });",
      'console.log(JSON.stringify({ id: await m.deviceId(), kind: new SignatureError("x").kind }));',
    ].join('\n');
    const imported = await run(process.execPath, ['--input-type=module', '-e', script, path.join(dir, 'state')], {
      cwd: app,
    });
    expect(JSON.parse(imported.stdout)).toMatchObject({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      kind: 'signature',
    });
  });
});
