/**
 * Runs a `launcher-client` (the TypeScript source on this Node, the built single executable, or the
 * Windows one under Wine) with `--events` and checks its stream against docs/launcher-protocol.md:
 * every line one JSON object, `start` first, exactly one `result` or `error` and it last, progress
 * that never goes back within a phase and comes at most 10 times a second.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';

/** One event as the protocol defines it (fields a check does not know are kept). */
export type LauncherEvent = { readonly event: string } & Record<string, unknown>;

export interface EventRun {
  /** The process's exit status. */
  readonly code: number;
  readonly events: LauncherEvent[];
  /** The last event: `result` or `error`. */
  readonly last: LauncherEvent;
  /** The `progress` events. */
  readonly progress: LauncherEvent[];
  readonly stderr: string;
  /** From the start of the process to the first line read, in ms. */
  readonly firstLineMs: number;
  /** From the start of the process to its exit, in ms. */
  readonly elapsedMs: number;
}

export interface EventRunOptions {
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /**
   * `pipe` (default) reads stdout as it comes. `file` has stdout and stderr written to files (read
   * as they grow): Windows Node under Wine cannot write to a pipe.
   */
  readonly stdio?: 'pipe' | 'file';
  /** Killed after this long (default 120 s). */
  readonly timeoutMs?: number;
  /** Called with each event as it is read (e.g. to signal the process once a given event came). */
  readonly onEvent?: (event: LauncherEvent, child: import('node:child_process').ChildProcess) => void;
}

/**
 * Runs `command` (the program and its leading arguments: `[exe]`, `[node, '--import', 'tsx', cli]`,
 * `['wine', exe]`) with `args` and `--events`, and checks the stream (`checkEvents`).
 */
export async function runWithEvents(
  command: readonly string[],
  args: readonly string[],
  options: EventRunOptions = {},
): Promise<EventRun> {
  const [program, ...leading] = command;
  if (program === undefined) throw new Error('runWithEvents: no program');
  const started = performance.now();
  let firstLineMs = Number.NaN;
  let stdout = '';
  const read: LauncherEvent[] = [];
  let lines = 0;
  let fault: Error | null = null;
  /** Takes what arrived: each complete line is parsed at once (the first fault is thrown once the process ends). */
  const take = (text: string, child: import('node:child_process').ChildProcess) => {
    if (stdout === '' && text !== '') firstLineMs = performance.now() - started;
    stdout += text;
    const complete = stdout.split('\n').slice(lines, -1);
    lines += complete.length;
    for (const line of complete) {
      try {
        const event = parseLine(line);
        read.push(event);
        options.onEvent?.(event, child);
      } catch (err) {
        fault ??= err as Error;
      }
    }
  };
  const fileDir = options.stdio === 'file' ? fs.mkdtempSync(path.join(os.tmpdir(), 'lc-events-')) : null;
  try {
    const files = fileDir === null ? null : { out: path.join(fileDir, 'stdout'), err: path.join(fileDir, 'stderr') };
    const fds = files === null ? null : { out: fs.openSync(files.out, 'w'), err: fs.openSync(files.err, 'w') };
    const child = spawn(program, [...leading, ...args, '--events'], {
      env: options.env ?? process.env,
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      stdio: fds === null ? ['ignore', 'pipe', 'pipe'] : ['ignore', fds.out, fds.err],
    });
    if (fds !== null) {
      fs.closeSync(fds.out);
      fs.closeSync(fds.err);
    }
    let stderr = '';
    let poll: NodeJS.Timeout | null = null;
    if (files === null) {
      child.stdout!.on('data', (c: Buffer) => take(c.toString(), child));
      child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    } else {
      let at = 0;
      const grow = () => {
        const text = fs.readFileSync(files.out).subarray(at);
        at += text.length;
        take(text.toString(), child);
      };
      poll = setInterval(grow, 10);
      child.once('exit', () => {
        clearInterval(poll!);
        grow();
        stderr = fs.readFileSync(files.err, 'utf8');
      });
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    const code = await new Promise<number>((resolve) => {
      child.once('close', (status, signal) => resolve(status ?? (signal === null ? -1 : 128)));
    });
    clearTimeout(timer);
    const elapsedMs = performance.now() - started;
    if (fault !== null) throw fault;
    expect(stdout.endsWith('\n') || stdout === '', `stdout ends with a cut line: ${stdout.slice(-200)}`).toBe(true);
    const events = checkEvents(read, elapsedMs);
    return {
      code,
      events,
      last: events.at(-1)!,
      progress: events.filter((e) => e.event === 'progress'),
      stderr,
      firstLineMs,
      elapsedMs,
    };
  } finally {
    if (fileDir !== null) fs.rmSync(fileDir, { recursive: true, force: true });
  }
}

function parseLine(line: string): LauncherEvent {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    throw new Error(`not a JSON line: ${line.slice(0, 500)}`);
  }
  if (
    typeof value !== 'object' ||
    value === null ||
    Array.isArray(value) ||
    typeof (value as LauncherEvent).event !== 'string'
  )
    throw new Error(`not an event: ${line.slice(0, 500)}`);
  return value as LauncherEvent;
}

/**
 * The protocol's rules over a whole stream (`elapsedMs`: how long the run took): answers the events.
 * Progress comes at most 10 times a second, a phase's last report aside: over the run, no more
 * than 10 a second plus one per phase.
 */
export function checkEvents(events: readonly LauncherEvent[], elapsedMs: number): LauncherEvent[] {
  const names = events.map((e) => e.event);
  expect(events[0], `the first line is start: ${names.join(' ')}`).toMatchObject({
    event: 'start',
    command: expect.any(String),
    protocol: 1,
  });
  expect(names.filter((n) => n === 'start')).toHaveLength(1);
  const ends = names.filter((n) => n === 'result' || n === 'error');
  expect(ends, `exactly one result or error: ${names.join(' ')}`).toHaveLength(1);
  expect(['result', 'error'], `the last line is result or error: ${names.join(' ')}`).toContain(names.at(-1));
  const last = events.at(-1)!;
  if (last.event === 'error') expect(last).toMatchObject({ kind: expect.any(String), error: expect.any(String) });
  const phases = new Map<string, number>();
  for (const event of events) {
    if (event.event === 'log') expect(event).toMatchObject({ level: expect.any(String), message: expect.any(String) });
    if (event.event !== 'progress') continue;
    expect(event).toMatchObject({
      phase: expect.any(String),
      unit: expect.stringMatching(/^(bytes|files)$/),
      bytes: expect.any(Number),
      total: expect.any(Number),
      rate: expect.any(Number),
    });
    const key = `${String(event.phase)} ${String(event.addon ?? '')}`;
    const bytes = event.bytes as number;
    expect(bytes, `progress of ${key} went back`).toBeGreaterThanOrEqual(phases.get(key) ?? 0);
    phases.set(key, bytes);
  }
  const progress = names.filter((n) => n === 'progress').length;
  expect(progress, `${progress} progress events in ${Math.round(elapsedMs)} ms`).toBeLessThanOrEqual(
    Math.ceil(elapsedMs / 100) + phases.size,
  );
  return [...events];
}
