import type { Db } from '../../db/index.js';
import { publishedBy } from '../../db/published.js';
import type { ArticleRow, BannerRow, GalleryRow } from '../../db/schema.js';

/** Articles newest first; `at` (ISO 8601) hides those scheduled after it, null (administrators) shows them. */
export function listArticles(
  db: Db,
  publishedOnly: boolean,
  limit: number | undefined,
  at: string | null,
): Promise<ArticleRow[]> {
  let query = db.selectFrom('articles').selectAll();
  if (publishedOnly) query = query.where('published', '=', 1);
  if (at !== null) query = query.where(publishedBy(at));
  query = query.orderBy('createdAt', 'desc').orderBy('id', 'desc');
  if (limit !== undefined) query = query.limit(limit);
  return query.execute();
}

export function findArticle(db: Db, idOrSlug: string): Promise<ArticleRow | undefined> {
  return db
    .selectFrom('articles')
    .selectAll()
    .where((eb) => eb.or([eb('id', '=', idOrSlug), eb('slug', '=', idOrSlug)]))
    .executeTakeFirst();
}

export function findArticleById(db: Db, id: string): Promise<ArticleRow | undefined> {
  return db.selectFrom('articles').selectAll().where('id', '=', id).executeTakeFirst();
}

export function findArticleBySlug(db: Db, slug: string): Promise<ArticleRow | undefined> {
  return db.selectFrom('articles').selectAll().where('slug', '=', slug).executeTakeFirst();
}

export function listBanners(db: Db, enabledOnly: boolean): Promise<BannerRow[]> {
  let query = db.selectFrom('banners').selectAll();
  if (enabledOnly) query = query.where('enabled', '=', 1);
  return query.orderBy('sortOrder', 'asc').orderBy('createdAt', 'asc').orderBy('id').execute();
}

export function findBanner(db: Db, id: string): Promise<BannerRow | undefined> {
  return db.selectFrom('banners').selectAll().where('id', '=', id).executeTakeFirst();
}

export function listGallery(db: Db, enabledOnly: boolean): Promise<GalleryRow[]> {
  let query = db.selectFrom('galleryImages').selectAll();
  if (enabledOnly) query = query.where('enabled', '=', 1);
  return query.orderBy('sortOrder', 'asc').orderBy('createdAt', 'asc').orderBy('id').execute();
}

export function findGalleryImage(db: Db, id: string): Promise<GalleryRow | undefined> {
  return db.selectFrom('galleryImages').selectAll().where('id', '=', id).executeTakeFirst();
}
