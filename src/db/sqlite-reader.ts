import { Worker } from 'node:worker_threads';
import {
  CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
} from 'kysely';

/*
 * Reads that scan many rows (the device figures at a million launchers take most of a second) run
 * here, on a read-only connection of their own in a worker thread: better-sqlite3 answers
 * synchronously, and on the service's connection such a read would hold every other request of the
 * process for as long. Under WAL a reader never waits for the writer and sees what was committed
 * when its statement (or transaction) began.
 */
const READER_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const SQLite = require(workerData.driver);
const db = new SQLite(workerData.file, { readonly: true });
db.pragma('busy_timeout = 5000');
const statements = new Map();
parentPort.on('message', ({ id, sql, parameters }) => {
  if (id === undefined) {
    db.close();
    parentPort.close();
    return;
  }
  try {
    let statement = statements.get(sql);
    if (statement === undefined) {
      if (statements.size >= 200) statements.clear();
      statement = db.prepare(sql);
      statements.set(sql, statement);
    }
    if (statement.reader) parentPort.postMessage({ id, rows: statement.all(parameters) });
    else {
      statement.run(parameters);
      parentPort.postMessage({ id, rows: [] });
    }
  } catch (err) {
    parentPort.postMessage({ id, error: err instanceof Error ? err.message : String(err) });
  }
});
`;

interface Answer {
  id: number;
  rows?: unknown[];
  error?: string;
}

/** The worker and its one connection; queries are answered in the order they were sent. */
class ReaderConnection implements DatabaseConnection {
  private readonly waiting = new Map<number, { resolve: (rows: unknown[]) => void; reject: (err: Error) => void }>();
  private nextId = 0;
  private readonly exited: Promise<void>;

  constructor(private readonly worker: Worker) {
    worker.on('message', ({ id, rows, error }: Answer) => {
      const call = this.waiting.get(id);
      this.waiting.delete(id);
      if (error !== undefined) call?.reject(new Error(error));
      else call?.resolve(rows ?? []);
    });
    this.exited = new Promise((resolve) =>
      worker.once('exit', () => {
        this.gone = new Error('the SQLite reader thread has stopped');
        this.failAll(this.gone);
        resolve();
      }),
    );
    worker.on('error', (err) => this.failAll(err));
  }

  private gone: Error | null = null;

  private failAll(err: Error): void {
    for (const call of this.waiting.values()) call.reject(err);
    this.waiting.clear();
  }

  executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    if (this.gone) return Promise.reject(this.gone);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve: (rows) => resolve({ rows: rows as R[] }), reject });
      this.worker.postMessage({ id, sql: query.sql, parameters: query.parameters });
    });
  }

  streamQuery(): AsyncIterableIterator<QueryResult<never>> {
    throw new Error('the SQLite reader does not stream');
  }

  async close(): Promise<void> {
    // Held until it has closed its connection: an unref'd thread would let the process end first.
    this.worker.ref();
    this.worker.postMessage({});
    await this.exited;
  }
}

/** One connection: a transaction (a consistent snapshot of several reads) holds it until it ends. */
class ReaderDriver implements Driver {
  private connection: ReaderConnection | null = null;
  private busy = false;
  private readonly queue: Array<() => void> = [];

  constructor(
    private readonly file: string,
    private readonly driverPath: string,
  ) {}

  init(): Promise<void> {
    const worker = new Worker(READER_WORKER, { eval: true, workerData: { file: this.file, driver: this.driverPath } });
    // Like the checkpoint thread, it never keeps the process alive by itself.
    worker.unref();
    this.connection = new ReaderConnection(worker);
    return Promise.resolve();
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    if (this.busy) await new Promise<void>((resolve) => this.queue.push(resolve));
    this.busy = true;
    if (this.connection === null) throw new Error('the SQLite reader is closed');
    return this.connection;
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin'));
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('commit'));
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('rollback'));
  }

  releaseConnection(): Promise<void> {
    const next = this.queue.shift();
    if (next) next();
    else this.busy = false;
    return Promise.resolve();
  }

  async destroy(): Promise<void> {
    await this.connection?.close();
    this.connection = null;
  }
}

/** A Kysely dialect whose queries run on a read-only connection to `file` in a worker thread. */
export function sqliteReaderDialect(file: string, driverPath: string): Dialect {
  return {
    createAdapter: () => new SqliteAdapter(),
    createDriver: () => new ReaderDriver(file, driverPath),
    createQueryCompiler: () => new SqliteQueryCompiler(),
    createIntrospector: (db: Kysely<unknown>) => new SqliteIntrospector(db),
  };
}
