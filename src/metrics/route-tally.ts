import { Counter, Histogram, type HistogramConfiguration, type Registry } from 'prom-client';

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
    new Counter({
      ...requests,
      labelNames: ['method', 'route', 'status'],
      registers: [registry],
      // The tally holds the totals: the counter takes them afresh at each scrape.
      collect() {
        this.reset();
        for (const s of all()) {
          for (const [status, value] of s.statuses) this.inc({ method: s.method, route: s.route, status }, value);
        }
      },
    });
    new TalliedHistogram({ ...duration, labelNames: ['method', 'route'], registers: [registry] }, () =>
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
    );
  }
}

type HistogramAnswer = Awaited<ReturnType<Histogram['get']>>;

/**
 * A prom-client histogram whose series are tallied elsewhere and read when scraped (prom-client's own
 * take one observation at a time, each hashing and validating its labels). The registry formats a
 * histogram from `getForPromString()`; `get()` (its JSON) answers the same.
 */
class TalliedHistogram extends Histogram<'method' | 'route'> {
  /** prom-client's answer for this name and help, without series: the frame the tallied ones go in. */
  private readonly frame: Histogram;

  constructor(
    config: HistogramConfiguration<'method' | 'route'>,
    private readonly series: () => HistogramAnswer['values'],
  ) {
    super(config);
    this.frame = new Histogram({ name: config.name, help: config.help, registers: [] });
  }

  async getForPromString(): Promise<HistogramAnswer> {
    return { ...(await this.frame.get()), values: this.series() };
  }

  override get(): Promise<HistogramAnswer> {
    return this.getForPromString();
  }
}
