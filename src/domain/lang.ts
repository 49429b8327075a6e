export type Lang = 'zh' | 'en';
export const DEFAULT_LANG: Lang = 'zh';

/** Maps one language tag (`en`, `EN-us`, `zh-Hans`, `zh_CN`) to a supported language, or null. */
export function matchLang(tag: string | undefined | null): Lang | null {
  if (typeof tag !== 'string') return null;
  const primary = tag.trim().toLowerCase().split(/[-_]/)[0];
  return primary === 'zh' || primary === 'en' ? primary : null;
}

/** Picks the best supported language of an `Accept-Language` list, ranked by `q` (ties keep list order). */
export function langFromAcceptLanguage(header: string | undefined | null): Lang | null {
  if (typeof header !== 'string' || header === '') return null;
  let best: { lang: Lang; q: number } | null = null;
  for (const item of header.split(',')) {
    const [tag, ...params] = item.split(';');
    let q = 1;
    for (const param of params) {
      const [key, value] = param.split('=').map((s) => s.trim());
      if (key === 'q' && value !== undefined) {
        const parsed = Number(value);
        q = Number.isFinite(parsed) ? parsed : 0;
      }
    }
    const lang = matchLang(tag);
    if (lang !== null && q > 0 && (best === null || q > best.q)) best = { lang, q };
  }
  return best?.lang ?? null;
}

export interface LangSources {
  lang?: unknown;
  locale?: unknown;
  acceptLanguage?: string | undefined;
}

/** The spec's negotiation: query `lang`, then `locale`, then `Accept-Language`, then `zh`. */
export function negotiateLang(sources: LangSources): Lang {
  return (
    matchLang(typeof sources.lang === 'string' ? sources.lang : null) ??
    matchLang(typeof sources.locale === 'string' ? sources.locale : null) ??
    langFromAcceptLanguage(sources.acceptLanguage) ??
    DEFAULT_LANG
  );
}

export const TRANSLATABLE = ['name', 'summary', 'description', 'changelog', 'title', 'content'] as const;
export type Translatable = (typeof TRANSLATABLE)[number];

export type Localized<F extends string> = { [K in F]: string } & { [K in `${F}Zh` | `${F}En`]: string };

/** Resolves one stored bilingual field into its canonical key plus the raw `Zh`/`En` keys. */
export function localize<F extends Translatable>(field: F, zh: string, en: string, lang: Lang): Localized<F> {
  const canonical = lang === 'en' && en !== '' ? en : zh;
  return { [field]: canonical, [`${field}Zh`]: zh, [`${field}En`]: en } as Localized<F>;
}
