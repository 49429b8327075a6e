import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { satisfies } from '../scripts/node-version.mjs';

/**
 * Issue 45: on a Node that package.json's `engines` exclude (Node 20: better-sqlite3 13 would build
 * for a minute and then crash with a segmentation fault), every entry stops before anything loads,
 * with one line naming the Node found and the versions needed, and `npm install` refuses.
 */

const ROOT = path.resolve(import.meta.dirname, '..');
const NEEDED = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } })
  .engines.node;

/** A Node the engines exclude: the machine's Node 20 (NODE20 names another), when there is one. */
const OLD_NODE = process.env.NODE20 ?? '/usr/bin/node';
const oldVersion = fs.existsSync(OLD_NODE)
  ? spawnSync(OLD_NODE, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim()
  : '';
const excluded = oldVersion !== '' && !satisfies(oldVersion, NEEDED);
if (!excluded) console.warn(`no Node that ${NEEDED} excludes at ${OLD_NODE}: skipping the old-Node runs`);

describe('package.json engines', () => {
  it('are read as semver ranges are', () => {
    const range = '^22.14.0 || >=24.0.0';
    const cases: [string, boolean][] = [
      ['20.20.2', false],
      ['22.13.9', false],
      ['22.14.0', true],
      ['22.20.1', true],
      ['23.11.0', false],
      ['24.0.0', true],
      ['v24.21.0', true],
      ['25.1.0', true],
    ];
    for (const [version, ok] of cases) expect(satisfies(version, range), version).toBe(ok);
    expect(satisfies('20.19.0', '>=20.19')).toBe(true);
    expect(satisfies('22.1.0', '~22.1.3 || 22.1.0')).toBe(true);
    expect(satisfies('22.1.5', '>22.1.0 <22.2.0')).toBe(true);
    expect(satisfies('22.2.0', '>22.1.0 <22.2.0')).toBe(false);
    expect(() => satisfies('22.1.0', '22.x')).toThrow(/comparator/);
  });
});

describe.runIf(excluded)(`on Node ${oldVersion}`, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-old-node-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const line = `patchwell needs Node.js ${NEEDED}; this is Node.js ${oldVersion} (${OLD_NODE})`;
  /** Runs `command` with the old Node first on PATH (npm and tsx run on it too). */
  const run = (command: string, args: string[], cwd = ROOT) =>
    spawnSync(command, args, {
      cwd,
      encoding: 'utf8',
      timeout: 60_000,
      env: {
        ...process.env,
        PATH: `${path.dirname(OLD_NODE)}:${process.env.PATH ?? ''}`,
        npm_config_nodedir: '',
        DATA_DIR: dir,
        PORT: '0',
        HOST: '127.0.0.1',
      },
    });

  it.each([
    ['the server (src/server.ts, as dev:api runs it)', ['--import', 'tsx', 'src/server.ts']],
    ['backup and restore (src/backup/cli.ts)', ['--import', 'tsx', 'src/backup/cli.ts', 'backup', '--to', 'x']],
    ["npm start's build check (scripts/ensure-build.mjs)", ['scripts/ensure-build.mjs']],
  ])('%s: one line, exit 1, no crash', (_name, args) => {
    const result = run(OLD_NODE, args);
    expect(result.signal).toBeNull();
    expect(result.status).toBe(1);
    expect(result.stderr).toBe(`${line}\n`);
  });

  it.each([
    ['npm start', ['start']],
    ['npm run dev', ['run', 'dev']],
    ['npm run db:copy', ['run', 'db:copy']],
  ])('%s: the same line before anything is built or loaded', (_name, args) => {
    const result = run('npm', args);
    expect(result.signal).toBeNull();
    expect(result.status).toBe(1);
    expect(result.stderr).toContain(`${line}\n`);
    expect(result.stderr).not.toMatch(/Segmentation|error TS|\bat \S+:\d+/);
  });

  it('npm install refuses it before installing anything (engine-strict), naming the Node and the versions', () => {
    const copy = path.join(dir, 'install');
    fs.mkdirSync(copy);
    for (const file of ['package.json', 'package-lock.json', '.npmrc']) {
      fs.copyFileSync(path.join(ROOT, file), path.join(copy, file));
    }
    const result = run('npm', ['ci', '--offline', '--no-audit', '--no-fund'], copy);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('EBADENGINE');
    expect(result.stderr).toContain(`Required: {"node":"${NEEDED}"}`);
    expect(result.stderr).toContain(`"node":"v${oldVersion}"`);
    expect(fs.readdirSync(copy).sort()).toEqual(['.npmrc', 'package-lock.json', 'package.json']);
  });
});
