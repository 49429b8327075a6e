/**
 * One consistent archive of an installation, taken while it serves, and its restore into an empty
 * one. The archive is a tar file (gzip-compressed when its name ends in .gz or .tgz):
 *
 *   backup.json            format, engine, time, the migrations the database had
 *   database/app.db        SQLite: a snapshot taken with SQLite's online backup API
 *   tables/<table>.ndjson  PostgreSQL: every table, read in one REPEATABLE READ transaction
 *                          (a line of column names, then one JSON array per row)
 *   uploads/<key>          every file of the local store
 *   manifest.json          rows per table, and size and sha256 of every file above
 *
 * The database is read first: files are never changed once stored and are written before the rows
 * that name them, so every file a row of the snapshot names is in the archive.
 */
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import SQLite from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
import { extract as tarExtract, type Header as TarHeader, type Pack, pack as tarPack } from 'tar-stream';
import type { Config, DatabaseConfig } from '../config.js';
import { openDatabase } from '../db/index.js';
import {
  batchSize,
  countRows,
  emptyTables,
  insertRows,
  occupiedTables,
  type RawDb,
  readBatches,
  type Row,
  tablesInOrder,
} from '../db/tables.js';
import { isSafeKey } from '../storage/storage.js';

/** An archive entry as tar-stream's extractor yields it. */
type Entry = Readable & { header: TarHeader };

export class BackupError extends Error {
  override name = 'BackupError';
}

const FORMAT = 'launcher-dist-service backup';
const FORMAT_VERSION = 1;
const SQLITE_ENTRY = 'database/app.db';

interface Header {
  format: string;
  version: number;
  engine: DatabaseConfig['kind'];
  createdAt: string;
  migrations: string[];
}

export interface FileEntry {
  name: string;
  size: number;
  sha256: string;
}

export interface Manifest {
  tables: Record<string, number>;
  files: FileEntry[];
}

type Log = (line: string) => void;

function rawKysely(config: DatabaseConfig, readonly: boolean): RawDb {
  const dialect =
    config.kind === 'sqlite'
      ? new SqliteDialect({ database: new SQLite(config.file, { readonly, fileMustExist: true }) })
      : new PostgresDialect({ pool: new pg.Pool({ connectionString: config.url, max: 1 }) });
  return new Kysely<Record<string, Row>>({ dialect });
}

async function migrationsOf(db: RawDb): Promise<string[]> {
  const { rows } = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(db);
  return rows.map((r) => r.name);
}

/** Hashes and counts what flows through `stream` (a listener beside its consumer); call once it ended. */
function measure(stream: Readable, name: string): () => FileEntry {
  const hash = createHash('sha256');
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    hash.update(chunk);
    size += chunk.length;
  });
  return () => ({ name, size, sha256: hash.digest('hex') });
}

/** Adds `source` (of `size` bytes) as `name`, answering its size and sha256 once written. */
function addEntry(pack: Pack, name: string, size: number, source: Readable): Promise<FileEntry> {
  const measured = measure(source, name);
  return new Promise((resolve, reject) => {
    const entry = pack.entry({ name, size, mode: 0o644 }, (err) => {
      const written = measured();
      if (err) reject(err);
      else if (written.size !== size) reject(new BackupError(`${name} changed size while it was archived`));
      else resolve(written);
    });
    pipeline(source, entry).catch(reject);
  });
}

const addBuffer = (pack: Pack, name: string, data: Buffer) => addEntry(pack, name, data.length, Readable.from([data]));

const addFile = async (pack: Pack, name: string, file: string) =>
  addEntry(pack, name, (await fs.promises.stat(file)).size, fs.createReadStream(file));

/** The keys of every file in a local store, sorted; the store's own `.tmp` is left out. */
async function storeKeys(root: string): Promise<string[]> {
  if (!fs.existsSync(root)) return [];
  const entries = await fs.promises.readdir(root, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(root, path.join(e.parentPath, e.name)).split(path.sep).join('/'))
    .filter(isSafeKey)
    .sort();
}

