import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { referenceToolWanted } from './reference-tools.js';

/** The tests against Debian's `minisign`: run when it is installed, TEST_MINISIGN=1 requires them, 0 skips them. */
export const minisignWanted = (): boolean =>
  referenceToolWanted('TEST_MINISIGN', 'minisign', ['-v'], 'apt-get install minisign');

/**
 * Debian's `minisign` (0.11), the reference our minisign formats are checked against. `input` goes
 * to its stdin (it reads passwords there when stdin is not a terminal); a non-zero exit throws
 * with what it printed.
 */
export function minisign(args: readonly string[], options: { cwd: string; input?: string }): string {
  const result = spawnSync('minisign', args, { cwd: options.cwd, input: options.input ?? '', encoding: 'utf8' });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    throw new Error(`minisign ${args.join(' ')} exited ${result.status}:\n${result.stdout}${result.stderr}`);
  }
  return result.stdout;
}

/** A key pair made by `minisign -G` in `dir` (unencrypted with `-W` when no password is given). */
export function minisignKeyPair(dir: string, name: string, password?: string): { pub: string; key: string } {
  const pub = path.join(dir, `${name}.pub`);
  const key = path.join(dir, `${name}.key`);
  const args = ['-G', '-p', pub, '-s', key];
  if (password === undefined) minisign([...args, '-W'], { cwd: dir });
  else minisign(args, { cwd: dir, input: `${password}\n${password}\n` });
  return { pub, key };
}
