import { spawnSync } from 'node:child_process';
import path from 'node:path';

/**
 * The tests against Debian's `minisign` run when it is installed (or required with TEST_MINISIGN=1,
 * as CI does); TEST_MINISIGN=0 skips them.
 */
export function minisignWanted(): boolean {
  const wanted = process.env.TEST_MINISIGN;
  if (wanted === '1' || wanted === '0') return wanted === '1';
  const present = spawnSync('minisign', ['-v']).status === 0;
  if (!present) console.warn('minisign not found: skipping the tests against it (apt-get install minisign)');
  return present;
}

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
