import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';

/** `--patch-from` appeared in zstd 1.4.5. */
const MIN_VERSION = [1, 4, 5] as const;

/**
 * The window of a delta: 2 GiB, the largest zstd has. Applying a delta takes `--long=31` (or
 * `--memory=2048MB`) as well: without it the decoder refuses windows above 128 MiB.
 */
export const LONG = '--long=31';

/**
 * The largest file a delta is made from or to: zstd's largest window. Making a delta holds both
 * files and zstd's tables, about 3 × the file (2.9 GiB for 1 GB), one job at a time per instance.
 * zstd's `--memory` does not lower that: with `--patch-from` it only raises the 128 MiB limit on the
 * old file, which zstd raises to the files' size itself. So the files' size (`DELTA_MAX_FILE_BYTES`,
 * at most this) is the bound.
 */
export const MAX_DELTA_FILE_BYTES = 2 * 1024 ** 3;

/**
 * Compression level 3 (zstd's default): on a 100 MB pair, levels 1, 3 and 9 gave the same delta
 * (1.10 MB) in 0.6, 1.2 and 2.2 s; 19 took 83 s for a larger one.
 */
const LEVEL = '-3';

/** The installed zstd's version when it is at least 1.4.5, else null (missing or too old). */
export function zstdVersion(program = 'zstd'): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(program, ['--version'], { timeout: 10_000 }, (err, stdout) => {
      const match = /v(\d+)\.(\d+)\.(\d+)/.exec(stdout);
      if (err || !match) return resolve(null);
      const [major = 0, minor = 0, patch = 0] = match.slice(1).map(Number);
      const ok = major * 1e6 + minor * 1e3 + patch >= MIN_VERSION[0] * 1e6 + MIN_VERSION[1] * 1e3 + MIN_VERSION[2];
      resolve(ok ? match.slice(1).join('.') : null);
    });
  });
}

/** What a zstd run left behind: its peak memory in kB (Linux: the child's VmHWM, sampled; else 0). */
export interface ZstdRun {
  maxRssKb: number;
}

/** The peak resident memory of process `pid` so far, in kB (0 where /proc does not tell). */
export function highWaterKb(pid: number): number {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) : 0;
  } catch {
    return 0;
  }
}

/**
 * Runs zstd with `args` at nice 19 (the service's requests come first), one compression thread.
 * Not SCHED_IDLE: on a host that is never idle (a busy service, a CI run) it would starve delta
 * making outright, where nice 19 still lets it finish.
 * `onStdout` takes its output when given. Rejects with zstd's message when it fails or `signal` aborts.
 */
function run(args: string[], signal: AbortSignal, onStdout?: (chunk: Buffer) => void): Promise<ZstdRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('zstd', ['-q', '-T1', ...args], {
      stdio: ['ignore', onStdout ? 'pipe' : 'ignore', 'pipe'],
      signal,
    });
    if (child.pid !== undefined) {
      try {
        os.setPriority(child.pid, 19);
      } catch {
        // Already gone, or not allowed: it runs at the service's priority.
      }
    }
    let maxRssKb = 0;
    const sample = setInterval(() => {
      if (child.pid !== undefined) maxRssKb = Math.max(maxRssKb, highWaterKb(child.pid));
    }, 100);
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
    if (onStdout) child.stdout?.on('data', onStdout);
    child.on('error', (err) => {
      clearInterval(sample);
      reject(err);
    });
    child.on('close', (code) => {
      clearInterval(sample);
      if (code === 0) return resolve({ maxRssKb });
      reject(new Error(`zstd exited with ${code ?? 'a signal'}: ${stderr.trim() || 'no message'}`));
    });
  });
}

/** Writes to `out` a delta that rebuilds `target` from `source`: `zstd --long=31 --patch-from=SOURCE`. */
export function makeDelta(source: string, target: string, out: string, signal: AbortSignal): Promise<ZstdRun> {
  return run([LEVEL, '-f', LONG, `--patch-from=${source}`, target, '-o', out], signal);
}

/** The size and SHA-256 of the file `delta` rebuilds from `source` (nothing is written). */
export async function rebuiltDigest(
  source: string,
  delta: string,
  signal: AbortSignal,
): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256');
  let size = 0;
  await run(['-d', LONG, `--patch-from=${source}`, delta, '-c'], signal, (chunk) => {
    size += chunk.length;
    hash.update(chunk);
  });
  return { size, sha256: hash.digest('hex') };
}
