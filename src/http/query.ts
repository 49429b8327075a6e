import { badRequest } from './errors.js';

/** An optional integer query value: `fallback` when absent, a 400 naming `name` when malformed. */
export function integerQuery(value: string | undefined, name: string, fallback: number, min = 0): number {
  if (value === undefined || value === '') return fallback;
  if (!/^-?\d+$/.test(value.trim())) throw badRequest(`querystring.${name}: must be an integer`);
  const parsed = Number(value.trim());
  if (!Number.isSafeInteger(parsed) || parsed < min) {
    throw badRequest(`querystring.${name}: must be an integer of at least ${min}`);
  }
  return parsed;
}