/** SQLite: the online backup API copies a consistent snapshot while the service keeps writing. */
async function snapshotSqlite(file: string, work: string) {
  if (!fs.existsSync(file)) throw new BackupError(`no SQLite database at ${file}`);
  const snapshot = path.join(work, 'app.db');
  const source = new SQLite(file, { readonly: true, fileMustExist: true });
  try {
    // After the first step, the rest in one step: a step restarted by a concurrent write starts over.
    await source.backup(snapshot, { progress: () => Number.MAX_SAFE_INTEGER });
  } finally {
    source.close();
  }
  const db = rawKysely({ kind: 'sqlite', file: snapshot }, true);
  try {
    const tables: Record<string, number> = {};
    for (const { table } of await tablesInOrder(db, 'sqlite')) tables[table] = await countRows(db, table);
    return { tables, migrations: await migrationsOf(db), files: [{ name: SQLITE_ENTRY, file: snapshot }] };
  } finally {
    await db.destroy();
  }
}

/** PostgreSQL: every table read in one REPEATABLE READ transaction, each into an NDJSON file. */
async function snapshotPostgres(url: string, work: string) {
  const db = rawKysely({ kind: 'postgres', url }, true);
  try {
    return await db
      .transaction()
      .setIsolationLevel('repeatable read')
      .execute(async (trx) => {
        const tables: Record<string, number> = {};
        const files: Array<{ name: string; file: string }> = [];
        const migrations = await migrationsOf(trx);
        for (const { table, columns } of await tablesInOrder(trx, 'postgres')) {
          const file = path.join(work, `${table}.ndjson`);
          const out = fs.createWriteStream(file);
          const lines = new PassThrough();
          const written = pipeline(lines, out);
          lines.write(`${JSON.stringify(columns)}\n`);
          let rows = 0;
          for await (const batch of readBatches(trx, 'postgres', table, columns, batchSize(1000, columns.length))) {
            const text = batch.map((row) => JSON.stringify(columns.map((c) => row[c] ?? null))).join('\n');
            if (!lines.write(`${text}\n`)) await new Promise((resolve) => lines.once('drain', resolve));
            rows += batch.length;
          }
          lines.end();
          await written;
          tables[table] = rows;
          files.push({ name: `tables/${table}.ndjson`, file });
        }
        return { tables, migrations, files };
      });
  } finally {
    await db.destroy();
  }
}

