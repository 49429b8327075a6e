import type { Static } from 'typebox';
import type { ArticleRow, BannerRow, GalleryRow } from '../../db/schema.js';
import { type Lang, localize } from '../../domain/lang.js';
import type { ArticleSchema, BannerSchema, GalleryImageSchema } from './schemas.js';

export type Article = Static<typeof ArticleSchema>;
export type Banner = Static<typeof BannerSchema>;
export type GalleryImage = Static<typeof GalleryImageSchema>;

/** An article; `content` is Markdown, stored and returned as written. */
export function toArticle(row: ArticleRow, lang: Lang): Article {
  return {
    id: row.id,
    slug: row.slug,
    ...localize('title', row.titleZh, row.titleEn, lang),
    ...localize('summary', row.summaryZh, row.summaryEn, lang),
    ...localize('content', row.contentZh, row.contentEn, lang),
    coverImage: row.coverImage,
    published: row.published === 1,
    publishAt: row.publishAt,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    lang,
  };
}

/** Banners carry no translatable text. */
export function toBanner(row: BannerRow): Banner {
  return {
    id: row.id,
    imageUrl: row.imageUrl,
    sortOrder: row.sortOrder,
    enabled: row.enabled === 1,
    createdAt: row.createdAt,
  };
}

export function toGalleryImage(row: GalleryRow, lang: Lang): GalleryImage {
  return {
    id: row.id,
    imageUrl: row.imageUrl,
    ...localize('title', row.titleZh, row.titleEn, lang),
    sortOrder: row.sortOrder,
    enabled: row.enabled === 1,
    createdAt: row.createdAt,
    lang,
  };
}
