import type { Static } from 'typebox';
import type { AppContext } from '../../context.js';
import type { ArticleRow, BannerRow, GalleryRow } from '../../db/schema.js';
import { newId, now, nowIso } from '../../domain/clock.js';
import type { Lang } from '../../domain/lang.js';
import { isPublished } from '../../domain/rollout.js';
import { bilingualColumns, bilingualWrite, requiredBilingual, requiredBilingualColumns } from '../../http/bilingual.js';
import { conflict, notFound } from '../../http/errors.js';
import { publishAtColumn } from '../../http/schemas.js';
import { checkSlug } from '../../http/slug.js';
import { type Article, type Banner, type GalleryImage, toArticle, toBanner, toGalleryImage } from './mapper.js';
import * as repo from './repository.js';
import type { Db } from '../../db/index.js';
import { newlyPublished, recordEvent } from '../webhooks/events.js';
import type {
  ArticleCreateBody,
  ArticleUpdateBody,
  BannerCreateBody,
  BannerUpdateBody,
  GalleryCreateBody,
  GalleryUpdateBody,
} from './schemas.js';

/** Articles, banners and gallery images: small lists, read from the content cache until the next write. */
/** The `article.published` webhook event of an article (due at its `publishAt` when that is later). */
function recordArticle(trx: Db, row: ArticleRow): Promise<void> {
  return recordEvent(
    trx,
    'article.published',
    { id: row.id, title: row.titleEn || row.titleZh, text: row.summaryEn || row.summaryZh },
    { id: row.id, slug: row.slug, titleZh: row.titleZh, titleEn: row.titleEn, publishAt: row.publishAt },
    row.publishAt,
  );
}

export class ContentService {
  constructor(private readonly ctx: AppContext) {}

  private get db() {
    return this.ctx.db;
  }

  /* ---------- articles ---------- */

  /** Public articles (scheduled ones hidden until their time), cached until the next write or publication. */
  async articles(publishedOnly: boolean, limit: number | undefined, lang: Lang): Promise<Article[]> {
    const rows = await this.ctx.cache.get(`articles:${publishedOnly}:${limit ?? ''}`, () =>
      repo.listArticles(this.db, publishedOnly, limit, nowIso()),
    );
    return rows.map((r) => toArticle(r, lang));
  }

  /** Every article, drafts and scheduled ones included (the console). */
  async allArticles(lang: Lang): Promise<Article[]> {
    return (await repo.listArticles(this.db, false, undefined, null)).map((r) => toArticle(r, lang));
  }

  async article(idOrSlug: string, lang: Lang): Promise<Article> {
    const row = await this.ctx.cache.get(`article:${idOrSlug}`, async () => {
      const found = await repo.findArticle(this.db, idOrSlug);
      return found && isPublished(found.publishAt, now()) ? found : null;
    });
    if (!row) throw notFound(`article not found: ${idOrSlug}`);
    return toArticle(row, lang);
  }

  async createArticle(body: Static<typeof ArticleCreateBody>, lang: Lang): Promise<Article> {
    const slug = checkSlug(body.slug);
    const title = requiredBilingual(body, 'title');
    const summary = bilingualWrite(body, 'summary');
    const content = bilingualWrite(body, 'content');
    const now = nowIso();
    const row: ArticleRow = {
      id: newId(),
      slug,
      titleZh: title.zh,
      titleEn: title.en,
      summaryZh: summary.zh ?? '',
      summaryEn: summary.en ?? '',
      contentZh: content.zh ?? '',
      contentEn: content.en ?? '',
      coverImage: body.coverImage ?? '',
      published: body.published === false ? 0 : 1,
      createdAt: now,
      updatedAt: now,
      publishAt: publishAtColumn(body.publishAt),
    };
    await this.ctx.cache.commit(async (trx) => {
      if (await repo.findArticleBySlug(trx, slug)) throw conflict(`slug already exists: ${slug}`);
      await trx.insertInto('articles').values(row).execute();
      if (row.published === 1) await recordArticle(trx, row);
    });
    return toArticle(row, lang);
  }

  async updateArticle(id: string, body: Static<typeof ArticleUpdateBody>, lang: Lang): Promise<Article> {
    const titleColumns = requiredBilingualColumns(body, 'title');
    const slug = body.slug === undefined ? undefined : checkSlug(body.slug);
    const row = await this.ctx.cache.commit(async (trx) => {
      const before = await repo.findArticleById(trx, id);
      if (!before) throw notFound(`article not found: ${id}`);
      if (slug !== undefined) {
        const other = await repo.findArticleBySlug(trx, slug);
        if (other && other.id !== id) throw conflict(`slug already exists: ${slug}`);
      }
      await trx
        .updateTable('articles')
        .set({
          ...(slug !== undefined ? { slug } : {}),
          ...titleColumns,
          ...bilingualColumns(body, 'summary'),
          ...bilingualColumns(body, 'content'),
          ...(body.coverImage !== undefined ? { coverImage: body.coverImage } : {}),
          ...(body.published !== undefined ? { published: body.published ? 1 : 0 } : {}),
          ...(body.publishAt !== undefined ? { publishAt: publishAtColumn(body.publishAt) } : {}),
          updatedAt: nowIso(),
        })
        .where('id', '=', id)
        .execute();
      const after = await repo.findArticleById(trx, id);
      // Published now or later where it was not: a draft made public, or a new publication time.
      if (after?.published === 1 && (before.published === 0 || newlyPublished(before.publishAt, after.publishAt))) {
        await recordArticle(trx, after);
      }
      return after;
    });
    if (!row) throw notFound(`article not found: ${id}`);
    return toArticle(row, lang);
  }

