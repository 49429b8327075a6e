import { constants, PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';

/** Live heap (what survived a full collection) above which the heap's growth is bounded. */
export const LARGE_HEAP_BYTES = 128 * 1024 * 1024;
/** The growth allowed then between full collections, in per cent of the live heap. */
export const BOUNDED_GROWTH_PERCENT = 50;

/** V8's flag value for a live heap of `liveBytes`: 0 leaves the growth to V8's own heuristics. */
export function heapGrowthPercent(liveBytes: number, largeBytes = LARGE_HEAP_BYTES): number {
  return liveBytes > largeBytes ? BOUNDED_GROWTH_PERCENT : 0;
}

/**
 * Between full collections V8 lets the heap grow up to four times what survived the last one. For a
 * small heap that is what keeps the hot paths fast (collections stay rare), but a catalogue of
 * 100,000 addons keeps about 350 MB alive and the process would swell past 1.5 GB. So after every
 * full collection the growth is set from what survived: bounded to half of it while that is over
 * `largeBytes`, V8's own choice otherwise (bounding a small heap costs check-update a quarter of
 * its throughput in collections).
 */
export class HeapGrowth {
  private readonly observer: PerformanceObserver;
  /** The value last given to V8 (0: its own heuristics). */
  percent = 0;

  constructor(private readonly largeBytes = LARGE_HEAP_BYTES) {
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
