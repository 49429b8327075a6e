import { createHash } from 'node:crypto';
import escapeHtml from 'escape-html';
import { Feed } from 'feed';
import type { AppContext } from '../../context.js';
import { nowIso } from '../../domain/clock.js';
import { type Lang, localize } from '../../domain/lang.js';
import { ContentService } from '../content/service.js';
import * as repo from './repository.js';

export type FeedName = 'articles.rss' | 'articles.atom' | 'releases.atom' | 'launcher.atom';

/** A feed rendered once, with its validators. */
export interface RenderedFeed {
  readonly body: string;
  readonly contentType: string;
  readonly etag: string;
  /** The newest item's time (the feed's own `updated`), second precision as HTTP dates have. */
  readonly lastModified: Date;
}

interface Item {
  id: string;
  title: string;
  link: string;
  description: string;
  date: Date;
}

const TEXT = {
  articles: { zh: '新闻', en: 'News' },
  releases: { zh: '插件更新', en: 'Addon releases' },
  launcher: { zh: '启动器与客户端更新', en: 'Launcher and client updates' },
} as const;

/**
 * RSS 2.0 and Atom feeds of articles, addon releases and software versions offered to everyone.
 * Each is rendered once per content version, language and base URL (the content cache drops it on
 * a write, and when a scheduled item falls due), never per request.
 */
export class FeedService {
  private readonly content: ContentService;

  constructor(private readonly ctx: AppContext) {
    this.content = new ContentService(ctx);
  }

  feed(name: FeedName, lang: Lang, base: string): Promise<RenderedFeed> {
    return this.ctx.cache.get(`feeds:${name}:${lang}:${base}`, async () => {
      const items = await this.items(name, lang, base);
      return render(name, items, lang, base, this.ctx.config.appName);
    });
  }

  private async items(name: FeedName, lang: Lang, base: string): Promise<Item[]> {
    const at = nowIso();
    if (name === 'articles.rss' || name === 'articles.atom') {
      const articles = await this.content.articles(true, repo.FEED_ITEMS, lang);
      return articles.map((a) => ({
        id: `${base}/api/articles/${a.slug}`,
        title: a.title,
        link: `${base}/api/articles/${a.slug}?lang=${lang}`,
        description: a.summary,
        date: new Date(a.publishAt ?? a.createdAt),
      }));
    }
    if (name === 'releases.atom') {
      const rows = await repo.newestReleases(this.ctx.db, at);
      return rows.map((r) => ({
        id: `${base}/api/download/${r.id}`,
        title: `${localize('name', r.nameZh, r.nameEn, lang).name} ${r.version}`,
        link: `${base}/api/addons/${r.slug}?lang=${lang}`,
        description: localize('changelog', r.changelogZh, r.changelogEn, lang).changelog,
        date: new Date(r.publishAt ?? r.createdAt),
      }));
    }
    const rows = await repo.newestVersionsForAll(this.ctx.db, at);
    return rows.map((v) => ({
      id: `${base}/api/software/download/${v.id}`,
      title: `${localize('name', v.nameZh, v.nameEn, lang).name} ${v.version}`,
      link: `${base}/api/software/${v.slug}?lang=${lang}`,
      description: localize('changelog', v.changelogZh, v.changelogEn, lang).changelog,
      date: new Date(v.publishAt ?? v.createdAt),
    }));
  }
}

function render(name: FeedName, items: Item[], lang: Lang, base: string, appName: string): RenderedFeed {
  // Newest first by the time readers saw them (a scheduled item: when it was published).
  items.sort((a, b) => b.date.getTime() - a.date.getTime());
  const topic = name.startsWith('articles') ? 'articles' : name === 'releases.atom' ? 'releases' : 'launcher';
  const self = `${base}/feeds/${name}?lang=${lang}`;
  const updated = items[0]?.date ?? new Date(0);
  const feed = new Feed({
    title: `${appName} · ${TEXT[topic][lang]}`,
    id: self,
    link: base,
    language: lang === 'zh' ? 'zh-CN' : 'en',
    updated,
    copyright: '',
    generator: appName,
    feedLinks: name.endsWith('.rss') ? { rss: self } : { atom: self },
  });
  const rss = name.endsWith('.rss');
  for (const item of items) {
    feed.addItem({
      // Atom's title and summary are declared `type="html"`, RSS descriptions are read as HTML by
      // convention: our texts are plain, so they are escaped to show as written (`<b>` as `<b>`).
      title: rss ? item.title : escapeHtml(item.title),
      id: item.id,
      link: item.link,
      description: escapeHtml(item.description),
      date: item.date,
    });
  }
  const body = rss ? feed.rss2() : feed.atom1();
  return {
    body,
    contentType: rss ? 'application/rss+xml; charset=utf-8' : 'application/atom+xml; charset=utf-8',
    etag: `"${createHash('sha1').update(body).digest('base64url')}"`,
    lastModified: new Date(Math.floor(updated.getTime() / 1000) * 1000),
  };
}