  async deleteArticle(id: string): Promise<void> {
    await this.ctx.cache.commit(async (trx) => {
      const result = await trx.deleteFrom('articles').where('id', '=', id).executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound(`article not found: ${id}`);
    });
  }

  /* ---------- banners ---------- */

  async banners(enabledOnly: boolean): Promise<Banner[]> {
    const rows = await this.ctx.cache.get(`banners:${enabledOnly}`, () => repo.listBanners(this.db, enabledOnly));
    return rows.map(toBanner);
  }

  async createBanner(body: Static<typeof BannerCreateBody>): Promise<Banner> {
    const row: BannerRow = {
      id: newId(),
      imageUrl: body.imageUrl,
      sortOrder: body.sortOrder ?? 0,
      enabled: body.enabled === false ? 0 : 1,
      createdAt: nowIso(),
    };
    await this.ctx.cache.commit((trx) => trx.insertInto('banners').values(row).execute());
    return toBanner(row);
  }

  async updateBanner(id: string, body: Static<typeof BannerUpdateBody>): Promise<Banner> {
    const row = await this.ctx.cache.commit(async (trx) => {
      if (!(await repo.findBanner(trx, id))) throw notFound(`banner not found: ${id}`);
      const fields = {
        ...(body.imageUrl !== undefined ? { imageUrl: body.imageUrl } : {}),
        ...(body.sortOrder !== undefined ? { sortOrder: body.sortOrder } : {}),
        ...(body.enabled !== undefined ? { enabled: body.enabled ? 1 : 0 } : {}),
      };
      if (Object.keys(fields).length > 0) await trx.updateTable('banners').set(fields).where('id', '=', id).execute();
      return repo.findBanner(trx, id);
    });
    if (!row) throw notFound(`banner not found: ${id}`);
    return toBanner(row);
  }

  async deleteBanner(id: string): Promise<void> {
    await this.ctx.cache.commit(async (trx) => {
      const result = await trx.deleteFrom('banners').where('id', '=', id).executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound(`banner not found: ${id}`);
    });
  }

  /* ---------- gallery ---------- */

  async gallery(enabledOnly: boolean, lang: Lang): Promise<GalleryImage[]> {
    const rows = await this.ctx.cache.get(`gallery:${enabledOnly}`, () => repo.listGallery(this.db, enabledOnly));
    return rows.map((r) => toGalleryImage(r, lang));
  }

  async createGalleryImage(body: Static<typeof GalleryCreateBody>, lang: Lang): Promise<GalleryImage> {
    const title = bilingualWrite(body, 'title');
    const row: GalleryRow = {
      id: newId(),
      imageUrl: body.imageUrl,
      titleZh: title.zh ?? '',
      titleEn: title.en ?? '',
      sortOrder: body.sortOrder ?? 0,
      enabled: body.enabled === false ? 0 : 1,
      createdAt: nowIso(),
    };
    await this.ctx.cache.commit((trx) => trx.insertInto('galleryImages').values(row).execute());
    return toGalleryImage(row, lang);
  }

  async updateGalleryImage(id: string, body: Static<typeof GalleryUpdateBody>, lang: Lang): Promise<GalleryImage> {
    const row = await this.ctx.cache.commit(async (trx) => {
      if (!(await repo.findGalleryImage(trx, id))) throw notFound(`gallery image not found: ${id}`);
      const fields = {
        ...(body.imageUrl !== undefined ? { imageUrl: body.imageUrl } : {}),
        ...bilingualColumns(body, 'title'),
        ...(body.sortOrder !== undefined ? { sortOrder: body.sortOrder } : {}),
        ...(body.enabled !== undefined ? { enabled: body.enabled ? 1 : 0 } : {}),
      };
      if (Object.keys(fields).length > 0) {
        await trx.updateTable('galleryImages').set(fields).where('id', '=', id).execute();
      }
      return repo.findGalleryImage(trx, id);
    });
    if (!row) throw notFound(`gallery image not found: ${id}`);
    return toGalleryImage(row, lang);
  }

  async deleteGalleryImage(id: string): Promise<void> {
    await this.ctx.cache.commit(async (trx) => {
      const result = await trx.deleteFrom('galleryImages').where('id', '=', id).executeTakeFirst();
      if (result.numDeletedRows === 0n) throw notFound(`gallery image not found: ${id}`);
    });
  }
}
