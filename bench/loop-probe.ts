import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * Loaded with `--import` into a process under load (the service, the bare baseline): measures how
 * late its event loop runs. Over the IPC channel, `loop:reset` starts a window and `loop:read`
 * answers `{ p99Ms, maxMs }` of the window.
 */
const histogram = monitorEventLoopDelay({ resolution: 10 });
histogram.enable();

export interface LoopDelay {
  p99Ms: number;
  maxMs: number;
}

process.on('message', (message) => {
  if (message === 'loop:reset') histogram.reset();
  if (message === 'loop:read') {
    const delay: LoopDelay = { p99Ms: histogram.percentile(99) / 1e6, maxMs: histogram.max / 1e6 };
    process.send?.(delay);
  }
});
// The probe must not keep a process alive that would otherwise exit.
process.channel?.unref();
