/**
 * Copies every table of one database of this service into another, e.g. an embedded SQLite
 * installation into PostgreSQL:
 *
 *   npm run db:copy -- --from ./data/app.db --to postgres://user:pass@host:5432/launcher
 *
 * Both sides are opened (and migrated) exactly as the service opens them; the target must be empty
 * unless --force is given. Rows are copied in batches inside one target transaction, so a failure
 * leaves the target as it was; the row count of every table is verified before the commit.
 * Stop the service (or keep it read-only) while copying.
 */
// First: on a Node that package.json's engines exclude, one line and exit 1 before anything loads.
import './node-version.mjs';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, type DatabaseConfig } from '../src/config.js';
import { type DatabaseHandle, openDatabase } from '../src/db/index.js';
import {
  batchSize,
  countRows,
  emptyTables,
  insertRows,
  occupiedTables,
  type RawDb,
  readBatches,
  tablesInOrder,
  tablesOf,
} from '../src/db/tables.js';

export interface CopyOptions {
  /** Replace the rows of a target that already holds data. */
  force?: boolean;
  /** Rows per read and per multi-row insert (capped by the engines' parameter limits). */
  batchSize?: number;
  /** Progress lines; silent when absent. */
  log?: (line: string) => void;
}

export interface TableReport {
  table: string;
  rows: number;
}

export class CopyError extends Error {
  override name = 'CopyError';
}

/** A `--from`/`--to` value: `postgres://…`, `sqlite:<file>`, or a plain path to a SQLite file. */
export function parseDatabaseArg(value: string): DatabaseConfig {
  if (/^postgres(ql)?:\/\//.test(value)) return { kind: 'postgres', url: value };
  const file = value.replace(/^sqlite:(\/\/)?/, '');
  if (file === '') throw new ConfigError(`not a database: "${value}" (postgres://… or sqlite:<file> or a file path)`);
  return { kind: 'sqlite', file: path.resolve(file) };
}

/** A database for messages: the password of a URL is masked. */
export function describeDatabase(config: DatabaseConfig): string {
  if (config.kind === 'sqlite') return `SQLite ${config.file}`;
  const url = new URL(config.url);
  if (url.password !== '') url.password = '***';
  return `PostgreSQL ${url.toString()}`;
}

/**
 * Copies every table of `source` into `target` and verifies the row counts. Both handles must come
 * from `openDatabase` (so both are migrated to the same schema).
 */
export async function copyDatabase(
  source: DatabaseHandle,
  target: DatabaseHandle,
  options: CopyOptions = {},
): Promise<TableReport[]> {
  const log = options.log ?? (() => undefined);
  const from = source.db.withoutPlugins() as unknown as RawDb;
  const to = target.db.withoutPlugins() as unknown as RawDb;

  const sourceTables = await tablesOf(from, source.engine);
  const targetTables = await tablesInOrder(to, target.engine);
  for (const { table, columns } of targetTables) {
    const have = sourceTables.get(table);
    if (!have) throw new CopyError(`the source has no table ${table}`);
    const missing = columns.filter((c) => !have.includes(c));
    if (missing.length > 0) throw new CopyError(`the source table ${table} lacks columns ${missing.join(', ')}`);
  }
  const order = targetTables.map((t) => t.table);
  const extra = [...sourceTables.keys()].filter((t) => !order.includes(t));
  if (extra.length > 0) throw new CopyError(`the target has no table for ${extra.join(', ')}`);

  const occupied = await occupiedTables(to, order);
  if (occupied.length > 0 && !options.force) {
    throw new CopyError(`the target is not empty: ${occupied.join(', ')}; pass --force to replace its rows`);
  }

  const reports: TableReport[] = [];
  const copy = async (read: RawDb, write: RawDb) => {
    await emptyTables(write, order);
    for (const { table, columns } of targetTables) {
      const total = await countRows(read, table);
      const batch = batchSize(options.batchSize ?? 1000, columns.length);
      let copied = 0;
      for await (const rows of readBatches(read, source.engine, table, columns, batch)) {
        await insertRows(write, table, columns, rows);
        copied += rows.length;
        if (total > batch) log(`  ${table}: ${copied}/${total}`);
      }
      const written = await countRows(write, table);
      if (copied !== total || written !== total) {
        throw new CopyError(
          `${table}: the source has ${total} rows, ${copied} were read and the target has ${written}`,
        );
      }
      log(`${table}: ${total} row${total === 1 ? '' : 's'}`);
      reports.push({ table, rows: total });
    }
  };

  await to.transaction().execute(async (write) => {
    if (source.engine === 'postgres') {
      // One consistent snapshot of the source for the whole copy.
      await from
        .transaction()
        .setIsolationLevel('repeatable read')
        .execute((read) => copy(read, write));
    } else {
      await from.transaction().execute((read) => copy(read, write));
    }
  });
  return reports;
}

const USAGE = `Usage: npm run db:copy -- --from <database> --to <database> [--force] [--batch-size N]

Copies every table of the service's database <from> into <to>, e.g. an embedded SQLite
installation into PostgreSQL. A database is postgres://user:pass@host:port/name, sqlite:<file>
or a path to a SQLite file. The target is created and migrated as the service would; it must hold
no data unless --force is given (its rows are then replaced). Everything is copied in one
transaction and the row counts are verified, so a failed copy leaves the target unchanged.
Stop the service while copying.`;

export async function main(argv: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        from: { type: 'string' },
        to: { type: 'string' },
        force: { type: 'boolean', default: false },
        'batch-size': { type: 'string', default: '1000' },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const batchSize = Number(values['batch-size']);
  if (!values.from || !values.to || !Number.isInteger(batchSize) || batchSize < 1) {
    console.error(USAGE);
    return 2;
  }
  const fromConfig = parseDatabaseArg(values.from);
  const toConfig = parseDatabaseArg(values.to);
  if (fromConfig.kind === 'sqlite' && !fs.existsSync(fromConfig.file)) {
    console.error(`db:copy: no SQLite database at ${fromConfig.file}`);
    return 1;
  }
  if (JSON.stringify(fromConfig) === JSON.stringify(toConfig)) {
    console.error('db:copy: --from and --to name the same database');
    return 1;
  }

  console.log(`db:copy: ${describeDatabase(fromConfig)} → ${describeDatabase(toConfig)}`);
  const started = Date.now();
  const source = await openDatabase(fromConfig);
  try {
    const target = await openDatabase(toConfig);
    try {
      const reports = await copyDatabase(source, target, {
        force: values.force,
        batchSize,
        log: (line) => console.log(line),
      });
      const rows = reports.reduce((sum, r) => sum + r.rows, 0);
      console.log(
        `db:copy: done, ${reports.length} tables, ${rows} rows, counts verified, in ${Date.now() - started} ms`,
      );
      return 0;
    } finally {
      await target.close();
    }
  } catch (err) {
    console.error(
      `db:copy failed: ${err instanceof CopyError || err instanceof ConfigError ? err.message : String(err)}`,
    );
    return 1;
  } finally {
    await source.close();
  }
}

const invoked = process.argv[1] ? path.resolve(process.argv[1]) : '';
if (invoked === path.resolve(import.meta.filename) || /db-copy\.[jt]s$/.test(invoked)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
