/**
 * What a `launcher-client` run prints, in either of its two modes. Every command hands this its
 * progress, its log lines and its outcome; nothing else writes to stdout or stderr, so the plain
 * mode (the answer as the last JSON line on stdout, `{error, kind, …}` on stderr, a bar on a
 * terminal) and `--events` (JSON lines on stdout: docs/launcher-protocol.md) cannot drift apart.
 */
import { LauncherClientError, UsageError } from '../errors.js';
import type { RetryOptions } from '../net/http.js';

/** The version of the `--events` protocol (docs/launcher-protocol.md); raised only by a change a host could trip on. */
export const PROTOCOL = 1;

/** At most one progress event per this many ms on stdout (10 a second), but for a phase's last, which is never dropped. */
export const PROGRESS_EVERY_MS = 100;

/**
 * One step of a phase. `bytes` and `total` are counted in `unit` (`files` for the game's plan and
 * assemble); `total` 0 means the phase has no measure (an addon's extract and swap). `rate` is in
 * `unit` per second (computed from the phase's first report when the source has none).
 */
export interface ProgressReport {
  readonly phase: string;
  readonly unit: 'bytes' | 'files';
  readonly bytes: number;
  readonly total: number;
  readonly rate?: number;
  /** The file the phase downloads, when it is one named file (`update`'s package). */
  readonly file?: string;
  /** The addon the phase is about (addon commands): a phase is one per addon. */
  readonly addon?: string;
  /** The folder being renamed (an addon's swap). */
  readonly folder?: string;
}

/** A failure as the command reports it: `{error, kind, …the error's own fields}`, and its exit status. */
export function failureReport(err: unknown): { readonly report: Record<string, unknown>; readonly code: number } {
  if (err instanceof LauncherClientError) {
    return { report: { error: err.message, kind: err.kind, ...err.details }, code: err.verification ? 2 : 1 };
  }
  // A TypeError is what Node's own checks of an argument throw (an invalid URL, …): the caller's input.
  const kind = err instanceof UsageError || err instanceof TypeError ? 'usage' : 'internal';
  return { report: { error: err instanceof Error ? err.message : String(err), kind }, code: 1 };
}

/** How a command's run ends. */
export type Outcome =
  /** The command's answer (an object), with its exit status (0 unless the answer reports a failure). */
  | { readonly answer: object; readonly code?: number }
  /** A text (help, version) printed as it is, or in events as `{"event": "result", [field]: text}`. */
  | { readonly text: string; readonly field: 'help' | 'version'; readonly code: number }
  | { readonly error: unknown };

/** Where the two modes differ: how each kind of line is written. */
interface Sink {
  /** Whether progress is shown at all (plain: only on a terminal). */
  readonly wantsProgress: boolean;
  /** Whether each retried failure is logged. */
  readonly logsRetries: boolean;
  start(command: string): void;
  progress(p: Required<Pick<ProgressReport, 'rate'>> & ProgressReport, key: string): void;
  log(level: 'warning' | 'error', message: string, extra: Record<string, unknown>): void;
  answer(answer: object): void;
  text(field: 'help' | 'version', text: string): void;
  failure(report: Record<string, unknown>): void;
}

/** The run's output: one per process. */
export class Output {
  private started = false;
  private command: string;
  /** Per phase (and addon): when its first report came, the most it has counted. */
  private readonly phases = new Map<string, { since: number; most: number }>();

  private constructor(
    private readonly sink: Sink,
    fallbackCommand: string,
  ) {
    this.command = fallbackCommand;
  }

  /**
   * `--events`: the protocol's JSON lines on `stdout` (the process's); else the plain mode.
   * `command`: the words known so far.
   */
  static of(events: boolean, command: string, stdout: { write(text: string): unknown } = process.stdout): Output {
    return new Output(events ? eventsSink(stdout) : plainSink(), command);
  }

  /** Whether a command should report progress at all (plain mode off a terminal: no). */
  get wantsProgress(): boolean {
    return this.sink.wantsProgress;
  }

  /**
   * The managers' retry options: with `--events`, each failure about to be retried is a warning (its
   * kind and fields beside it); the plain mode's stderr stays as it was (its last line the failure).
   */
  get retry(): Pick<RetryOptions, 'onRetry'> {
    if (!this.sink.logsRetries) return {};
    return {
      onRetry: (failure, delayMs, failures) => {
        const { error, ...fields } = failureReport(failure).report;
        this.log(
          'warning',
          `${String(error)}; retrying in ${(delayMs / 1000).toFixed(1)} s (failure ${failures})`,
          fields,
        );
      },
    };
  }

  /** Names the command (`game update`) as soon as it is known: the first line of an events run. */
  start(command: string): void {
    this.command = command;
    this.ensureStarted();
  }

  progress(p: ProgressReport): void {
    this.ensureStarted();
    const key = `${p.phase}\u0000${p.addon ?? ''}`;
    const now = performance.now();
    let phase = this.phases.get(key);
    if (phase === undefined) this.phases.set(key, (phase = { since: now, most: 0 }));
    // A download that had to start again from 0 holds at its most until it passes it: never backwards.
    phase.most = Math.max(phase.most, p.bytes);
    const rate = p.rate ?? phase.most / Math.max(0.001, (now - phase.since) / 1000);
    this.sink.progress({ ...p, bytes: phase.most, rate: Math.round(rate * 10) / 10 }, key);
  }

