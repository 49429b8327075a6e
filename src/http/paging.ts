import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { Db } from '../db/index.js';
import { serverSecret } from '../db/secrets.js';
import { badRequest } from './errors.js';

/** Where a page ends in an ordered list: the last item's sort value and id (a keyset position). */
export interface Position {
  readonly key: string | number;
  readonly id: string;
}

/**
 * A list in the order of one query, with how to read an item's position. `descending`: larger sort
 * values first; ties are broken by id (ascending unless `idsDescending`), so every position is unique.
 */
export interface Ordered<T> {
  readonly items: readonly T[];
  readonly descending: boolean;
  readonly idsDescending?: boolean;
  position(item: T): Position;
}

export interface PageRequest {
  readonly limit: number;
  /** The position after which the page starts, or null for the first page. */
  readonly after: Position | null;
}

/** Items on a page unless `limit` says otherwise (`limit` without a cursor, or a cursor carries it). */
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;

function compare(a: Position, b: Position, order: Pick<Ordered<unknown>, 'descending' | 'idsDescending'>): number {
  if (a.key !== b.key) {
    const before = a.key < b.key ? -1 : 1;
    return order.descending ? -before : before;
  }
  const before = a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  return order.idsDescending === true ? -before : before;
}

/**
 * One page of `ordered`: the items strictly after `after`, found by binary search, so a page costs
 * the same wherever it is; an item added or removed between two requests moves no other item to
 * another page (unlike an offset).
 */
export function pageOf<T>(ordered: Ordered<T>, request: PageRequest): { items: T[]; next: Position | null } {
  const { items } = ordered;
  let start = 0;
  const { after } = request;
  if (after !== null) {
    let high = items.length;
    while (start < high) {
      const mid = (start + high) >>> 1;
      if (compare(ordered.position(items[mid] as T), after, ordered) <= 0) start = mid + 1;
      else high = mid;
    }
  }
  const page = items.slice(start, start + request.limit);
  const last = page.at(-1);
  const more = start + request.limit < items.length;
  return { items: page, next: more && last !== undefined ? ordered.position(last) : null };
}

interface CursorPayload {
  /** The query the cursor belongs to (a hash of its scope). */
  q: string;
  k: string | number;
  i: string;
  l: number;
}

/**
 * Opaque cursors: the position and page size, bound to one query, with an HMAC-SHA256 tag under a
 * key every instance shares, so a cursor changed by hand, or used with another query, is refused.
 */
export class Cursors {
  constructor(private readonly key: Buffer) {}

  private tag(payload: string): Buffer {
    return createHmac('sha256', this.key).update(payload).digest().subarray(0, 16);
  }

  private static scopeHash(scope: string): string {
    return createHash('sha256').update(scope).digest('base64url').slice(0, 16);
  }

  encode(scope: string, position: Position, limit: number): string {
    const payload: CursorPayload = { q: Cursors.scopeHash(scope), k: position.key, i: position.id, l: limit };
    const text = Buffer.from(JSON.stringify(payload)).toString('base64url');
    return `${text}.${this.tag(text).toString('base64url')}`;
  }

  /** The page a cursor asks for; 400 naming `cursor` when it is not one this service gave for `scope`. */
  decode(scope: string, cursor: string): PageRequest {
    const [text = '', tag = '', ...rest] = cursor.split('.');
    const given = Buffer.from(tag, 'base64url');
    const expected = this.tag(text);
    if (rest.length > 0 || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw badRequest('querystring/cursor is not a cursor of this service');
    }
    const payload = JSON.parse(Buffer.from(text, 'base64url').toString()) as CursorPayload;
    if (payload.q !== Cursors.scopeHash(scope)) {
      throw badRequest('querystring/cursor belongs to another query (its filter, sort or language differ)');
    }
    return { limit: payload.l, after: { key: payload.k, id: payload.i } };
  }

  /**
   * The page a request asks for: the first (`limit`, else `defaultLimit`, items) without a cursor;
   * else the cursor's, with `limit` instead of the cursor's own when given.
   */
  request(scope: string, cursor: string | undefined, limit: number | undefined, defaultLimit: number): PageRequest {
    if (cursor === undefined) return { limit: limit ?? defaultLimit, after: null };
    const asked = this.decode(scope, cursor);
    return limit === undefined ? asked : { ...asked, limit };
  }
}

/**
 * The cursors under the key named `name` that every instance shares (see `serverSecret`): read once,
 * and again after a failure.
 */
export function sharedCursors(db: Db, name: string): () => Promise<Cursors> {
  let cursors: Promise<Cursors> | null = null;
  return () => {
    cursors ??= serverSecret(db, name).then((key) => new Cursors(key));
    void cursors.catch(() => (cursors = null));
    return cursors;
  };
}

/**
 * The `Link` header of the next page: `url` (a request's path and query) with `cursor` set, under
 * `base` (see `baseUrl`).
 */
export function nextPageLink(base: string, url: string, cursor: string): string {
  const next = new URL(`${base}${url}`);
  next.searchParams.set('cursor', cursor);
  return `<${next.href}>; rel="next"`;
}
