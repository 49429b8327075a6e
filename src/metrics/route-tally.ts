import type { Metric, Registry } from 'prom-client';

/** One method and route pattern: answers by status and a latency histogram, in plain numbers. */
interface Series {
  readonly method: string;
  readonly route: string;
  readonly statuses: Map<number, number>;
  /** Observations per bucket (not cumulative); the last one is `+Inf`. */
  readonly buckets: number[];
  sum: number;
  count: number;
}

type Sample = { labels: Record<string, string | number>; value: number; metricName?: string };

/**
 * Answered requests by route pattern, status and latency. The hot path adds to plain numbers held per
 * route (two map lookups, no label hashing or validation); the Prometheus series (a counter and a
 * histogram) are made from them only when `/metrics` is scraped.
 */
export class RouteTally {
  private readonly series = new Map<string, Map<string, Series>>();

  constructor(private readonly bounds: readonly number[]) {}

  /** One answer of `route` (a route pattern, bounded) with its status and time. */
  observe(method: string, route: string, status: number, seconds: number): void {
    let byMethod = this.series.get(route);
    if (byMethod === undefined) {
      byMethod = new Map();
      this.series.set(route, byMethod);
    }
    let series = byMethod.get(method);
    if (series === undefined) {
      series = { method, route, statuses: new Map(), buckets: this.bounds.map(() => 0).concat(0), sum: 0, count: 0 };
      byMethod.set(method, series);
    }
    series.statuses.set(status, (series.statuses.get(status) ?? 0) + 1);
    let bucket = 0;
    while (bucket < this.bounds.length && seconds > (this.bounds[bucket] as number)) bucket += 1;
    series.buckets[bucket] = (series.buckets[bucket] ?? 0) + 1;
    series.sum += seconds;
    series.count += 1;
  }

  /** Registers `requests` (counter by method, route, status) and `duration` (histogram by method, route). */
  register(registry: Registry, requests: { name: string; help: string }, duration: { name: string; help: string }) {
    const all = () => [...this.series.values()].flatMap((byMethod) => [...byMethod.values()]);
    const metric = (name: string, help: string, type: 'counter' | 'histogram', values: () => Sample[]) =>
      // prom-client formats any registered object that has a name, help, type and `get()`.
      ({
        name,
        help,
        type,
        aggregator: 'sum',
        get: () => Promise.resolve({ name, help, type, aggregator: 'sum', values: values() }),
      }) as unknown as Metric;
    registry.registerMetric(
      metric(requests.name, requests.help, 'counter', () =>
        all().flatMap((s) =>
          [...s.statuses].map(([status, value]) => ({ labels: { method: s.method, route: s.route, status }, value })),
        ),
      ),
    );
    registry.registerMetric(
      metric(duration.name, duration.help, 'histogram', () =>
        all().flatMap((s) => {
          const labels = { method: s.method, route: s.route };
          let cumulative = 0;
          const buckets = s.buckets.map((n, i) => {
            cumulative += n;
            return {
              labels: { ...labels, le: i < this.bounds.length ? (this.bounds[i] as number) : '+Inf' },
              value: cumulative,
              metricName: `${duration.name}_bucket`,
            };
          });
          return [
            ...buckets,
            { labels, value: s.sum, metricName: `${duration.name}_sum` },
            { labels, value: s.count, metricName: `${duration.name}_count` },
          ];
        }),
      ),
    );
  }
}
