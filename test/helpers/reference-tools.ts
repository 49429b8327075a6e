import { spawnSync } from 'node:child_process';

/**
 * The tests against a reference tool nobody here wrote (Debian's minisign, python3-tuspy) run when it
 * is installed, are required with `variable=1` (as CI sets it) and skipped with `variable=0`.
 */
export function referenceToolWanted(variable: string, command: string, args: readonly string[], install: string) {
  const wanted = process.env[variable];
  if (wanted === '1' || wanted === '0') return wanted === '1';
  const present = spawnSync(command, args).status === 0;
  if (!present) console.warn(`${install.split(' ').at(-1)} not found: skipping the tests against it (${install})`);
  return present;
}
