/**
 * Administrator roles: an `owner` may do everything (accounts, keys, audit); a `publisher` ships
 * software, rollouts, addons and releases; an `editor` writes articles, banners and gallery. Both
 * of the latter upload files. Reads of the admin API are open to every role unless a route says so.
 */
export const ROLES = ['owner', 'publisher', 'editor'] as const;
export type Role = (typeof ROLES)[number];

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

/** Whether `holder` may act as `role`: an owner as anyone, everyone else only as itself. */
export function covers(holder: Role, role: Role): boolean {
  return holder === 'owner' || holder === role;
}

/**
 * What an API token may do: its own role while its creator still covers it, else the creator's
 * current role (a token never outranks the account behind it, even after a demotion).
 */
export function tokenRole(creator: Role, token: Role): Role {
  return covers(creator, token) ? token : creator;
}

/** Whether `role` may make changes in a module whose writers are `writers` (owners always may). */
export function mayWrite(role: Role, writers: readonly Role[]): boolean {
  return role === 'owner' || writers.includes(role);
}
