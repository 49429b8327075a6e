import { sql } from 'kysely';
import type { Db } from '../../db/index.js';
import type { Database } from '../../db/schema.js';
import { filePathFromKey, KEY_MAX_LENGTH, NOT_IN_KEY, UPLOADS_PREFIX } from '../../storage/storage.js';

/** Columns that hold a stored file's public path (`/uploads/…`) exactly, as the service writes it. */
const PATH_COLUMNS = [
  ['softwareVersions', 'filePath'],
  ['releases', 'filePath'],
  ['addons', 'iconUrl'],
  ['screenshots', 'imageUrl'],
  ['articles', 'coverImage'],
  ['banners', 'imageUrl'],
  ['galleryImages', 'imageUrl'],
] as const satisfies readonly (readonly [keyof Database, string])[];

/**
 * Text that may name a stored file anywhere inside it: Markdown (an image in an article or an
 * addon's description), and links (absolute URLs of the service's own `/uploads/…`, or a path with a
 * query). `links` hold a bare `/uploads/…` path in most rows, which the exact lookups answered.
 */
const TEXT_COLUMNS: Readonly<Record<TextTable, { text: readonly string[]; links: readonly string[] }>> = {
  articles: { text: ['contentZh', 'contentEn', 'summaryZh', 'summaryEn'], links: ['coverImage'] },
  addons: { text: ['descriptionZh', 'descriptionEn'], links: ['iconUrl'] },
  softwarePackages: { text: ['descriptionZh', 'descriptionEn'], links: [] },
  softwareVersions: { text: ['changelogZh', 'changelogEn'], links: ['externalUrl'] },
  releases: { text: ['changelogZh', 'changelogEn'], links: ['externalUrl'] },
  screenshots: { text: [], links: ['imageUrl'] },
  banners: { text: [], links: ['imageUrl'] },
  galleryImages: { text: [], links: ['imageUrl'] },
};
type TextTable =
  | 'articles'
  | 'addons'
  | 'softwarePackages'
  | 'softwareVersions'
  | 'releases'
  | 'screenshots'
  | 'banners'
  | 'galleryImages';

/** Whether a stored file's key is written in the text columns (see `textNames`). */
export type TextNames = (key: string) => boolean;

/**
 * The keys among `keys` that nothing names: no version, release, delta, addon icon, screenshot,
 * article (cover or text), banner or gallery image. First by the columns that hold a path exactly
 * (indexed), then, for the keys left, by the text columns (`inText`: read now, or once for many keys).
 */
export async function unnamedKeys(db: Db, keys: readonly string[], inText?: TextNames): Promise<string[]> {
  if (keys.length === 0) return [];
  const named = new Set<string>();
  const paths = keys.map(filePathFromKey);
  for (const [table, column] of PATH_COLUMNS) {
    const rows = await db.selectFrom(table).select(`${column} as path`).where(column, 'in', paths).execute();
    for (const row of rows) if (row.path !== null) named.add(row.path.slice(UPLOADS_PREFIX.length));
  }
  const deltas = await db.selectFrom('softwareDeltas').select('fileKey').where('fileKey', 'in', keys).execute();
  for (const row of deltas) if (row.fileKey !== null) named.add(row.fileKey);
  const left = keys.filter((key) => !named.has(key));
  if (left.length === 0) return [];
  const written = inText ?? (await textNames(db));
  return left.filter((key) => !written(key));
}

/**
 * Reads the text columns once and answers, for any number of keys, whether the text holds
 * `/uploads/<key>` anywhere: for each `/uploads/` written in a text (or in a link that is not a bare
 * path, which the exact lookups answer), what follows it as far as a key could reach, sorted; a key is
 * written where it begins one of them. Only the rows that hold `/uploads/` are read, and memory is one
 * short string for each `/uploads/` in them, not one for each row or stored file.
 */
export async function textNames(db: Db): Promise<TextNames> {
  const tails: string[] = [];
  for (const [table, { text, links }] of Object.entries(TEXT_COLUMNS) as [
    TextTable,
    (typeof TEXT_COLUMNS)[TextTable],
  ][]) {
    const values = [
      ...text.map((column) => sql.ref<string | null>(column)),
      // A bare path was looked up exactly: only other links are read (null in place of a bare one).
      ...links.map((column) => {
        const ref = sql.ref<string | null>(column);
        return sql<
          string | null
        >`case when ${ref} like ${`${UPLOADS_PREFIX}%`} and ${ref} not like ${'%?%'} and ${ref} not like ${'%#%'} then null else ${ref} end`;
      }),
    ];
    const rows = await db
      .selectFrom(table)
      .select(values.map((value, i) => value.as(`t${i}`)))
      .where((eb) => eb.or(values.map((value) => eb(value, 'like', `%${UPLOADS_PREFIX}%`))))
      .execute();
    for (const row of rows as Record<string, string | null>[]) {
      for (const value of Object.values(row)) if (value !== null) tails.push(...keysFollowing(value));
    }
  }
  tails.sort();
  return (key) => {
    // The tails that begin with `key` come first among those not before it.
    let [low, high] = [0, tails.length];
    while (low < high) {
      const middle = (low + high) >>> 1;
      if ((tails[middle] ?? '') < key) low = middle + 1;
      else high = middle;
    }
    return tails[low]?.startsWith(key) ?? false;
  };
}

/** What follows each `/uploads/` in `text`, as far as a key could reach. */
function keysFollowing(text: string): string[] {
  const tails: string[] = [];
  for (let at = text.indexOf(UPLOADS_PREFIX); at !== -1; at = text.indexOf(UPLOADS_PREFIX, at + 1)) {
    const tail = text.slice(at + UPLOADS_PREFIX.length, at + UPLOADS_PREFIX.length + KEY_MAX_LENGTH);
    const end = tail.search(NOT_IN_KEY);
    tails.push(end === -1 ? tail : tail.slice(0, end));
  }
  return tails;
}
