/**
 * Heartbeats (`POST /api/launcher/heartbeat`): one at start, then one every interval with jitter;
 * after a 429, a 5xx or a network error the next waits longer (doubling, up to a ceiling, or the
 * server's `Retry-After`). A running heartbeat never throws into the host app; `stop()` ends it.
 */
import type { paths } from '../api.js';
import { HttpError, LauncherClientError, NetworkError } from '../errors.js';
import { httpError, readBody, retryable, send, sleep } from '../net/http.js';

export type HeartbeatBody = paths['/api/launcher/heartbeat']['post']['requestBody']['content']['application/json'];

export interface HeartbeatOptions {
  /** Between beats, in ms (default 60 000, as the specification asks). */
  intervalMs?: number;
  /** Each wait varies by up to this share either way (default 0.1). */
  jitter?: number;
  /** Longest wait after failures, in ms (default 10 minutes); a longer `Retry-After` is honoured. */
  maxBackoffMs?: number;
  /** Told of every failed beat (the heartbeat goes on). */
  onError?: (error: LauncherClientError) => void;
  /** Told of every beat the service acknowledged. */
  onBeat?: () => void;
}

/** One heartbeat; a failure is an `HttpError` or a `NetworkError`. */
export async function sendHeartbeat(url: string, body: HeartbeatBody, signal?: AbortSignal): Promise<void> {
  const res = await send(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
  if (res.status !== 200) throw await httpError(url, res);
  await readBody(url, res, signal);
}

export class Heartbeat {
  private readonly controller = new AbortController();
  private readonly loop: Promise<void>;

  constructor(
    private readonly url: string,
    private readonly body: () => Promise<HeartbeatBody>,
    private readonly options: HeartbeatOptions = {},
  ) {
    this.loop = this.run();
  }

  /** Stops the heartbeat (cancelling a beat in flight) and resolves once it has stopped. */
  async stop(): Promise<void> {
    this.controller.abort();
    await this.loop;
  }

  private wait(failures: number, retryAfter: number | null): number {
    const interval = this.options.intervalMs ?? 60_000;
    const jitter = this.options.jitter ?? 0.1;
    const base = Math.min(Math.max(interval, this.options.maxBackoffMs ?? 600_000), interval * 2 ** failures);
    return Math.max(retryAfter ?? 0, base * (1 + jitter * (2 * Math.random() - 1)));
  }

  private async run(): Promise<void> {
    const signal = this.controller.signal;
    let failures = 0;
    while (!signal.aborted) {
      let retryAfter: number | null = null;
      try {
        await sendHeartbeat(this.url, await this.body(), signal);
        failures = 0;
        this.safely(() => this.options.onBeat?.());
      } catch (err) {
        if (signal.aborted) return;
        const error = err instanceof LauncherClientError ? err : new NetworkError(String(err));
        if (retryable(error)) failures++;
        if (error instanceof HttpError) retryAfter = error.retryAfterMs;
        this.safely(() => this.options.onError?.(error));
      }
      // Rejects only when stopped, which ends the loop.
      await sleep(this.wait(failures, retryAfter), signal).catch(() => undefined);
    }
  }

  /** A host callback that throws must not end the heartbeat. */
  private safely(callback: () => void): void {
    try {
      callback();
    } catch {
      // the host's own failure: ignored, as the heartbeat must go on
    }
  }
}
