/**
 * The service's tables seen as plain rows, whatever the engine: which tables and columns exist,
 * the order foreign keys allow, and reading and writing them in batches. Shared by `db:copy`
 * (engine to engine) and `backup`/`restore` (engine to archive and back).
 */
import { type Kysely, sql } from 'kysely';
import type { Engine } from './index.js';

export type Row = Record<string, unknown>;
/** A Kysely instance without the camel-case plugin: names are the tables' own. */
export type RawDb = Kysely<Record<string, Row>>;

/** Kysely's own bookkeeping; each database keeps its own, written by its migrator. */
export const MIGRATION_TABLES = new Set(['kysely_migration', 'kysely_migration_lock']);

/** Tables that migrations seed with bookkeeping rows (cache version counters); they do not count as data. */
export const BOOKKEEPING = new Set(['content_state']);

/** Parameters per statement stay under both engines' limits (PostgreSQL 65535, SQLite 32766). */
const MAX_PARAMETERS = 30_000;

/** Every data table and its columns. */
export async function tablesOf(db: RawDb, engine: Engine): Promise<Map<string, string[]>> {
  const tables = await db.introspection.getTables();
  const out = new Map<string, string[]>();
  for (const t of tables) {
    if (t.isView || MIGRATION_TABLES.has(t.name)) continue;
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
    if (state.get(table) === 'visiting') throw new Error(`foreign keys form a cycle through ${table}`);
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

/** The data tables of `db` with their columns, parents before the tables that reference them. */
export async function tablesInOrder(db: RawDb, engine: Engine): Promise<Array<{ table: string; columns: string[] }>> {
  const tables = await tablesOf(db, engine);
  const order = parentsFirst([...tables.keys()], await foreignKeys(db, engine, tables.keys()));
  return order.map((table) => ({ table, columns: tables.get(table) ?? [] }));
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

export async function countRows(db: RawDb, table: string): Promise<number> {
  const { rows } = await sql<{ n: number | string }>`select count(*) as n from ${sql.table(table)}`.execute(db);
  return Number(rows[0]?.n ?? 0);
}

/** The data tables that hold rows, as `table (n)`; bookkeeping tables do not count. */
export async function occupiedTables(db: RawDb, tables: readonly string[]): Promise<string[]> {
  const occupied: string[] = [];
  for (const table of tables) {
    if (BOOKKEEPING.has(table)) continue;
    const n = await countRows(db, table);
    if (n > 0) occupied.push(`${table} (${n})`);
  }
  return occupied;
}

/** Rows per batch for a table of `columns` columns: `wanted`, bounded by the engines' parameter limits. */
export function batchSize(wanted: number, columns: number): number {
  return Math.max(1, Math.min(wanted, Math.floor(MAX_PARAMETERS / columns)));
}

/** Every row of `table`, in primary-key order, `batch` rows at a time (keyset pagination). */
export async function* readBatches(
  db: RawDb,
  engine: Engine,
  table: string,
  columns: string[],
  batch: number,
): AsyncGenerator<Row[]> {
  const key = await primaryKey(db, engine, table);
  const keyset = key.length > 0 ? key : columns;
  const list = sql.join(columns.map((c) => sql.ref(c)));
  const keyList = sql.join(keyset.map((c) => sql.ref(c)));
  let last: Row | undefined;
  for (;;) {
    const after = last;
    const where = after === undefined ? sql`` : sql`where (${keyList}) > (${sql.join(keyset.map((c) => after[c]))})`;
    const { rows } = await sql<Row>`
      select ${list} from ${sql.table(table)} ${where} order by ${keyList} limit ${batch}`.execute(db);
    if (rows.length === 0) return;
    yield rows;
    last = rows[rows.length - 1];
    if (rows.length < batch) return;
  }
}

/** One multi-row insert of `rows` (at most `batchSize(…)` of them) into `table`. */
export async function insertRows(db: RawDb, table: string, columns: string[], rows: readonly Row[]): Promise<void> {
  if (rows.length === 0) return;
  const list = sql.join(columns.map((c) => sql.ref(c)));
  const values = sql.join(rows.map((row) => sql`(${sql.join(columns.map((c) => row[c] ?? null))})`));
  await sql`insert into ${sql.table(table)} (${list}) values ${values}`.execute(db);
}

/** Empties every table of `order`, children first so that foreign keys hold. */
export async function emptyTables(db: RawDb, order: readonly string[]): Promise<void> {
  for (const table of [...order].reverse()) await sql`delete from ${sql.table(table)}`.execute(db);
}
