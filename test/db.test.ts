import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/index.js';
import { ENGINE } from './helpers/db.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-db-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe.runIf(ENGINE === 'sqlite')('SQLite write-ahead log', () => {
  it('is checkpointed by a thread of its own, never inside a commit on the event loop', async () => {
    const file = path.join(dir, 'checkpoint.db');
    const database = await openDatabase({ kind: 'sqlite', file }, 50);
    try {
      const { rows } = await sql<{ walAutocheckpoint: number }>`pragma wal_autocheckpoint`.execute(database.db);
      expect(rows[0]?.walAutocheckpoint).toBe(0);

      const before = fs.statSync(file).size;
      await sql`create table filler (body text)`.execute(database.db);
      for (let i = 0; i < 64; i += 1) await sql`insert into filler values (${'x'.repeat(16_384)})`.execute(database.db);
      // The commits went to the log only; the database file grows once the thread checkpointed.
      const deadline = Date.now() + 5_000;
      while (fs.statSync(file).size < before + 1024 * 1024 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(fs.statSync(file).size).toBeGreaterThanOrEqual(before + 1024 * 1024);
    } finally {
      await database.close();
    }
  });
});
