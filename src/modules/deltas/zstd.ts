import { type ChildProcess, execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';

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

/** How often a running zstd is paused or resumed by how busy the service is. */
const YIELD_CHECK_MS = 100;

/**
 * Above this share of the last check's interval, the service counts as busy and zstd is paused: the
 * event loop's utilization, or the CPU the process used (in cores: streaming downloads keep it busy
 * in the kernel and the thread pool while its event loop looks half idle). A loaded service answers
 * at full speed; deltas are made in its quieter moments.
 */
const BUSY = 0.5;

/**
 * Pauses `child` (SIGSTOP) while this process is busy and resumes it (SIGCONT) when it is not,
 * checked every YIELD_CHECK_MS. nice 19 alone left check-update at 0.74 of its rate while a 1 GB
 * delta was made on a loaded two-core host, and SCHED_IDLE at 0.85: zstd's 3 GB of memory competes
 * for the caches, not only the cores. The service's own load decides, not the host's: a host busy
 * with other work (a CI run) still gets its deltas. Answers how to stop watching.
 */
function yieldWhileBusy(child: ChildProcess): () => void {
  let last = { loop: performance.eventLoopUtilization(), cpu: process.cpuUsage(), at: performance.now() };
  let paused = false;
  const signal = (name: NodeJS.Signals) => {
    try {
      child.kill(name);
    } catch {
      // already gone
    }
  };
  const timer = setInterval(() => {
    const now = { loop: performance.eventLoopUtilization(), cpu: process.cpuUsage(), at: performance.now() };
    const loop = performance.eventLoopUtilization(now.loop, last.loop).utilization;
    const cores = (now.cpu.user - last.cpu.user + now.cpu.system - last.cpu.system) / 1000 / (now.at - last.at);
    last = now;
    const busy = loop >= BUSY || cores >= BUSY;
    if (busy !== paused) signal(busy ? 'SIGSTOP' : 'SIGCONT');
    paused = busy;
  }, YIELD_CHECK_MS);
  timer.unref();
  return () => {
    clearInterval(timer);
    // A stopped process would not act on the signal that ends it.
    if (paused) signal('SIGCONT');
  };
}

/**
 * Runs zstd with `args`, one compression thread, at nice 19 and paused while the service is busy
 * (`yieldWhileBusy`), so that the service's requests come first. `stdout`: where its output goes
 * (another process's input, `output`), else nowhere. Rejects with zstd's message when it fails or
 * `signal` aborts.
 */
function run(args: string[], signal: AbortSignal, stdout: 'ignore' | 'pipe' = 'ignore'): ZstdProcess {
  const child = spawn('zstd', ['-q', '-T1', ...args], { stdio: ['ignore', stdout, 'pipe'], signal });
  if (child.pid !== undefined) {
    try {
      os.setPriority(child.pid, 19);
    } catch {
      // Already gone, or not allowed: it runs at the service's priority.
    }
  }
  const stopWatching = yieldWhileBusy(child);
  signal.addEventListener('abort', stopWatching, { once: true });
  const done = new Promise<ZstdRun>((resolve, reject) => {
    let maxRssKb = 0;
    const sample = setInterval(() => {
      if (child.pid !== undefined) maxRssKb = Math.max(maxRssKb, highWaterKb(child.pid));
    }, 100);
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
    const finish = () => {
      clearInterval(sample);
      stopWatching();
    };
    child.on('error', (err) => {
      finish();
      reject(err);
    });
    child.on('close', (code) => {
      finish();
      if (code === 0) return resolve({ maxRssKb });
      reject(new Error(`zstd exited with ${code ?? 'a signal'}: ${stderr.trim() || 'no message'}`));
    });
  });
  return { child, done };
}

interface ZstdProcess {
  child: ChildProcess;
  done: Promise<ZstdRun>;
}

/** Writes to `out` a delta that rebuilds `target` from `source`: `zstd --long=31 --patch-from=SOURCE`. */
export function makeDelta(source: string, target: string, out: string, signal: AbortSignal): Promise<ZstdRun> {
  return run([LEVEL, '-f', LONG, `--patch-from=${source}`, target, '-o', out], signal).done;
}

/**
 * The SHA-256 of the file `delta` rebuilds from `source` (nothing is written): zstd's output goes
 * straight into coreutils' sha256sum (at nice 19 too), never through the service's event loop, which
 * hashing a gigabyte would hold for most of a second.
 */
export async function rebuiltDigest(source: string, delta: string, signal: AbortSignal): Promise<string> {
  const zstd = run(['-d', LONG, `--patch-from=${source}`, delta, '-c'], signal, 'pipe');
  const output = zstd.child.stdout;
  if (output === null) throw new Error('zstd: no output stream');
  // Given to sha256sum before this process could read any of it, then closed here.
  const sum = spawn('nice', ['-n', '19', 'sha256sum'], { stdio: [output, 'pipe', 'pipe'], signal });
  output.destroy();
  let digest = '';
  sum.stdout?.on('data', (chunk: Buffer) => (digest += chunk.toString()));
  const summed = new Promise<void>((resolve, reject) => {
    sum.on('error', reject);
    sum.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`sha256sum exited with ${code}`))));
  });
  await Promise.all([zstd.done, summed]);
  const hex = /^[0-9a-f]{64}/.exec(digest)?.[0];
  if (hex === undefined) throw new Error(`sha256sum: unexpected output ${JSON.stringify(digest.slice(0, 100))}`);
  return hex;
}
