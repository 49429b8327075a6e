import { Type } from 'typebox';
import { NullableString } from './schemas.js';
import { keyFromFilePath, UPLOADS_PREFIX } from '../storage/storage.js';

/*
 * Links that the service stores and later hands to browsers (`src`, `href`) or puts in a `Location`
 * header. They are checked once, at the schema layer, with two JSON Schema formats that every route
 * shares: a value that passes is safe to place in HTML attributes and headers as it is.
 */

/**
 * Characters that never pass: whitespace, control characters, and what would close or escape an
 * HTML attribute (`"` `'` `<` `>` `` ` ``) or confuse URL parsers (`\`). `new URL()` silently drops
 * or re-encodes several of them, which is why the raw string is checked before it is parsed.
 */
// eslint-disable-next-line no-control-regex
const UNSAFE_CHARACTER = /[\s\u0000-\u001f\u007f"'<>`\\]/u;

/** `http(s)://host…` written out in full (not `http:host`), without credentials. */
export function isHttpUrl(value: string): boolean {
  if (UNSAFE_CHARACTER.test(value) || !/^https?:\/\/[^/]/i.test(value)) return false;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  return (
    (url.protocol === 'http:' || url.protocol === 'https:') &&
    url.hostname !== '' &&
    url.username === '' &&
    url.password === ''
  );
}

/** The normalised form of a URL that `isHttpUrl` accepts; null for anything else. */
export function canonicalHttpUrl(value: string): string | null {
  return isHttpUrl(value) ? new URL(value).href : null;
}

/**
 * An image the website may put in `src` or `href`: an http(s) URL, or a reference without a scheme
 * (a path of the store such as `/uploads/…`, or of the site). Any other scheme (`javascript:`,
 * `data:`) fails, and so does `&` outside http(s) URLs: HTML decodes `&colon;` and `&#106;` in
 * attribute values before the browser parses the URL. Empty means "no image".
 */
export function isImageRef(value: string): boolean {
  if (value === '') return true;
  if (UNSAFE_CHARACTER.test(value)) return false;
  if (/^[a-z][a-z0-9+.-]*:/i.test(value)) return isHttpUrl(value);
  if (value.startsWith('//') || value.includes('&')) return false;
  return !value.startsWith(UPLOADS_PREFIX) || keyFromFilePath(value) !== null;
}

/** The formats, for the validator (registered once in `buildApp`); empty values mean "none". */
export const URL_FORMATS = { 'http-url': (v: string) => v === '' || isHttpUrl(v), 'image-ref': isImageRef } as const;

/** What a failed format check says, after the field's name. */
export const FORMAT_MESSAGES: Readonly<Record<string, string>> = {
  'http-url': 'must be an absolute http(s) URL (https://host/…) without spaces, control characters or credentials',
  'image-ref': 'must be an http(s) URL or a path such as /uploads/…, without spaces, quotes, & or other schemes',
};

export const MAX_URL = 2048;

/** A download link: an absolute http(s) URL, or null or empty for none. */
export const NullableHttpUrl = () => NullableString({ maxLength: MAX_URL, format: 'http-url' });

/** An image: an http(s) URL or a path of the store; `minLength: 1` where an image is required. */
export const ImageRef = (options: { minLength?: number; description?: string } = {}) =>
  Type.String({ maxLength: MAX_URL, format: 'image-ref', ...options });

/** An optional image: as `ImageRef`, or null. */
export const NullableImageRef = () => NullableString({ maxLength: MAX_URL, format: 'image-ref' });
