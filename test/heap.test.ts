import { setTimeout as sleep } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import {
  HeapGrowth,
  heapGrowthPercent,
  LARGE_HEAP_BYTES,
  LARGE_HEAP_GROWTH_PERCENT,
  SMALL_HEAP_GROWTH_PERCENT,
} from '../src/modules/system/heap.js';

describe('heap growth', () => {
  it('lets a small live heap grow to three times its size and a large one to one and a half', () => {
    expect(heapGrowthPercent(50 * 1024 * 1024)).toBe(200);
    expect(heapGrowthPercent(LARGE_HEAP_BYTES)).toBe(SMALL_HEAP_GROWTH_PERCENT);
    expect(heapGrowthPercent(LARGE_HEAP_BYTES + 1)).toBe(LARGE_HEAP_GROWTH_PERCENT);
    expect(heapGrowthPercent(350 * 1024 * 1024)).toBe(50);
  });

  it('follows what survives each full collection of this process', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const collect = async () => {
      gc();
      await sleep(50); // the observer hears of the collection asynchronously
    };
    await collect();
    const live = v8.getHeapStatistics().used_heap_size;
    // Large: 64 MB of doubles more than what lives now.
    const growth = new HeapGrowth(live + 32 * 1024 * 1024);
    try {
      expect(growth.percent).toBe(SMALL_HEAP_GROWTH_PERCENT);
      let held: number[] | null = Array.from({ length: 8 * 1024 * 1024 }, (_, i) => i + 0.5);
      await collect();
      expect(growth.percent).toBe(LARGE_HEAP_GROWTH_PERCENT);
      expect(held.length).toBeGreaterThan(0);
      held = null;
      await collect();
      expect(held).toBeNull();
      expect(growth.percent).toBe(SMALL_HEAP_GROWTH_PERCENT);
    } finally {
      growth.stop();
      v8.setFlagsFromString('--heap-growing-percent=0');
    }
  });
});
