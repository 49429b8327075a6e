import { createHash, randomBytes } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { recordAudit } from '../audit/log.js';
import { isUniqueViolation } from '../../db/errors.js';
import type { Db } from '../../db/index.js';
import type { UsersTable } from '../../db/schema.js';
import { newId, nowIso } from '../../domain/clock.js';
import { covers, isRole, type Role, tokenRole } from '../../domain/roles.js';
import { AppError, badRequest, conflict, forbidden, notFound, unauthorized } from '../../http/errors.js';
import { hashPassword, verifyPassword } from './password.js';
import { acceptedStep, hashRecoveryCode, newRecoveryCodes, newTotpSecret } from './totp.js';

export const SESSION_IDLE_MS = 7 * 24 * 3600 * 1000;
/** How stale `lastSeenAt` may get before a request refreshes it: saves a write per request. */
const TOUCH_AFTER_MS = 60 * 1000;
export const TOKEN_PREFIX = 'lds_';

export interface AdminUser {
  id: string;
  username: string;
  role: Role;
  /** The API token the request authenticated with, if any (for the audit log). */
  tokenName?: string;
}

export interface ApiTokenInfo {
  id: string;
  name: string;
  role: Role;
  createdAt: string;
  lastUsedAt: string | null;
}

/** An account as the owner's user list shows it (no secrets). */
export interface Account {
  id: string;
  username: string;
  role: Role;
  disabled: boolean;
  totpEnabled: boolean;
  createdAt: string;
  updatedAt: string;
}

type UserRow = UsersTable;

const roleOf = (value: string): Role => (isRole(value) ? value : 'editor');

