import { randomBytes } from 'node:crypto';
import { nowIso } from '../domain/clock.js';
import type { Db } from './index.js';

/**
 * A random 32-byte key that every instance on this database shares, created by whichever instance
 * asks first (the others find it: the insert does nothing on conflict).
 */
export async function serverSecret(db: Db, name: string): Promise<Buffer> {
  await db
    .insertInto('serverSecrets')
    .values({ name, value: randomBytes(32).toString('base64'), createdAt: nowIso() })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  const row = await db.selectFrom('serverSecrets').select('value').where('name', '=', name).executeTakeFirstOrThrow();
  return Buffer.from(row.value, 'base64');
}
