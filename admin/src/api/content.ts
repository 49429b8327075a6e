/**
 * Addon, release, screenshot, article, banner and gallery endpoints, typed from the spec and the
 * contract ("Admin endpoints the spec leaves out"). `client.ts` uses the generated `schema.d.ts`
 * for every path the service's /openapi.json documents and falls back to these for the rest, so
 * once those modules are in the OpenAPI document their generated types take over.
 */
type Lang = 'zh' | 'en';

export interface Screenshot {
  id: string;
  addonId: string;
  imageUrl: string;
  sortOrder: number;
  createdAt?: string;
}

export interface Release {
  id: string;
  addonId: string;
  version: string;
  changelog: string;
  changelogZh: string;
  changelogEn: string;
  downloadType: 'local' | 'url';
  filePath: string;
  externalUrl: string | null;
  fileSize?: number;
  sha256?: string | null;
  gameVersion: string;
  downloadCount: number;
  isLatest: boolean;
  wowVersion: string;
  createdAt: string;
  publishAt: string | null;
  lang?: Lang;
}

export interface Addon {
  id: string;
  slug: string;
  name: string;
  nameZh: string;
  nameEn: string;
  summary: string;
  summaryZh: string;
  summaryEn: string;
  description: string;
  descriptionZh: string;
  descriptionEn: string;
  iconUrl: string | null;
  category: string;
  published: boolean;
  totalDownloads: number;
  createdAt: string;
  updatedAt: string;
  releases: Release[];
  screenshots: Screenshot[];
  _count: { releases: number };
  lang: Lang;
}

export interface Article {
  id: string;
  slug: string;
  title: string;
  titleZh: string;
  titleEn: string;
  summary: string;
  summaryZh: string;
  summaryEn: string;
  content: string;
  contentZh: string;
  contentEn: string;
  coverImage: string;
  published: boolean;
  publishAt: string | null;
  createdAt: string;
  updatedAt: string;
  lang: Lang;
}

export interface Banner {
  id: string;
  imageUrl: string;
  sortOrder: number;
  enabled: boolean;
  createdAt?: string;
}

export interface GalleryImage {
  id: string;
  imageUrl: string;
  title: string;
  titleZh: string;
  titleEn: string;
  sortOrder: number;
  enabled: boolean;
  createdAt?: string;
}

export interface AddonWrite {
  slug?: string;
  name?: string;
  nameZh?: string;
  nameEn?: string;
  summary?: string;
  summaryZh?: string;
  summaryEn?: string;
  descriptionZh?: string;
  descriptionEn?: string;
  iconUrl?: string | null;
  category?: string;
  published?: boolean;
}

export interface ReleaseWrite {
  addonId?: string;
  version?: string;
  changelogZh?: string;
  changelogEn?: string;
  downloadType?: 'local' | 'url';
  filePath?: string;
  externalUrl?: string | null;
  gameVersion?: string;
  isLatest?: boolean;
  publishAt?: string | null;
}

export interface ArticleWrite {
  slug?: string;
  titleZh?: string;
  titleEn?: string;
  summaryZh?: string;
  summaryEn?: string;
  contentZh?: string;
  contentEn?: string;
  coverImage?: string;
  published?: boolean;
  publishAt?: string | null;
}

export interface BannerWrite {
  imageUrl?: string;
  sortOrder?: number;
  enabled?: boolean;
}

export interface GalleryWrite {
  imageUrl?: string;
  titleZh?: string;
  titleEn?: string;
  sortOrder?: number;
  enabled?: boolean;
}

type Json<T> = { headers: Record<string, unknown>; content: { 'application/json': T } };
type Failure = { default: Json<{ error: string }> };
type Ok<T> = { 200: Json<T> } & Failure;
type Created<T> = { 201: Json<T> } & Failure;
type Id = { id: string };
type IdOrSlug = { idOrSlug: string };
type NoParams = { query?: never; header?: never; path?: never; cookie?: never };

type Params<Query, Path> = { query?: Query; header?: never; cookie?: never } & ([Path] extends [never]
  ? { path?: never }
  : { path: Path });
type Op<Res, Query = never, Path = never, Body = never> = { parameters: Params<Query, Path>; responses: Res } & ([
  Body,
] extends [never]
  ? { requestBody?: never }
  : { requestBody: { content: { 'application/json': Body } } });
type Ok200 = { ok: true };

interface PathItem {
  parameters: NoParams;
}

export interface ContentPaths {
  '/api/addons': PathItem & {
    get: Op<Ok<Addon[]>, { lang?: string; published?: string; category?: string; search?: string }>;
    post: Op<Created<Addon>, never, never, AddonWrite>;
  };
  '/api/addons/{idOrSlug}': PathItem & { get: Op<Ok<Addon>, { lang?: string }, IdOrSlug> };
  '/api/addons/{id}': PathItem & {
    put: Op<Ok<Addon>, never, Id, AddonWrite>;
    delete: Op<Ok<Ok200>, never, Id>;
  };
  '/api/releases': PathItem & {
    get: Op<Ok<Release[]>, { addonId?: string; lang?: string }>;
    post: Op<Created<Release>, never, never, ReleaseWrite>;
  };
  '/api/releases/{id}': PathItem & {
    put: Op<Ok<Release>, never, Id, ReleaseWrite>;
    delete: Op<Ok<Ok200>, never, Id>;
  };
  '/api/addons/{id}/screenshots': PathItem & {
    post: Op<Created<Screenshot>, never, Id, { imageUrl: string; sortOrder?: number }>;
  };
  '/api/screenshots/{id}': PathItem & {
    put: Op<Ok<Screenshot>, never, Id, { imageUrl?: string; sortOrder?: number }>;
    delete: Op<Ok<Ok200>, never, Id>;
  };
  '/api/articles': PathItem & {
    get: Op<Ok<Article[]>, { lang?: string; published?: string; limit?: string }>;
    post: Op<Created<Article>, never, never, ArticleWrite>;
  };
  '/api/articles/{id}': PathItem & {
    put: Op<Ok<Article>, never, Id, ArticleWrite>;
    delete: Op<Ok<Ok200>, never, Id>;
  };
  '/api/banners': PathItem & {
    get: Op<Ok<Banner[]>, { enabled?: string }>;
    post: Op<Created<Banner>, never, never, BannerWrite>;
  };
  '/api/banners/{id}': PathItem & {
    put: Op<Ok<Banner>, never, Id, BannerWrite>;
    delete: Op<Ok<Ok200>, never, Id>;
  };
  '/api/gallery': PathItem & {
    get: Op<Ok<GalleryImage[]>, { enabled?: string; lang?: string }>;
    post: Op<Created<GalleryImage>, never, never, GalleryWrite>;
  };
  '/api/gallery/{id}': PathItem & {
    put: Op<Ok<GalleryImage>, never, Id, GalleryWrite>;
    delete: Op<Ok<Ok200>, never, Id>;
  };
}