/** Writes the archive of `config`'s installation to `to` (via `to.partial`, renamed when complete). */
export async function backup(config: Config, to: string, log: Log): Promise<Manifest> {
  const target = path.resolve(to);
  const partial = `${target}.partial`;
  const work = fs.mkdtempSync(path.join(path.dirname(target), '.backup-'));
  try {
    const database =
      config.database.kind === 'sqlite'
        ? await snapshotSqlite(config.database.file, work)
        : await snapshotPostgres(config.database.url, work);
    log(`database snapshot: ${Object.values(database.tables).reduce((a, b) => a + b, 0)} rows`);

    const pack = tarPack();
    const out = fs.createWriteStream(partial);
    const written = /\.t?gz$/.test(target) ? pipeline(pack, zlib.createGzip(), out) : pipeline(pack, out);

    const header: Header = {
      format: FORMAT,
      version: FORMAT_VERSION,
      engine: config.database.kind,
      createdAt: new Date().toISOString(),
      migrations: database.migrations,
    };
    await addBuffer(pack, 'backup.json', Buffer.from(JSON.stringify(header, null, 2)));
    const files: FileEntry[] = [];
    for (const { name, file } of database.files) files.push(await addFile(pack, name, file));
    if (config.storage.kind === 'local') {
      const root = config.storage.root;
      for (const key of await storeKeys(root)) files.push(await addFile(pack, `uploads/${key}`, path.join(root, key)));
    } else {
      log('files: the store is an S3 bucket; back it up with its own tools (versioning, replication)');
    }
    const manifest: Manifest = { tables: database.tables, files };
    await addBuffer(pack, 'manifest.json', Buffer.from(JSON.stringify(manifest, null, 2)));
    pack.finalize();
    await written;
    fs.renameSync(partial, target);
    return manifest;
  } catch (err) {
    fs.rmSync(partial, { force: true });
    throw err;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/** Why the database and store are not an empty place to restore into, or null. */
async function notEmpty(database: DatabaseConfig, root: string): Promise<string | null> {
  const leftovers = (await storeKeys(root)).length;
  if (leftovers > 0) return `the file store ${root} holds ${leftovers} files`;
  if (database.kind === 'sqlite') {
    const file = database.file;
    const present = [file, `${file}-wal`, `${file}-shm`].filter((f) => fs.existsSync(f));
    return present.length > 0 ? `the database file ${present[0]} exists` : null;
  }
  const handle = await openDatabase(database);
  try {
    const raw = handle.db.withoutPlugins() as unknown as RawDb;
    const occupied = await occupiedTables(
      raw,
      (await tablesInOrder(raw, 'postgres')).map((t) => t.table),
    );
    return occupied.length > 0 ? `the database holds rows: ${occupied.join(', ')}` : null;
  } finally {
    await handle.close();
  }
}

/** Streams an archive's entries; gzip is recognised by its magic bytes. */
async function* entriesOf(file: string): AsyncGenerator<Entry> {
  const fd = await fs.promises.open(file, 'r');
  const magic = Buffer.alloc(2);
  await fd.read(magic, 0, 2, 0);
  await fd.close();
  const extract = tarExtract();
  const source = fs.createReadStream(file);
  const reading =
    magic[0] === 0x1f && magic[1] === 0x8b ? pipeline(source, zlib.createGunzip(), extract) : pipeline(source, extract);
  try {
    yield* extract as unknown as AsyncIterable<Entry>;
  } finally {
    await reading;
  }
}

async function text(entry: Entry): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of entry) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Writes an entry to `file`, answering its size and sha256. */
async function saveEntry(entry: Entry, file: string): Promise<FileEntry> {
  await fs.promises.mkdir(path.dirname(file), { recursive: true });
  const measured = measure(entry, entry.header.name);
  await pipeline(entry, fs.createWriteStream(file, { flags: 'wx' }));
  return measured();
}

/** Inserts an NDJSON table entry into `db`: its columns must all exist in the target table. */
async function loadTable(db: RawDb, table: string, columns: string[] | undefined, entry: Entry): Promise<number> {
  if (columns === undefined) throw new BackupError(`the archive has a table ${table} this version does not know`);
  let names: string[] | null = null;
  let batch: Row[] = [];
  let rows = 0;
  const flush = async () => {
    if (names !== null) await insertRows(db, table, names, batch);
    rows += batch.length;
    batch = [];
  };
  for await (const line of readline.createInterface({ input: entry, crlfDelay: Infinity })) {
    if (line === '') continue;
    const values = JSON.parse(line) as unknown[];
    if (names === null) {
      names = values as string[];
      const unknown = names.filter((c) => !columns.includes(c));
      if (unknown.length > 0) throw new BackupError(`${table}: the archive has unknown columns ${unknown.join(', ')}`);
      continue;
    }
    const cols = names;
    batch.push(Object.fromEntries(cols.map((c, i) => [c, values[i]])));
    if (batch.length >= batchSize(1000, cols.length)) await flush();
  }
  await flush();
  return rows;
}

function check(manifest: Manifest | null, seen: Map<string, FileEntry>, counts: Record<string, number>): Manifest {
  if (manifest === null) throw new BackupError('the archive ends before its manifest: it is incomplete');
  for (const expected of manifest.files) {
    const got = seen.get(expected.name);
    if (got === undefined) throw new BackupError(`the archive lacks ${expected.name}`);
    if (got.size !== expected.size || got.sha256 !== expected.sha256) {
      throw new BackupError(`${expected.name} does not match its manifest entry (damaged archive)`);
    }
  }
  const extra = [...seen.keys()].filter((name) => !manifest.files.some((f) => f.name === name));
  if (extra.length > 0) throw new BackupError(`the archive has entries its manifest does not list: ${extra[0]}`);
  for (const [table, rows] of Object.entries(manifest.tables)) {
    if (counts[table] !== rows) {
      throw new BackupError(`${table}: the manifest says ${rows} rows, the restore has ${counts[table] ?? 0}`);
    }
  }
  return manifest;
}

/**
 * Restores an archive into `config`'s installation, which must be empty (no database file, or a
 * PostgreSQL database without rows, and an empty local store). Everything is checked against the
 * manifest before it is put in place: a failed restore leaves the target as it was.
 */
export async function restore(config: Config, from: string, log: Log): Promise<Manifest> {
  if (config.storage.kind !== 'local') {
    throw new BackupError(
      'restore needs a local file store (STORAGE unset or a folder); copy the files to the bucket afterwards',
    );
  }
  const root = config.storage.root;
  const reason = await notEmpty(config.database, root);
  if (reason !== null) throw new BackupError(`the target is not empty: ${reason}; restore into an empty one`);
  const staging = `${root}.restoring-${randomUUID()}`;
  const sqliteStaging = config.database.kind === 'sqlite' ? `${config.database.file}.restoring` : null;

  const consume = async (db: RawDb | null): Promise<Manifest> => {
    const seen = new Map<string, FileEntry>();
    const counts: Record<string, number> = {};
    let header: Header | null = null;
    let manifest: Manifest | null = null;
    const targetTables = db === null ? null : await tablesInOrder(db, 'postgres');
    let emptied = false;
    for await (const entry of entriesOf(from)) {
      const name = entry.header.name;
      if (header === null) {
        if (name !== 'backup.json') throw new BackupError(`not a backup of this service (starts with ${name})`);
        header = JSON.parse(await text(entry)) as Header;
        if (header.format !== FORMAT || header.version !== FORMAT_VERSION) {
          throw new BackupError(`not a backup of this service in a format this version reads (${header.format})`);
        }
        if (header.engine !== config.database.kind) {
          throw new BackupError(
            `the archive is of a ${header.engine} installation and the target is ${config.database.kind}: restore ` +
              'into the same engine, then move it with npm run db:copy',
          );
        }
        if (db !== null) {
          const known = await migrationsOf(db);
          const newer = header.migrations.filter((m) => !known.includes(m));
          if (newer.length > 0)
            throw new BackupError(`the archive is of a newer version (migrations ${newer.join(', ')})`);
        }
        continue;
      }
      if (name === 'manifest.json') {
        manifest = JSON.parse(await text(entry)) as Manifest;
      } else if (name === SQLITE_ENTRY && sqliteStaging !== null) {
        seen.set(name, await saveEntry(entry, sqliteStaging));
      } else if (name.startsWith('tables/') && db !== null && targetTables !== null) {
        if (!emptied) {
          await emptyTables(
            db,
            targetTables.map((t) => t.table),
          );
          emptied = true;
        }
        const table = name.slice('tables/'.length).replace(/\.ndjson$/, '');
        const measured = measure(entry, name);
        counts[table] = await loadTable(db, table, targetTables.find((t) => t.table === table)?.columns, entry);
        seen.set(name, measured());
      } else if (name.startsWith('uploads/') && isSafeKey(name.slice('uploads/'.length))) {
        seen.set(name, await saveEntry(entry, path.join(staging, ...name.slice('uploads/'.length).split('/'))));
      } else {
        throw new BackupError(`unexpected entry ${name} in the archive`);
      }
    }
    if (sqliteStaging !== null && fs.existsSync(sqliteStaging)) {
      const restored = rawKysely({ kind: 'sqlite', file: sqliteStaging }, true);
      try {
        for (const { table } of await tablesInOrder(restored, 'sqlite'))
          counts[table] = await countRows(restored, table);
      } finally {
        await restored.destroy();
      }
    }
    return check(manifest, seen, counts);
  };

  try {
    let manifest: Manifest;
    if (config.database.kind === 'postgres') {
      const handle = await openDatabase(config.database);
      try {
        const raw = handle.db.withoutPlugins() as unknown as RawDb;
        manifest = await raw.transaction().execute((trx) => consume(trx));
      } finally {
        await handle.close();
      }
    } else {
      manifest = await consume(null);
      if (sqliteStaging === null || !fs.existsSync(sqliteStaging)) throw new BackupError('the archive has no database');
      fs.mkdirSync(path.dirname(config.database.file), { recursive: true });
      fs.renameSync(sqliteStaging, config.database.file);
    }
    // An empty store folder (a fresh start creates one with `.tmp`) makes way for the restored one.
    fs.rmSync(root, { recursive: true, force: true });
    fs.mkdirSync(staging, { recursive: true });
    fs.renameSync(staging, root);
    log(
      `restored ${Object.keys(manifest.tables).length} tables and ${manifest.files.filter((f) => f.name.startsWith('uploads/')).length} files`,
    );
    return manifest;
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
    if (sqliteStaging !== null) fs.rmSync(sqliteStaging, { force: true });
  }
}
