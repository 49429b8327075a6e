import { createHash, randomBytes } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../../db/index.js';
import { newId, nowIso } from '../../domain/clock.js';
import { forbidden, notFound, unauthorized } from '../../http/errors.js';
import { hashPassword, verifyPassword } from './password.js';

export const SESSION_IDLE_MS = 7 * 24 * 3600 * 1000;
/** How stale `lastSeenAt` may get before a request refreshes it: saves a write per request. */
const TOUCH_AFTER_MS = 60 * 1000;
export const TOKEN_PREFIX = 'lds_';

export interface AdminUser {
  id: string;
  username: string;
}

export interface ApiTokenInfo {
  id: string;
  name: string;
  createdAt: string;
  lastUsedAt: string | null;
}

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
const newToken = () => randomBytes(32).toString('base64url');

export class AuthService {
  constructor(private readonly db: Db) {}

  /** Creates the first administrator when there is none; returns the password when it was generated. */
  async bootstrapAdmin(username: string, password: string | null, log: FastifyBaseLogger): Promise<void> {
    const existing = await this.db.selectFrom('users').select('id').limit(1).executeTakeFirst();
    if (existing) return;
    const chosen = password ?? randomBytes(12).toString('base64url');
    const now = nowIso();
    await this.db
      .insertInto('users')
      .values({ id: newId(), username, passwordHash: await hashPassword(chosen), createdAt: now, updatedAt: now })
      .onConflict((oc) => oc.column('username').doNothing())
      .execute();
    if (password === null) {
      log.warn(`created administrator "${username}" with generated password: ${chosen}  (shown once; change it)`);
    } else {
      log.info(`created administrator "${username}" from ADMIN_PASSWORD`);
    }
  }

  async login(username: string, password: string): Promise<{ user: AdminUser; token: string }> {
    const row = await this.db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirst();
    // Verify against a dummy hash when the user is unknown so timing does not reveal usernames.
    const ok = await verifyPassword(password, row?.passwordHash ?? DUMMY_HASH);
    if (!row || !ok) throw unauthorized('wrong username or password');
    const token = newToken();
    const now = nowIso();
    await this.db
      .insertInto('sessions')
      .values({ id: newId(), userId: row.id, tokenHash: hashToken(token), createdAt: now, lastSeenAt: now })
      .execute();
    return { user: { id: row.id, username: row.username }, token };
  }

  async logout(sessionToken: string): Promise<void> {
    await this.db.deleteFrom('sessions').where('tokenHash', '=', hashToken(sessionToken)).execute();
  }

  /** The user a session cookie belongs to, or null when it is unknown or idle for too long. */
  async userForSession(sessionToken: string): Promise<AdminUser | null> {
    const row = await this.db
      .selectFrom('sessions')
      .innerJoin('users', 'users.id', 'sessions.userId')
      .select(['sessions.id as sessionId', 'sessions.lastSeenAt', 'users.id', 'users.username'])
      .where('sessions.tokenHash', '=', hashToken(sessionToken))
      .executeTakeFirst();
    if (!row) return null;
    const idle = Date.now() - Date.parse(row.lastSeenAt);
    if (idle > SESSION_IDLE_MS) {
      await this.db.deleteFrom('sessions').where('id', '=', row.sessionId).execute();
      return null;
    }
    if (idle > TOUCH_AFTER_MS) {
      await this.db.updateTable('sessions').set({ lastSeenAt: nowIso() }).where('id', '=', row.sessionId).execute();
    }
    return { id: row.id, username: row.username };
  }

  async userForApiToken(token: string): Promise<AdminUser | null> {
    const row = await this.db
      .selectFrom('apiTokens')
      .innerJoin('users', 'users.id', 'apiTokens.userId')
      .select(['apiTokens.id as tokenId', 'apiTokens.lastUsedAt', 'users.id', 'users.username'])
      .where('apiTokens.tokenHash', '=', hashToken(token))
      .executeTakeFirst();
    if (!row) return null;
    if (row.lastUsedAt === null || Date.now() - Date.parse(row.lastUsedAt) > TOUCH_AFTER_MS) {
      await this.db.updateTable('apiTokens').set({ lastUsedAt: nowIso() }).where('id', '=', row.tokenId).execute();
    }
    return { id: row.id, username: row.username };
  }

  /** Checks the current password, stores the new one and revokes every other session of the user. */
  async changePassword(userId: string, currentPassword: string, newPassword: string, keepSession: string | null) {
    const row = await this.db.selectFrom('users').selectAll().where('id', '=', userId).executeTakeFirst();
    if (!row) throw notFound('user not found');
    if (!(await verifyPassword(currentPassword, row.passwordHash))) throw forbidden('currentPassword is wrong');
    const passwordHash = await hashPassword(newPassword);
    await this.db.transaction().execute(async (trx) => {
      await trx.updateTable('users').set({ passwordHash, updatedAt: nowIso() }).where('id', '=', userId).execute();
      let revoke = trx.deleteFrom('sessions').where('userId', '=', userId);
      if (keepSession !== null) revoke = revoke.where('tokenHash', '!=', hashToken(keepSession));
      await revoke.execute();
    });
  }

  async createApiToken(userId: string, name: string): Promise<ApiTokenInfo & { token: string }> {
    const token = TOKEN_PREFIX + newToken();
    const row = { id: newId(), userId, name, tokenHash: hashToken(token), createdAt: nowIso(), lastUsedAt: null };
    await this.db.insertInto('apiTokens').values(row).execute();
    return { id: row.id, name, token, createdAt: row.createdAt, lastUsedAt: null };
  }

  listApiTokens(): Promise<ApiTokenInfo[]> {
    return this.db
      .selectFrom('apiTokens')
      .select(['id', 'name', 'createdAt', 'lastUsedAt'])
      .orderBy('createdAt', 'desc')
      .execute();
  }

  async deleteApiToken(id: string): Promise<void> {
    const result = await this.db.deleteFrom('apiTokens').where('id', '=', id).executeTakeFirst();
    if (result.numDeletedRows === 0n) throw notFound('token not found');
  }
}

/** A valid hash of a random password, used only to spend equal time on unknown usernames. */
const DUMMY_HASH = await hashPassword(randomBytes(16).toString('hex'));
