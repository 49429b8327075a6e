import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import SQLite from 'better-sqlite3';
import { CamelCasePlugin, type Dialect, Kysely, Migrator, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { DatabaseConfig } from '../config.js';
import { migrationProvider } from './migrations.js';
import { sqliteReaderDialect } from './sqlite-reader.js';
import type { Database } from './schema.js';

export type Db = Kysely<Database>;
export type Engine = DatabaseConfig['kind'];

export interface DatabaseHandle {
  readonly db: Db;
  /**
   * For reads that scan many rows (device figures, retention candidates): on SQLite a read-only
   * connection on a worker thread, so that they never hold the event loop; on PostgreSQL `db` itself
   * (the server does the work). Never for writes.
   */
  readonly reads: Db;
  readonly engine: Engine;
  /** What the connection side looks like now (metrics): pool counts, or SQLite's file sizes. */
  usage(): DatabaseUsage;
  close(): Promise<void>;
}

export type DatabaseUsage =
  | { readonly engine: 'postgres'; readonly total: number; readonly idle: number; readonly waiting: number }
  | { readonly engine: 'sqlite'; readonly fileBytes: number; readonly walBytes: number };

function sqliteUsage(file: string): DatabaseUsage {
  const size = (f: string) => fs.statSync(f, { throwIfNoEntry: false })?.size ?? 0;
  return { engine: 'sqlite', fileBytes: size(file), walBytes: size(`${file}-wal`) };
}

const INT8_OID = 20;

/** How often the checkpoint thread moves the write-ahead log into the database file. */
export const SQLITE_CHECKPOINT_MS = 1000;

/**
 * SQLite's page cache for the service's connection, KiB (its default is 2 MiB). The heartbeat flush
 * updates devices spread over the whole table: at a million devices (300 MB) a larger cache keeps
 * more of their index pages at hand and took a third off each row's upsert (issue 29's measurements).
 * Pages are cached as they are read: a small database uses no more than before.
 */
const SQLITE_CACHE_KIB = 64 * 1024;

/** Prepared statements kept per connection: the service runs a few dozen distinct queries. */
const STATEMENT_CACHE_SIZE = 500;

/*
 * WAL checkpoints copy the log into the database file and fsync it. SQLite runs them inside the
 * commit that crosses `wal_autocheckpoint` pages, which with better-sqlite3 is the event loop: a
 * counted download every ~500 commits stalled every stream in the process for as long as the disk
 * took to sync. The service's connection therefore never checkpoints; this thread does, with a
 * connection of its own (PASSIVE: it never waits for, nor blocks, readers and writers).
 */
const CHECKPOINT_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const SQLite = require(workerData.driver);
const db = new SQLite(workerData.file);
db.pragma('busy_timeout = 5000');
const timer = setInterval(() => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch {
    // busy or failed: the next tick tries again
  }
}, workerData.everyMs);
parentPort.once('message', () => {
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

interface EngineHandle {
  dialect: Dialect;
  /** The dialect of `DatabaseHandle.reads` when it is not the service's connection. */
  readerDialect?: Dialect;
  /** Stops what runs beside the connections (SQLite's checkpoint thread). */
  stop(): Promise<void>;
}

function sqliteDialect(file: string, checkpointMs: number): EngineHandle {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const sqlite = new SQLite(file);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('wal_autocheckpoint = 0');
  sqlite.pragma(`cache_size = -${SQLITE_CACHE_KIB}`);
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(CHECKPOINT_WORKER, { eval: true, workerData: { file, everyMs: checkpointMs, driver } });
  worker.unref();
  worker.on('error', (err) => process.emitWarning(`SQLite checkpoint thread failed: ${err.message}`));
  let running = true;
  const exited = new Promise((resolve) => worker.once('exit', resolve)).then(() => (running = false));
  // Kysely prepares every query it runs; preparing costs more than running the small ones we send.
  const statements = new Map<string, SQLite.Statement>();
  const database = {
    close: () => sqlite.close(),
    prepare(sql: string) {
      let statement = statements.get(sql);
      if (statement === undefined) {
        if (statements.size >= STATEMENT_CACHE_SIZE) statements.clear();
        statement = sqlite.prepare(sql);
        statements.set(sql, statement);
      }
      return statement;
    },
  };
  return {
    dialect: new SqliteDialect({ database }),
    readerDialect: sqliteReaderDialect(file, driver),
    async stop() {
      if (running) {
        // Held until it has closed its connection: an unref'd thread would let the process end first.
        worker.ref();
        worker.postMessage('stop');
      }
      await exited;
    },
  };
}

function postgresDialect(
  url: string,
  closing: () => boolean,
): { dialect: PostgresDialect; usage: () => DatabaseUsage } {
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    // Byte sizes are bigint; every value we store fits in a double, so read them as numbers.
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
        oid === INT8_OID
          ? (v: string) => Number(v)
          : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
    },
  });
  // An idle connection the server drops (restart, failover, admin command) must not crash the
  // process: the pool replaces it on the next query.
  // (pool.end() resolves before the sockets it closes are gone: errors after it are not news.)
  pool.on('error', (err) => {
    if (!closing()) process.emitWarning(`PostgreSQL idle connection lost: ${err.message}`);
  });
  return {
    dialect: new PostgresDialect({ pool }),
    usage: () => ({ engine: 'postgres', total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
  };
}

/**
 * Opens the configured engine and applies every pending migration. `sqliteCheckpointMs`: how often
 * SQLite's write-ahead log is checkpointed, off the event loop.
 */
export async function openDatabase(
  config: DatabaseConfig,
  sqliteCheckpointMs = SQLITE_CHECKPOINT_MS,
): Promise<DatabaseHandle> {
  let closing = false;
  const engine: EngineHandle & { usage: () => DatabaseUsage } =
    config.kind === 'sqlite'
      ? { ...sqliteDialect(config.file, sqliteCheckpointMs), usage: () => sqliteUsage(config.file) }
      : { ...postgresDialect(config.url, () => closing), stop: () => Promise.resolve() };
  const raw = new Kysely<unknown>({ dialect: engine.dialect });
  const reader = engine.readerDialect ? new Kysely<unknown>({ dialect: engine.readerDialect }) : null;
  const destroy = async () => {
    await reader?.destroy();
    await engine.stop();
    await raw.destroy();
  };
  const { error, results } = await new Migrator({ db: raw, provider: migrationProvider }).migrateToLatest();
  if (error !== undefined) {
    await destroy();
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`database migration ${failed?.migrationName ?? ''} failed: ${String(error)}`);
  }
  const db = raw.withPlugin(new CamelCasePlugin()) as unknown as Db;
  return {
    db,
    reads: reader ? (reader.withPlugin(new CamelCasePlugin()) as unknown as Db) : db,
    engine: config.kind,
    usage: engine.usage,
    close: () => {
      closing = true;
      return destroy();
    },
  };
}
