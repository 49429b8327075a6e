import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyInstance, FastifyRequest, onRequestHookHandler, onSendHookHandler } from 'fastify';
import type { Db } from '../../db/index.js';
import { newId, nowIso } from '../../domain/clock.js';
import type { Position } from '../../http/paging.js';
import { addRouteHooks, changesState } from '../../http/route-hooks.js';

/*
 * The audit log: every administrator change (and login, logout, failed login) with when, who
 * (account, or account and token name), from where, what (method and route), the target and the
 * fields sent, secrets never. Each change's record is written in the change's own transaction, from
 * the request it runs in (an AsyncLocalStorage context opened for every request that changes
 * something), so there is no change without its record.
 */

/** Fields whose values never reach the log. */
const SECRET_FIELDS: ReadonlySet<string> = new Set([
  'password',
  'currentPassword',
  'newPassword',
  'token',
  'totp',
  'code',
  'secret',
]);
/** Long texts (article bodies) are kept short in the log. */
const MAX_VALUE_CHARS = 200;
/** A record's fields, as JSON, never take more than this; values past it are replaced by TRUNCATED. */
export const MAX_CHANGES_CHARS = 16 * 1024;
/** What a value stands for when keeping it would take the record past MAX_CHANGES_CHARS. */
const TRUNCATED = { truncated: true } as const;
const TRUNCATED_CHARS = JSON.stringify(TRUNCATED).length;

interface AuditScope {
  readonly request: FastifyRequest;
  /** The id of this request's record once written (a create's target id is filled in afterwards). */
  recordId: string | null;
}

const scopes = new AsyncLocalStorage<AuditScope>();

const LOGIN_URL = '/api/admin/login';

/** The body fields the route's schema declares (none when it declares no body). */
function declaredFields(request: FastifyRequest): Readonly<Record<string, unknown>> {
  const body = request.routeOptions.schema?.body as { properties?: Record<string, unknown> } | undefined;
  return body?.properties ?? {};
}

/**
 * The fields sent, as the record's JSON: only those `declared` by the route's schema (a route
 * without a body keeps nothing of what was sent), secrets replaced, long texts cut, and values kept
 * in order while the record stays within MAX_CHANGES_CHARS, each one past it stored as
 * `{"truncated": true}` (the record alone, should even the field names not fit).
 */
export function auditChanges(body: unknown, declared: Readonly<Record<string, unknown>>): string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return '{}';
  const fields: Array<[string, unknown, number]> = [];
  // Every field first counted as truncated, so that the bound holds whatever is kept.
  let chars = 1;
  for (const [key, sent] of Object.entries(body)) {
    if (!Object.hasOwn(declared, key)) continue;
    const value = SECRET_FIELDS.has(key)
      ? '(secret)'
      : typeof sent === 'string' && sent.length > MAX_VALUE_CHARS
        ? `${sent.slice(0, MAX_VALUE_CHARS)}…`
        : sent;
    fields.push([key, value, (JSON.stringify(value) ?? 'null').length]);
    chars += JSON.stringify(key).length + 2 + TRUNCATED_CHARS;
  }
  if (chars > MAX_CHANGES_CHARS) return JSON.stringify(TRUNCATED);
  const changes: Record<string, unknown> = {};
  for (const [key, value, size] of fields) {
    const more = size - TRUNCATED_CHARS;
    const kept = more <= 0 || chars + more <= MAX_CHANGES_CHARS;
    if (kept) chars += Math.max(more, 0);
    changes[key] = kept ? value : TRUNCATED;
  }
  return JSON.stringify(changes);
}

/** `/api/software/versions/:versionId/revoke` → target type `versions`, id from `versionId`. */
function targetOf(request: FastifyRequest): { type: string; id: string | null } {
  const route = request.routeOptions.url ?? request.url;
  const segments = route.split('/').filter((s) => s !== '' && s !== 'api' && s !== 'admin');
  const param = segments.findIndex((s) => s.startsWith(':'));
  const type = param > 0 ? (segments[param - 1] ?? '') : (segments[0] ?? '');
  const params = (request.params ?? {}) as Record<string, string>;
  const name = param >= 0 ? segments[param]?.slice(1) : undefined;
  return { type, id: name !== undefined ? (params[name] ?? null) : null };
}

export interface AuditEvent {
  /** Defaults to `METHOD /route`. */
  action?: string;
  /** Defaults to the authenticated administrator; a login names the account it tried. */
  actor?: string;
  /** Defaults to what the route names (e.g. `versions` and the `:versionId` parameter). */
  target?: { type: string; id: string };
}

/**
 * Writes the record of the current request's change with `trx` (the change's transaction). Outside
 * a request that changes something (a timer, a test calling a service), nothing is recorded.
 */
