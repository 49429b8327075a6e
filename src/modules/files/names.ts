import { sql } from 'kysely';
import type { Db } from '../../db/index.js';
import type { Database } from '../../db/schema.js';
import { filePathFromKey, UPLOADS_PREFIX } from '../../storage/storage.js';

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

/** Keys searched in text at once: SQLite nests a chain of `OR` one level deeper per term (at most 1000). */
const TEXT_BATCH = 100;

/** `LIKE` wildcards in a key (`_`) match more than the key: the text found is then searched for the key itself. */
const containing = (key: string) => `%${filePathFromKey(key)}%`;

/**
 * The keys among `keys` that nothing names: no version, release, delta, addon icon, screenshot,
 * article (cover or text), banner or gallery image. First by the columns that hold a path exactly, then,
 * for the keys left, by searching the text columns.
 */
export async function unnamedKeys(db: Db, keys: readonly string[]): Promise<string[]> {
  if (keys.length === 0) return [];
  const named = new Set<string>();
  const paths = keys.map(filePathFromKey);
  for (const [table, column] of PATH_COLUMNS) {
    const rows = await db.selectFrom(table).select(`${column} as path`).where(column, 'in', paths).execute();
    for (const row of rows) if (row.path !== null) named.add(row.path.slice(UPLOADS_PREFIX.length));
  }
  const deltas = await db.selectFrom('softwareDeltas').select('fileKey').where('fileKey', 'in', keys).execute();
  for (const row of deltas) if (row.fileKey !== null) named.add(row.fileKey);
  const unnamed: string[] = [];
  for (let i = 0; i < keys.length; i += TEXT_BATCH) {
    unnamed.push(
      ...(await notInText(
        db,
        keys.slice(i, i + TEXT_BATCH).filter((key) => !named.has(key)),
      )),
    );
  }
  return unnamed;
}

/** The keys among `keys` that no text column names (TEXT_BATCH keys at most: one `LIKE` per key and column). */
async function notInText(db: Db, keys: readonly string[]): Promise<string[]> {
  let left = [...keys];
  for (const [table, { text, links }] of Object.entries(TEXT_COLUMNS) as [
    TextTable,
    (typeof TEXT_COLUMNS)[TextTable],
  ][]) {
    if (left.length === 0) break;
    const columns = [...text, ...links];
    const refs = columns.map((column) => sql.ref<string | null>(column));
    const texts = await db
      .selectFrom(table)
      .select(refs.map((ref, i) => ref.as(`t${i}`)))
      .where((eb) =>
        eb.or(
          refs.flatMap((ref, i) => {
            const matches = eb.or(left.map((key) => eb(ref, 'like', containing(key))));
            if (i < text.length) return [matches];
            // A bare path was looked up exactly: only other links are searched (a cheap test first).
            const bare = eb.and([
              eb(ref, 'like', `${UPLOADS_PREFIX}%`),
              eb(ref, 'not like', '%?%'),
              eb(ref, 'not like', '%#%'),
            ]);
            return [eb.and([eb.not(bare), matches])];
          }),
        ),
      )
      .execute();
    const found = texts.flatMap((row: Record<string, string | null>) => Object.values(row));
    left = left.filter((key) => !found.some((value) => value?.includes(filePathFromKey(key))));
  }
  return left;
}
