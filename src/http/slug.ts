import { Type } from 'typebox';
import { badRequest } from './errors.js';

export const SLUG_PATTERN = '^[a-z0-9][a-z0-9._-]{0,63}$';
const SLUG_RE = new RegExp(SLUG_PATTERN);

/** Path segments under `/api/software/` that a package slug may not take. */
export const RESERVED_SOFTWARE_SLUGS: ReadonlySet<string> = new Set([
  'check-update',
  'latest',
  'changelog',
  'download',
  'versions',
]);

export const SlugBody = Type.String({
  description: '1–64 characters of a-z 0-9 . _ -, starting with a letter or digit',
});

export function checkSlug(slug: string, reserved: ReadonlySet<string> = new Set()): string {
  if (!SLUG_RE.test(slug)) {
    throw badRequest('body.slug: must be 1–64 characters of a-z 0-9 . _ -, starting with a letter or digit');
  }
  if (reserved.has(slug)) throw badRequest(`body.slug: "${slug}" is reserved`);
  return slug;
}
