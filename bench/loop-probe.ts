import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * Loaded with `--import` into a process under load (the service, the bare baseline): measures how
 * late its event loop runs and the CPU time it spends. Over the IPC channel, `loop:reset` starts a
 * window and `loop:read` answers `{ p99Ms, maxMs, cpuMs }` of the window.
 */
const histogram = monitorEventLoopDelay({ resolution: 10 });
histogram.enable();
let cpuStart = process.cpuUsage();

export interface LoopDelay {
  p99Ms: number;
  maxMs: number;
  /** CPU time (user + system, all threads) the process used in the window. */
  cpuMs: number;
}

process.on('message', (message) => {
  if (message === 'loop:reset') {
    histogram.reset();
    cpuStart = process.cpuUsage();
  }
  if (message === 'loop:read') {
    const cpu = process.cpuUsage(cpuStart);
    const delay: LoopDelay = {
      p99Ms: histogram.percentile(99) / 1e6,
      maxMs: histogram.max / 1e6,
      cpuMs: (cpu.user + cpu.system) / 1000,
    };
    process.send?.(delay);
  }
});
// The probe must not keep a process alive that would otherwise exit.
process.channel?.unref();