  /** A line beside the answer: a warning (`{"warning"}` on stderr in plain mode), or an error that did not end the run. */
  log(level: 'warning' | 'error', message: string, extra: Record<string, unknown> = {}): void {
    this.ensureStarted();
    this.sink.log(level, message, extra);
  }

  /** The managers' `onWarning`: each a warning line beside the answer (`log`). */
  readonly warn = (message: string, fields: Record<string, unknown>): void => this.log('warning', message, fields);

  /** Writes how the run ended; answers the exit status. */
  finish(outcome: Outcome): number {
    this.ensureStarted();
    if ('answer' in outcome) {
      this.sink.answer(outcome.answer);
      return outcome.code ?? 0;
    }
    if ('text' in outcome) {
      this.sink.text(outcome.field, outcome.text);
      return outcome.code;
    }
    const { report, code } = failureReport(outcome.error);
    this.sink.failure(report);
    return code;
  }

  private ensureStarted(): void {
    if (this.started) return;
    this.started = true;
    this.sink.start(this.command);
  }
}

/** The plain mode: the answer on stdout, failures and warnings as JSON on stderr, a bar on a terminal. */
function plainSink(): Sink {
  let bar: { key: string; draw: (p: ProgressReport & { rate: number }) => void } | null = null;
  const json = (stream: NodeJS.WriteStream, value: object) => stream.write(`${JSON.stringify(value)}\n`);
  return {
    wantsProgress: process.stderr.isTTY === true,
    logsRetries: false,
    start() {},
    progress(p, key) {
      // Bars for what is counted in bytes (downloads); one per phase and addon, the addon named above its bar.
      if (p.unit !== 'bytes' || p.total === 0) return;
      if (bar?.key !== key) {
        if (p.addon !== undefined) process.stderr.write(`${p.addon}\n`);
        bar = { key, draw: progressBar() };
      }
      bar.draw(p);
    },
    log(level, message, extra) {
      json(process.stderr, { [level]: message, ...extra });
    },
    answer(answer) {
      json(process.stdout, answer);
    },
    text(_field, text) {
      process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
    },
    failure(report) {
      json(process.stderr, report);
    },
  };
}

/** A one-line bar on stderr, redrawn in place, ended with a newline when full. */
function progressBar(): (p: { bytes: number; total: number; rate: number }) => void {
  let finished = false;
  return (p) => {
    if (finished) return;
    const share = p.total > 0 ? Math.min(1, p.bytes / p.total) : 0;
    const width = 30;
    const filled = Math.round(share * width);
    const mib = (n: number) => (n / 1048576).toFixed(1);
    process.stderr.write(
      `\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(share * 100).toFixed(0).padStart(3)}% ` +
        `${mib(p.bytes)}/${mib(p.total)} MiB ${mib(p.rate)} MiB/s`,
    );
    if (p.bytes >= p.total) {
      finished = true;
      process.stderr.write('\n');
    }
  };
}

/** `--events`: every line one JSON object on stdout, written as it happens (docs/launcher-protocol.md). */
function eventsSink(stdout: { write(text: string): unknown }): Sink {
  const write = (event: string, fields: object) => {
    stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
  };
  const gate = new ProgressGate<ProgressReport>((p) => write('progress', p), PROGRESS_EVERY_MS);
  return {
    wantsProgress: true,
    logsRetries: true,
    start(command) {
      write('start', { command, protocol: PROTOCOL });
    },
    progress(p, key) {
      gate.offer(key, p);
    },
    log(level, message, extra) {
      gate.flush();
      write('log', { level, message, ...extra });
    },
    answer(answer) {
      gate.flush();
      write('result', answer);
    },
    text(field, text) {
      gate.flush();
      write('result', { [field]: text });
    },
    failure(report) {
      gate.flush();
      write('error', report);
    },
  };
}

/**
 * Lets through at most one report per `everyMs`: a report that comes sooner is held (a newer one of
 * the same phase replaces it) and sent when its turn comes, so a phase's last report is never lost;
 * `flush` sends whatever is held at once (before a log line and the last line).
 */
export class ProgressGate<T> {
  private lastAt = -Infinity;
  /** Held reports, one per phase, oldest first. */
  private readonly held = new Map<string, T>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly send: (report: T) => void,
    private readonly everyMs: number,
  ) {}

  offer(key: string, report: T): void {
    this.held.delete(key);
    this.held.set(key, report);
    if (this.timer === null) this.next();
  }

  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    for (const report of this.held.values()) this.send(report);
    this.held.clear();
  }

  /** Sends the oldest held report if its turn has come, else waits for it. */
  private next(): void {
    this.timer = null;
    const [first] = this.held;
    if (first === undefined) return;
    const wait = this.lastAt + this.everyMs - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => this.next(), wait);
      this.timer.unref();
      return;
    }
    this.held.delete(first[0]);
    this.lastAt = performance.now();
    this.send(first[1]);
    if (this.held.size > 0) this.next();
  }
}