function toAccount(row: UserRow): Account {
  return {
    id: row.id,
    username: row.username,
    role: roleOf(row.role),
    disabled: row.disabled === 1,
    totpEnabled: row.totpEnabled === 1,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/** Login failures say the same whether the account exists, is disabled or the password is wrong. */
const WRONG_LOGIN = 'wrong username or password';

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
const newToken = () => randomBytes(32).toString('base64url');

export class AuthService {
  constructor(
    private readonly db: Db,
    /** Shown by authenticator apps beside the account name. */
    private readonly issuer: string,
  ) {}

  /** Creates the first administrator when there is none; returns the password when it was generated. */
  async bootstrapAdmin(username: string, password: string | null, log: FastifyBaseLogger): Promise<void> {
    const existing = await this.db.selectFrom('users').select('id').limit(1).executeTakeFirst();
    if (existing) return;
    const chosen = password ?? randomBytes(12).toString('base64url');
    const now = nowIso();
    await this.db
      .insertInto('users')
      .values({
        id: newId(),
        username,
        passwordHash: await hashPassword(chosen),
        role: 'owner',
        disabled: 0,
        totpSecret: null,
        totpEnabled: 0,
        totpLastStep: null,
        recoveryCodes: null,
        createdAt: now,
        updatedAt: now,
      })
      .onConflict((oc) => oc.column('username').doNothing())
      .execute();
    if (password === null) {
      log.warn(`created administrator "${username}" with generated password: ${chosen}  (shown once; change it)`);
    } else {
      log.info(`created administrator "${username}" from ADMIN_PASSWORD`);
    }
  }

  /**
   * Checks the password and, for an account with a second factor, `totp` (a current code or an unused
   * recovery code); answers a new session. Unknown, disabled and wrong are one answer; only a right
   * password of an account with a second factor learns that a code is needed (`totpRequired`).
   */
  async login(username: string, password: string, totp?: string): Promise<{ user: AdminUser; token: string }> {
    const row = await this.db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirst();
    // Verify against a dummy hash when the user is unknown so timing does not reveal usernames.
    const ok = await verifyPassword(password, row?.passwordHash ?? DUMMY_HASH);
    if (!row || !ok || row.disabled === 1) return this.loginFailed(username, unauthorized(WRONG_LOGIN));
    if (row.totpEnabled === 1) {
      if (totp === undefined || totp === '') {
        throw new AppError(401, 'a code from the authenticator app (or a recovery code) is required', {
          totpRequired: true,
        });
      }
      if (!(await this.useSecondFactor(row, totp))) {
        return this.loginFailed(
          username,
          new AppError(401, 'wrong authenticator or recovery code', { totpRequired: true }),
        );
      }
    }
    const token = newToken();
    const now = nowIso();
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('sessions')
        .values({ id: newId(), userId: row.id, tokenHash: hashToken(token), createdAt: now, lastSeenAt: now })
        .execute();
      await recordAudit(trx, { action: 'login', actor: row.username });
    });
    return { user: { id: row.id, username: row.username, role: roleOf(row.role) }, token };
  }

  /** Records a failed login under the name tried, then fails with `error`. */
  private async loginFailed(username: string, error: AppError): Promise<never> {
    await recordAudit(this.db, { action: 'login.failed', actor: username });
    throw error;
  }

  /** Accepts a TOTP code (each time step once) or consumes a recovery code; atomic against replays. */
  private async useSecondFactor(row: UserRow, code: string): Promise<boolean> {
    const step = row.totpSecret === null ? null : acceptedStep(row.totpSecret, code.trim(), row.totpLastStep);
    if (step !== null) {
      const updated = await this.db
        .updateTable('users')
        .set({ totpLastStep: step })
        .where('id', '=', row.id)
        .where((eb) => eb.or([eb('totpLastStep', 'is', null), eb('totpLastStep', '<', step)]))
        .executeTakeFirst();
      return updated.numUpdatedRows > 0n;
    }
    const unused = JSON.parse(row.recoveryCodes ?? '[]') as string[];
    const hash = hashRecoveryCode(code);
    if (!unused.includes(hash)) return false;
    const updated = await this.db
      .updateTable('users')
      .set({ recoveryCodes: JSON.stringify(unused.filter((h) => h !== hash)) })
      .where('id', '=', row.id)
      .where('recoveryCodes', '=', row.recoveryCodes)
      .executeTakeFirst();
    return updated.numUpdatedRows > 0n;
  }

  async logout(sessionToken: string): Promise<void> {
    const owner = await this.db
      .selectFrom('sessions')
      .innerJoin('users', 'users.id', 'sessions.userId')
      .select('users.username')
      .where('sessions.tokenHash', '=', hashToken(sessionToken))
      .executeTakeFirst();
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('sessions').where('tokenHash', '=', hashToken(sessionToken)).execute();
      if (owner) await recordAudit(trx, { action: 'logout', actor: owner.username });
    });
  }

  /** The user a session cookie belongs to, or null when it is unknown, idle for too long or disabled. */
  async userForSession(sessionToken: string): Promise<AdminUser | null> {
    const row = await this.db
      .selectFrom('sessions')
      .innerJoin('users', 'users.id', 'sessions.userId')
      .select(['sessions.id as sessionId', 'sessions.lastSeenAt', 'users.id', 'users.username', 'users.role'])
      .where('sessions.tokenHash', '=', hashToken(sessionToken))
      .where('users.disabled', '=', 0)
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
    return { id: row.id, username: row.username, role: roleOf(row.role) };
  }

  /** The user an API token acts for, with the token's role (never above the user's), or null. */
  async userForApiToken(token: string): Promise<AdminUser | null> {
    const row = await this.db
      .selectFrom('apiTokens')
      .innerJoin('users', 'users.id', 'apiTokens.userId')
      .select([
        'apiTokens.id as tokenId',
        'apiTokens.lastUsedAt',
        'apiTokens.role as tokenRole',
        'apiTokens.name as tokenName',
        'users.id',
        'users.username',
        'users.role',
      ])
      .where('apiTokens.tokenHash', '=', hashToken(token))
      .where('users.disabled', '=', 0)
      .executeTakeFirst();
    if (!row) return null;
    if (row.lastUsedAt === null || Date.now() - Date.parse(row.lastUsedAt) > TOUCH_AFTER_MS) {
      await this.db.updateTable('apiTokens').set({ lastUsedAt: nowIso() }).where('id', '=', row.tokenId).execute();
    }
    return {
      id: row.id,
      username: row.username,
      role: tokenRole(roleOf(row.role), roleOf(row.tokenRole)),
      tokenName: row.tokenName,
    };
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
      await recordAudit(trx);
    });
  }

  /** A token acting with `role` (default: the creator's), which the creator's role must cover. */
  async createApiToken(
    user: AdminUser,
    name: string,
    role: Role = user.role,
  ): Promise<ApiTokenInfo & { token: string }> {
    if (!covers(user.role, role)) throw forbidden(`a ${user.role} may not create a token with the ${role} role`);
    const token = TOKEN_PREFIX + newToken();
    const row = {
      id: newId(),
      userId: user.id,
      name,
      role,
      tokenHash: hashToken(token),
      createdAt: nowIso(),
      lastUsedAt: null,
    };
    await this.db.transaction().execute(async (trx) => {
      await trx.insertInto('apiTokens').values(row).execute();
      await recordAudit(trx);
    });
    return { id: row.id, name, role, token, createdAt: row.createdAt, lastUsedAt: null };
  }

  /** Every token for an owner; one's own tokens for anyone else. */
  async listApiTokens(user: AdminUser): Promise<ApiTokenInfo[]> {
    let query = this.db
      .selectFrom('apiTokens')
      .select(['id', 'name', 'role', 'createdAt', 'lastUsedAt'])
      .orderBy('createdAt', 'desc');
    if (user.role !== 'owner') query = query.where('userId', '=', user.id);
    return (await query.execute()).map((t) => ({ ...t, role: roleOf(t.role) }));
  }

  /** Revokes a token: any for an owner, one's own for anyone else (others' are "not found"). */
  async deleteApiToken(user: AdminUser, id: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      let query = trx.deleteFrom('apiTokens').where('id', '=', id);
      if (user.role !== 'owner') query = query.where('userId', '=', user.id);
      const result = await query.executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound('token not found');
      await recordAudit(trx);
    });
  }

  async listAccounts(): Promise<Account[]> {
    const rows = await this.db.selectFrom('users').selectAll().orderBy('createdAt').orderBy('username').execute();
    return rows.map(toAccount);
  }

  async createAccount(username: string, password: string, role: Role): Promise<Account> {
    const now = nowIso();
    const row: UserRow = {
      id: newId(),
      username,
      passwordHash: await hashPassword(password),
      role,
      disabled: 0,
      totpSecret: null,
      totpEnabled: 0,
      totpLastStep: null,
      recoveryCodes: null,
      createdAt: now,
      updatedAt: now,
    };
    try {
      await this.db.transaction().execute(async (trx) => {
        await trx.insertInto('users').values(row).execute();
        await recordAudit(trx);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw conflict(`username already exists: ${username}`);
      throw err;
    }
    return toAccount(row);
  }

  /**
   * An owner's change to an account. Disabling it or resetting its password ends its sessions; at
   * least one enabled owner always remains.
   */
  async updateAccount(
    id: string,
    change: { role?: Role | undefined; disabled?: boolean | undefined; password?: string | undefined },
  ): Promise<Account> {
    const passwordHash = change.password === undefined ? undefined : await hashPassword(change.password);
    const row = await this.db.transaction().execute(async (trx) => {
      const current = await trx.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
      if (!current) throw notFound(`user not found: ${id}`);
      const stillOwner = (change.role ?? current.role) === 'owner' && !(change.disabled ?? current.disabled === 1);
      if (current.role === 'owner' && current.disabled === 0 && !stillOwner) {
        const owners = await trx
          .selectFrom('users')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('role', '=', 'owner')
          .where('disabled', '=', 0)
          .where('id', '!=', id)
          .executeTakeFirstOrThrow();
        if (Number(owners.n) === 0) throw conflict('at least one enabled owner must remain');
      }
      await trx
        .updateTable('users')
        .set({
          ...(change.role !== undefined ? { role: change.role } : {}),
          ...(change.disabled !== undefined ? { disabled: change.disabled ? 1 : 0 } : {}),
          ...(passwordHash !== undefined ? { passwordHash } : {}),
          updatedAt: nowIso(),
        })
        .where('id', '=', id)
        .execute();
      if (change.disabled === true || passwordHash !== undefined) {
        await trx.deleteFrom('sessions').where('userId', '=', id).execute();
      }
      await recordAudit(trx);
      return trx.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    });
    return toAccount(row);
  }

  /** `GET /api/admin/me`: who is signed in, and whether their account has a second factor on. */
  async me(user: AdminUser): Promise<AdminUser & { totpEnabled: boolean }> {
    const row = await this.db.selectFrom('users').select('totpEnabled').where('id', '=', user.id).executeTakeFirst();
    return { ...user, totpEnabled: row?.totpEnabled === 1 };
  }

  /** Starts (or restarts) enrolment in a second factor: a new pending secret, in force once confirmed. */
  async enrollTotp(user: AdminUser): Promise<{ secret: string; otpauthUrl: string }> {
    const row = await this.db.selectFrom('users').select('totpEnabled').where('id', '=', user.id).executeTakeFirst();
    if (row?.totpEnabled === 1) throw conflict('two-factor authentication is already on; disable it first');
    const enrolment = newTotpSecret(user.username, this.issuer);
    await this.db.transaction().execute(async (trx) => {
      await trx
        .updateTable('users')
        .set({ totpSecret: enrolment.secret, totpLastStep: null, updatedAt: nowIso() })
        .where('id', '=', user.id)
        .execute();
      await recordAudit(trx);
    });
    return enrolment;
  }

  /** Turns the second factor on with a current code; answers the recovery codes (shown once). */
  async confirmTotp(user: AdminUser, code: string): Promise<string[]> {
    const row = await this.db.selectFrom('users').selectAll().where('id', '=', user.id).executeTakeFirstOrThrow();
    if (row.totpEnabled === 1) throw conflict('two-factor authentication is already on');
    if (row.totpSecret === null) throw conflict('start with POST /api/admin/totp/enroll');
    const step = acceptedStep(row.totpSecret, code.trim(), null);
    if (step === null) throw badRequest('body.code: is not the current code of the authenticator app');
    const recovery = newRecoveryCodes();
    await this.db.transaction().execute(async (trx) => {
      await trx
        .updateTable('users')
        .set({
          totpEnabled: 1,
          totpLastStep: step,
          recoveryCodes: JSON.stringify(recovery.hashes),
          updatedAt: nowIso(),
        })
        .where('id', '=', user.id)
        .execute();
      await recordAudit(trx);
    });
    return recovery.codes;
  }

  /** Turns the second factor off, after checking the account's password. */
  async disableTotp(user: AdminUser, password: string): Promise<void> {
    const row = await this.db.selectFrom('users').selectAll().where('id', '=', user.id).executeTakeFirstOrThrow();
    if (!(await verifyPassword(password, row.passwordHash))) throw forbidden('password is wrong');
    await this.db.transaction().execute(async (trx) => {
      await trx
        .updateTable('users')
        .set({ totpSecret: null, totpEnabled: 0, totpLastStep: null, recoveryCodes: null, updatedAt: nowIso() })
        .where('id', '=', user.id)
        .execute();
      await recordAudit(trx);
    });
  }
}

/** A valid hash of a random password, used only to spend equal time on unknown usernames. */
const DUMMY_HASH = await hashPassword(randomBytes(16).toString('hex'));
