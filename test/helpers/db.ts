import { randomBytes } from 'node:crypto';
import SQLite from 'better-sqlite3';
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { DatabaseConfig } from '../../src/config.js';
import { migrationProvider } from '../../src/db/migrations.js';

/** Which engine this test run uses: set per Vitest project (`sqlite`, `postgres`). */
export const ENGINE = (process.env.TEST_ENGINE ?? 'sqlite') as 'sqlite' | 'postgres';

/** The server that test databases are created on; each test app gets a database of its own. */
export const PG_ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  config: DatabaseConfig;
  drop(): Promise<void>;
}

async function withAdmin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: PG_ADMIN_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** A fresh, empty database: a SQLite file in `dir`, or a new PostgreSQL database dropped afterwards. */
export async function createTestDatabase(dir: string): Promise<TestDatabase> {
  if (ENGINE === 'sqlite') return { config: { kind: 'sqlite', file: `${dir}/app.db` }, drop: () => Promise.resolve() };
  const name = `lds_test_${randomBytes(6).toString('hex')}`;
  await withAdmin((c) => c.query(`create database ${name}`));
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    config: { kind: 'postgres', url: url.toString() },
    drop: async () => {
      await withAdmin((c) => c.query(`drop database if exists ${name} with (force)`));
    },
  };
}

/**
 * `database` migrated up to `migration` and no further, as an older service left it: a connection
 * without the service's name mapping (snake_case, as the migrations write), to be destroyed by the caller.
 */
export async function databaseAt(database: TestDatabase, migration: string): Promise<Kysely<unknown>> {
  const config = database.config;
  const raw = new Kysely<unknown>({
    dialect:
      config.kind === 'sqlite'
        ? new SqliteDialect({ database: new SQLite(config.file) })
        : new PostgresDialect({ pool: new pg.Pool({ connectionString: config.url, max: 1 }) }),
  });
  const migrated = await new Migrator({ db: raw, provider: migrationProvider }).migrateTo(migration);
  if (migrated.error !== undefined) {
    await raw.destroy();
    throw new Error(`migrating to ${migration} failed: ${String(migrated.error)}`);
  }
  return raw;
}
