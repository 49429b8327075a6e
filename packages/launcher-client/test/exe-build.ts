/**
 * The single executables (`npm run build:exe -- --target linux-x64|win-x64`) as the tests use them:
 * built here when missing or older than what they are made of (the client's sources, its build, the
 * build script).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const PACKAGE = path.resolve(import.meta.dirname, '..');

export type ExeTarget = 'linux-x64' | 'win-x64';

/** Where `build:exe` writes the executable of `target`. */
export const exePath = (target: ExeTarget) =>
  path.join(PACKAGE, 'dist-exe', `launcher-client-${target}${target === 'win-x64' ? '.exe' : ''}`);

/** The newest modification time among `paths` (files, or folders walked). */
export function newest(paths: readonly string[]): number {
  let most = 0;
  for (const p of paths) {
    const stat = fs.statSync(p);
    if (!stat.isDirectory()) most = Math.max(most, stat.mtimeMs);
    else for (const name of fs.readdirSync(p)) most = Math.max(most, newest([path.join(p, name)]));
  }
  return most;
}

const mtime = (file: string) => (fs.existsSync(file) ? fs.statSync(file).mtimeMs : 0);

/** What the package's build is made of. */
const inputs = [path.join(PACKAGE, 'src'), path.join(PACKAGE, 'package.json')];

/**
 * `npm run build` in the package `dir` when its `dist/cli.js` is missing or older than `madeOf`
 * (never in CI, which builds first: a build empties `dist/`, which test files running beside this
 * one use).
 */
export function buildWhenOlder(dir: string, madeOf: readonly string[]): void {
  if (mtime(path.join(dir, 'dist', 'cli.js')) < newest(madeOf)) {
    execFileSync('npm', ['run', 'build'], { cwd: dir, stdio: 'ignore' });
  }
}

/** This package's `dist/`, built when a source is newer. */
export const distWhenStale = () => buildWhenOlder(PACKAGE, inputs);

/** Builds `dist/` when a source is newer, then the executable of `target` when anything it is made of is newer. */
export function buildWhenStale(target: ExeTarget): string {
  distWhenStale();
  const exe = exePath(target);
  if (mtime(exe) < newest([path.join(PACKAGE, 'dist'), path.join(PACKAGE, 'scripts', 'build-exe.mjs'), ...inputs])) {
    execFileSync(process.execPath, ['scripts/build-exe.mjs', '--target', target], { cwd: PACKAGE, stdio: 'ignore' });
  }
  return exe;
}
