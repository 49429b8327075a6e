import { type RawBuilder, sql } from 'kysely';

/**
 * Where-clause of rows published at `at` (ISO 8601 UTC): `publish_at` null or not after it. For the
 * tables that schedule (versions, releases, articles); in a join, `column` names the table's
 * (`releases.publishAt`).
 */
export function publishedBy(at: string, column?: `${string}.publishAt`): RawBuilder<boolean> {
  const ref = column === undefined ? sql.ref('publish_at') : sql.ref(column.replace('.publishAt', '.publish_at'));
  return sql<boolean>`(${ref} is null or ${ref} <= ${at})`;
}
