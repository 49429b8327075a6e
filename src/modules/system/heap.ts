import { constants, PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';

/** Live heap (what survived a full collection) above which the heap's growth is bounded. */
export const LARGE_HEAP_BYTES = 128 * 1024 * 1024;
/** The growth allowed between full collections, in per cent of the live heap: small heaps, then large ones. */
export const SMALL_HEAP_GROWTH_PERCENT = 200;
export const LARGE_HEAP_GROWTH_PERCENT = 50;

/** V8's `--heap-growing-percent` for a live heap of `liveBytes`. */
export function heapGrowthPercent(liveBytes: number, largeBytes = LARGE_HEAP_BYTES): number {
  return liveBytes > largeBytes ? LARGE_HEAP_GROWTH_PERCENT : SMALL_HEAP_GROWTH_PERCENT;
}

/**
 * How far the heap may grow past what survived the last full collection before the next one: three
 * times while under `largeBytes` survive, one and a half times above (a catalogue of 100,000 addons
 * keeps about 350 MB alive; at three times the process would swell past 1 GB). Set after every full
 * collection. Measured: bounding a small heap to 1.5x cost check-update a quarter of its throughput,
 * and V8's own adaptive growth fell into phases of 25 full collections a second while streaming
 * files (each 256 KiB chunk is a fresh buffer), tripling the CPU of a download.
 */
export class HeapGrowth {
  private readonly observer: PerformanceObserver;
  /** The value last given to V8. */
  percent = 0;

  constructor(private readonly largeBytes = LARGE_HEAP_BYTES) {
    this.fit(0);
    this.observer = new PerformanceObserver((list) => {
      const major = list
        .getEntries()
        .some((e) => (e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR);
      if (major) this.fit(v8.getHeapStatistics().used_heap_size);
    });
    this.observer.observe({ entryTypes: ['gc'] });
  }

  /** Sets V8's growth for a heap of which `liveBytes` survived the last full collection. */
  fit(liveBytes: number): void {
    const percent = heapGrowthPercent(liveBytes, this.largeBytes);
    if (percent === this.percent) return;
    v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
    this.percent = percent;
  }

  stop(): void {
    this.observer.disconnect();
  }
}
