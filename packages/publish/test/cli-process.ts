import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';

/** The repository's root. */
export const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');

/** How long a run may take before the test kills it (the tests' own timeout is 60 s). */
const RUN_DEADLINE_MS = 45_000;

/** What a run of the command printed, and how it exited. */
export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * `launcher-publish args` from the sources, as one process (tsx as a loader, not its launcher) so that
 * a kill stops the upload itself; `env` over this process's environment.
 */
export function startCli(
  args: string[],
  env: Record<string, string | undefined>,
): { child: ChildProcess; done: Promise<Run> } {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  // A run that hangs is killed before the test's own timeout, so that the failure shows what it printed.
  const deadline = setTimeout(() => {
    stderr += `\n[the test killed the command after ${RUN_DEADLINE_MS / 1000} s]\n`;
    child.kill('SIGKILL');
  }, RUN_DEADLINE_MS);
  const done = new Promise<Run>((resolve) =>
    child.on('close', (code) => {
      clearTimeout(deadline);
      resolve({ code, stdout, stderr });
    }),
  );
  return { child, done };
}

/** The `{error}` line a failed run ends its stderr with (after any progress lines). */
export function errorOf(result: Run): string {
  const last = result.stderr.trim().split('\n').at(-1) ?? '';
  return (JSON.parse(last) as { error: string }).error;
}
