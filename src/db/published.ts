import { type RawBuilder, sql } from 'kysely';

/**
 * Where-clause of rows published at `at` (ISO 8601 UTC): `publish_at` null or not after it. For the
 * tables that schedule (versions, releases, articles), in queries on one table.
 */
export function publishedBy(at: string): RawBuilder<boolean> {
  return sql<boolean>`(publish_at is null or publish_at <= ${at})`;
}
