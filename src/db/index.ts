import fs from 'node:fs';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import { CamelCasePlugin, Kysely, Migrator, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { DatabaseConfig } from '../config.js';
import { migrationProvider } from './migrations.js';
import type { Database } from './schema.js';

export type Db = Kysely<Database>;
export type Engine = DatabaseConfig['kind'];

export interface DatabaseHandle {
  readonly db: Db;
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

function sqliteDialect(file: string): SqliteDialect {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const sqlite = new SQLite(file);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma('busy_timeout = 5000');
  return new SqliteDialect({ database: sqlite });
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

/** Opens the configured engine and applies every pending migration. */
export async function openDatabase(config: DatabaseConfig): Promise<DatabaseHandle> {
  let closing = false;
  const { dialect, usage } =
    config.kind === 'sqlite'
      ? { dialect: sqliteDialect(config.file), usage: () => sqliteUsage(config.file) }
      : postgresDialect(config.url, () => closing);
  const raw = new Kysely<unknown>({ dialect });
  const { error, results } = await new Migrator({ db: raw, provider: migrationProvider }).migrateToLatest();
  if (error !== undefined) {
    await raw.destroy();
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`database migration ${failed?.migrationName ?? ''} failed: ${String(error)}`);
  }
  const db = raw.withPlugin(new CamelCasePlugin()) as unknown as Db;
  return {
    db,
    engine: config.kind,
    usage,
    close: () => {
      closing = true;
      return raw.destroy();
    },
  };
}
