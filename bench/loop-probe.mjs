/**
 * Loaded with `--import` into a process under load (the service, the bare baseline): measures how
 * late its event loop runs and the CPU time it spends. Over the IPC channel, `loop:reset` starts a
 * window and `loop:read` answers a `LoopDelay` (bench/lib.ts) of the window.
 *
 * Plain JavaScript: the processes measured run without a TypeScript loader, as they run in use.
 */
/* global process */
import { monitorEventLoopDelay } from 'node:perf_hooks';

const histogram = monitorEventLoopDelay({ resolution: 10 });
histogram.enable();
let cpuStart = process.cpuUsage();

process.on('message', (message) => {
  if (message === 'loop:reset') {
    histogram.reset();
    cpuStart = process.cpuUsage();
  }
  if (message === 'loop:read') {
    const cpu = process.cpuUsage(cpuStart);
    process.send?.({
      p99Ms: histogram.percentile(99) / 1e6,
      maxMs: histogram.max / 1e6,
      cpuMs: (cpu.user + cpu.system) / 1000,
    });
  }
});
// The probe must not keep a process alive that would otherwise exit.
process.channel?.unref();
