import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { DatabaseHandle } from '../db/index.js';
import type { HeartbeatObserver } from '../modules/devices/service.js';
import type { DownloadKind } from '../modules/downloads/counting.js';
import type { SweepCounts } from '../modules/files/sweep.js';
import { RouteTally } from './route-tally.js';

/** What the collect-time gauges read: answered when Prometheus scrapes, never on a request. */
export interface MetricsSources {
  database: DatabaseHandle;
  /** Devices seen by any instance within the online window (one indexed count). */
  devicesOnline(): Promise<number>;
  /** The game client's stored chunks, their bytes, and its builds (three figures of two counts). */
  gameStore(): Promise<{ chunks: number; bytes: number; builds: number }>;
}

/** Kinds of served bytes: the download routes, the `/uploads/` files and the game client's chunks. */
export type ServedKind = 'software' | 'addon' | 'file' | 'game';

/**
 * The service's Prometheus instruments, in a registry of its own (one per app, so tests and
 * several apps in one process never share counts). Services report through the narrow callbacks
 * below; the HTTP side is the plugin in `./plugin.ts`.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly routes = new RouteTally([
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
  ]);
  private readonly servedBytes: Counter<'kind'>;

  readonly heartbeats: HeartbeatObserver;
  readonly downloadCounted: (kind: DownloadKind, count: number) => void;
  readonly uploaded: (bytes: number) => void;
  /** One sweep of stored uploads nothing names (files/sweep). */
  readonly storedUploadsSwept: (counts: SweepCounts) => void;
  readonly cacheLookup: (key: string, hit: boolean) => void;
  /** Game client chunks deleted by the sweep (game/chunks). */
  readonly gameChunksSwept: (count: number) => void;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.routes.register(
      this.registry,
      { name: 'http_requests_total', help: 'Answered HTTP requests by route pattern and status' },
      {
        name: 'http_request_duration_seconds',
        help: 'Time from receiving a request to the end of its answer, by route pattern',
      },
    );
    this.servedBytes = new Counter({
      name: 'served_bytes_total',
      help: 'File bytes sent to clients by kind (software downloads, addon downloads, /uploads/ files, game client chunks)',
      labelNames: ['kind'],
      registers,
    });

    // Counted in a plain number and handed to the counter when scraped: a heartbeat is the service's
    // most frequent request, and the counter's own `inc` cost more than recording the beat.
    let acceptedSinceScrape = 0;
    new Counter({
      name: 'heartbeats_accepted_total',
      help: 'Heartbeats acknowledged',
      registers,
      collect() {
        this.inc(acceptedSinceScrape);
        acceptedSinceScrape = 0;
      },
    });
    const flushSeconds = new Histogram({
      name: 'heartbeat_flush_seconds',
      help: 'Time to write one batch of buffered heartbeats',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    const flushRows = new Histogram({
      name: 'heartbeat_flush_devices',
      help: 'Devices written per heartbeat flush',
      buckets: [1, 10, 100, 1000, 10_000, 100_000],
      registers,
    });
    this.heartbeats = {
      accepted: () => {
        acceptedSinceScrape += 1;
      },
      flushed: (rows, seconds) => {
        flushRows.observe(rows);
        flushSeconds.observe(seconds);
      },
    };

    const downloads = new Counter({
      name: 'downloads_total',
      help: 'Counted downloads by kind (as in the daily roll-up: installer, launcher, addon)',
      labelNames: ['kind'],
      registers,
    });
    this.downloadCounted = (kind, count) => downloads.inc({ kind }, count);

    const uploadBytes = new Counter({ name: 'upload_bytes_total', help: 'Bytes of stored uploads', registers });
    this.uploaded = (bytes) => uploadBytes.inc(bytes);

    const examined = new Counter({
      name: 'stored_uploads_examined_total',
      help: 'Stored files listed by the sweep of files nothing names',
      registers,
    });
    const swept = new Counter({
      name: 'stored_uploads_swept_total',
      help: 'Stored files deleted by the sweep: older than UPLOAD_EXPIRY_HOURS and named by nothing',
      registers,
    });
    this.storedUploadsSwept = (counts) => {
      examined.inc(counts.examined);
      swept.inc(counts.swept);
    };

    /** Lookups per cache since the last scrape: plain numbers on the hot path, added to the counter when scraped. */
    const lookups = new Map<string, { hit: number; miss: number }>();
    new Counter({
      name: 'content_cache_lookups_total',
      help: 'Lookups in the read cache by cache (the key prefix) and result',
      labelNames: ['cache', 'result'],
      registers,
      collect() {
        for (const [name, n] of lookups) {
          if (n.hit > 0) this.inc({ cache: name, result: 'hit' }, n.hit);
          if (n.miss > 0) this.inc({ cache: name, result: 'miss' }, n.miss);
          n.hit = 0;
          n.miss = 0;
        }
      },
    });
    this.cacheLookup = (key, hit) => {
      const colon = key.indexOf(':');
      const name = colon === -1 ? key : key.slice(0, colon);
      let n = lookups.get(name);
      if (n === undefined) {
        n = { hit: 0, miss: 0 };
        lookups.set(name, n);
      }
      if (hit) n.hit += 1;
      else n.miss += 1;
    };

    const chunksSwept = new Counter({
      name: 'game_chunks_swept_total',
      help: 'Game client chunks deleted by the sweep: named by no build, untouched for UPLOAD_EXPIRY_HOURS',
      registers,
    });
    this.gameChunksSwept = (count) => chunksSwept.inc(count);
    new Gauge({
      name: 'game_store',
      help: 'The game client in the store: chunks stored, their bytes, builds',
      labelNames: ['figure'],
      registers,
      async collect() {
        const figures = await sources.gameStore();
        this.set({ figure: 'chunks' }, figures.chunks);
        this.set({ figure: 'chunk_bytes' }, figures.bytes);
        this.set({ figure: 'builds' }, figures.builds);
      },
    });

    new Gauge({
      name: 'devices_online',
      help: 'Devices whose last heartbeat (on any instance) is within the online window',
      registers,
      async collect() {
        this.set(await sources.devicesOnline());
      },
    });
    const database = sources.database;
    if (database.engine === 'postgres') {
      new Gauge({
        name: 'db_pool_connections',
        help: 'PostgreSQL pool connections by state (total, idle) and queued requests (waiting)',
        labelNames: ['state'],
        registers,
        collect() {
          const usage = database.usage();
          if (usage.engine !== 'postgres') return;
          this.set({ state: 'total' }, usage.total);
          this.set({ state: 'idle' }, usage.idle);
          this.set({ state: 'waiting' }, usage.waiting);
        },
      });
    } else {
      new Gauge({
        name: 'sqlite_file_bytes',
        help: 'Size of the SQLite database file and of its write-ahead log',
        labelNames: ['file'],
        registers,
        collect() {
          const usage = database.usage();
          if (usage.engine !== 'sqlite') return;
          this.set({ file: 'database' }, usage.fileBytes);
          this.set({ file: 'wal' }, usage.walBytes);
        },
      });
    }
  }

  /** One answered request; `route` is the route pattern (bounded), never the URL. */
  answered(method: string, route: string, status: number, seconds: number): void {
    this.routes.observe(method, route, status, seconds);
  }

  /** A counter for the bytes of one kind, bound once so that each chunk costs one addition. */
  bytesOf(kind: ServedKind): { inc(bytes: number): void } {
    return this.servedBytes.labels({ kind });
  }
}
