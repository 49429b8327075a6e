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
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { type Kysely, sql } from 'kysely';
import { ConfigError, type DatabaseConfig } from '../src/config.js';
import { type DatabaseHandle, type Engine, openDatabase } from '../src/db/index.js';

type Row = Record<string, unknown>;
type RawDb = Kysely<Record<string, Row>>;

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

/** Kysely's own bookkeeping; each side keeps its own, written by its migrator. */
const INTERNAL = new Set(['kysely_migration', 'kysely_migration_lock']);

async function tablesOf(db: RawDb, engine: Engine): Promise<Map<string, string[]>> {
  const tables = await db.introspection.getTables();
  const out = new Map<string, string[]>();
  for (const t of tables) {
    if (t.isView || INTERNAL.has(t.name)) continue;
    if (engine === 'postgres' && t.schema !== undefined && t.schema !== 'public') continue;
    out.set(
      t.name,
      t.columns.map((c) => c.name),
    );
  }
  return out;
}

/** `child → parents` foreign-key edges between tables. */
async function foreignKeys(db: RawDb, engine: Engine, tables: Iterable<string>): Promise<Map<string, Set<string>>> {
  const edges = new Map<string, Set<string>>();
  if (engine === 'postgres') {
    const { rows } = await sql<{ child: string; parent: string }>`
      select c.conrelid::regclass::text as child, c.confrelid::regclass::text as parent
      from pg_constraint c
      where c.contype = 'f' and c.connamespace = 'public'::regnamespace`.execute(db);
    for (const { child, parent } of rows) {
      if (!edges.has(child)) edges.set(child, new Set());
      edges.get(child)?.add(parent);
    }
    return edges;
  }
  for (const table of tables) {
    const { rows } = await sql<{
      parent: string;
    }>`select "table" as parent from pragma_foreign_key_list(${table})`.execute(db);
    edges.set(table, new Set(rows.map((r) => r.parent)));
  }
  return edges;
}

/** Tables ordered so that every table comes after the tables it references. */
function parentsFirst(tables: string[], edges: Map<string, Set<string>>): string[] {
  const ordered: string[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (table: string) => {
    if (state.get(table) === 'done') return;
    if (state.get(table) === 'visiting') throw new CopyError(`foreign keys form a cycle through ${table}`);
    state.set(table, 'visiting');
    for (const parent of [...(edges.get(table) ?? [])].sort()) {
      if (parent !== table && tables.includes(parent)) visit(parent);
    }
    state.set(table, 'done');
    ordered.push(table);
  };
  for (const table of [...tables].sort()) visit(table);
  return ordered;
}

/** Primary-key columns in key order: the keyset that batches walk through. */
async function primaryKey(db: RawDb, engine: Engine, table: string): Promise<string[]> {
  if (engine === 'postgres') {
    const { rows } = await sql<{ name: string }>`
      select a.attname as name
      from pg_index i
      cross join lateral unnest(i.indkey) with ordinality as k(attnum, position)
      join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
      where i.indrelid = ${table}::regclass and i.indisprimary
      order by k.position`.execute(db);
    return rows.map((r) => r.name);
  }
  const { rows } = await sql<{ name: string; pk: number }>`
    select name, pk from pragma_table_info(${table}) where pk > 0 order by pk`.execute(db);
  return rows.map((r) => r.name);
}

async function countRows(db: RawDb, table: string): Promise<number> {
  const { rows } = await sql<{ n: number | string }>`select count(*) as n from ${sql.table(table)}`.execute(db);
  return Number(rows[0]?.n ?? 0);
}

/** Tables that migrations seed with bookkeeping rows (cache version counters); they do not count as data. */
const BOOKKEEPING = new Set(['content_state']);

/** Parameters per statement stay under both engines' limits (PostgreSQL 65535, SQLite 32766). */
const MAX_PARAMETERS = 30_000;

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
  const targetTables = await tablesOf(to, target.engine);
  for (const [table, columns] of targetTables) {
    const have = sourceTables.get(table);
    if (!have) throw new CopyError(`the source has no table ${table}`);
    const missing = columns.filter((c) => !have.includes(c));
    if (missing.length > 0) throw new CopyError(`the source table ${table} lacks columns ${missing.join(', ')}`);
  }
  const extra = [...sourceTables.keys()].filter((t) => !targetTables.has(t));
  if (extra.length > 0) throw new CopyError(`the target has no table for ${extra.join(', ')}`);

  const order = parentsFirst([...targetTables.keys()], await foreignKeys(to, target.engine, targetTables.keys()));

  const occupied: string[] = [];
  for (const table of order) {
    if (BOOKKEEPING.has(table)) continue;
    const n = await countRows(to, table);
    if (n > 0) occupied.push(`${table} (${n})`);
  }
  if (occupied.length > 0 && !options.force) {
    throw new CopyError(`the target is not empty: ${occupied.join(', ')}; pass --force to replace its rows`);
  }

  const reports: TableReport[] = [];
  const copy = async (read: RawDb, write: RawDb) => {
    // Children first, so that foreign keys hold while the target is emptied.
    for (const table of [...order].reverse()) await sql`delete from ${sql.table(table)}`.execute(write);
    for (const table of order) {
      const columns = targetTables.get(table) ?? [];
      const key = await primaryKey(read, source.engine, table);
      const keyset = key.length > 0 ? key : columns;
      const total = await countRows(read, table);
      const batch = Math.max(1, Math.min(options.batchSize ?? 1000, Math.floor(MAX_PARAMETERS / columns.length)));
      const list = sql.join(columns.map((c) => sql.ref(c)));
      const keyList = sql.join(keyset.map((c) => sql.ref(c)));
      let copied = 0;
      let last: Row | undefined;
      for (;;) {
        const after = last;
        const where =
          after === undefined ? sql`` : sql`where (${keyList}) > (${sql.join(keyset.map((c) => after[c]))})`;
        const { rows } = await sql<Row>`
          select ${list} from ${sql.table(table)} ${where} order by ${keyList} limit ${batch}`.execute(read);
        if (rows.length === 0) break;
        const values = sql.join(rows.map((row) => sql`(${sql.join(columns.map((c) => row[c] ?? null))})`));
        await sql`insert into ${sql.table(table)} (${list}) values ${values}`.execute(write);
        copied += rows.length;
        last = rows[rows.length - 1];
        if (total > batch) log(`  ${table}: ${copied}/${total}`);
        if (rows.length < batch) break;
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