export async function recordAudit(trx: Db, event: AuditEvent = {}): Promise<void> {
  const scope = scopes.getStore();
  if (scope === undefined) return;
  const { request } = scope;
  const admin = request.admin;
  const actor = event.actor ?? (admin === null ? 'anonymous' : admin.username);
  const target = event.target ?? targetOf(request);
  const id = newId();
  await trx
    .insertInto('auditLog')
    .values({
      id,
      at: nowIso(),
      actor,
      tokenName: admin?.tokenName ?? null,
      ip: request.ip,
      action: event.action ?? `${request.method} ${request.routeOptions.url ?? request.url}`,
      targetType: target.type,
      targetId: target.id,
      changes: auditChanges(request.body, declaredFields(request)),
    })
    .execute();
  scope.recordId = id;
}

/** Requests inside an audit scope now (in every app of the process: the context is the process's). */
const scoped = new WeakSet<FastifyRequest>();
let inScope = 0;

/**
 * A request's scope ends with its answer (sent or cut off). With none left open the context is
 * switched off: while an AsyncLocalStorage is on, Node tracks every promise of the process, which
 * costs the launchers' reads a few per cent though they never open one.
 */
function leave(request: FastifyRequest): void {
  if (!scoped.delete(request)) return;
  inScope -= 1;
  if (inScope === 0) scopes.disable();
}

/**
 * Opens the audit scope of every request that may change something, and fills in the target id of
 * a create (201) from its answer once it is known. The hooks go only on routes of unsafe methods:
 * a read costs nothing here, not even the hooks' turns.
 */
export function installAudit(app: FastifyInstance, db: Db): void {
  const open: onRequestHookHandler = (request, reply, done) => {
    // Changes need a session or token, except a login; launchers' heartbeats carry neither.
    const credentials =
      request.headers.cookie !== undefined ||
      request.headers.authorization !== undefined ||
      request.url.startsWith(LOGIN_URL);
    if (!credentials) return done();
    scoped.add(request);
    inScope += 1;
    // 'close' comes once the answer is sent and also when the client went away midway.
    reply.raw.once('close', () => leave(request));
    scopes.run({ request, recordId: null }, done);
  };
  const fillTarget: onSendHookHandler = (request, reply, payload, done) => {
    const scope = scoped.has(request) ? scopes.getStore() : undefined;
    if (scope?.recordId == null || reply.statusCode !== 201 || typeof payload !== 'string') return done(null, payload);
    const id = (JSON.parse(payload) as { id?: unknown }).id;
    if (typeof id !== 'string') return done(null, payload);
    db.updateTable('auditLog')
      .set({ targetId: id })
      .where('id', '=', scope.recordId)
      .where('targetId', 'is', null)
      .execute()
      .then(
        () => done(null, payload),
        (err: Error) => done(err),
      );
  };
  addRouteHooks(app, (route) => (changesState(route) ? { onRequest: open, onSend: fillTarget } : null));
}

/** Whether the audit context is on (tests: it is off once no change is in flight). */
export const auditContextOpen = (): boolean => inScope > 0;

export interface AuditQuery {
  limit: number;
  /** The record (its time and id) after which the page starts, or null for the first page. */
  after: Position | null;
  before: string | null;
  actor: string | null;
  target: string | null;
}

/**
 * Newest first, ties by id (largest first), so every record has its own position and a page starts
 * exactly after the last one of the page before (`after`, from a cursor), however many records share
 * its millisecond; `before` pages by time, `actor` by account, `target` by target id or type. `next`:
 * the position of the page's last record when more follow.
 */
export async function readAudit(db: Db, query: AuditQuery) {
  let q = db
    .selectFrom('auditLog')
    .selectAll()
    .orderBy('at', 'desc')
    .orderBy('id', 'desc')
    .limit(query.limit + 1);
  const { after, before, actor, target } = query;
  if (after !== null) q = q.where((eb) => eb(eb.refTuple('at', 'id'), '<', eb.tuple(String(after.key), after.id)));
  if (before !== null) q = q.where('at', '<', before);
  if (actor !== null) q = q.where('actor', '=', actor);
  if (target !== null) q = q.where((eb) => eb.or([eb('targetId', '=', target), eb('targetType', '=', target)]));
  const rows = await q.execute();
  const records = rows
    .slice(0, query.limit)
    .map((row) => ({ ...row, changes: JSON.parse(row.changes) as Record<string, unknown> }));
  const last = records.at(-1);
  const next: Position | null = rows.length > query.limit && last !== undefined ? { key: last.at, id: last.id } : null;
  return { records, next };
}
