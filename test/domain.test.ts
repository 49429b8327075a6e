import { describe, expect, it } from 'vitest';
import { CHANNEL, resolveChannel } from '../src/domain/channel.js';
import { langFromAcceptLanguage, localize, matchLang, negotiateLang } from '../src/domain/lang.js';
import { decideUpdate } from '../src/domain/update.js';
import { keyForUpload, servedType } from '../src/modules/files/service.js';
import { isSafeKey, keyFromFilePath } from '../src/storage/storage.js';

describe('language negotiation', () => {
  it.each([
    [{}, 'zh'],
    [{ lang: 'en' }, 'en'],
    [{ lang: 'EN' }, 'en'],
    [{ lang: 'en-US' }, 'en'],
    [{ lang: 'zh-Hans' }, 'zh'],
    [{ lang: 'zh_CN', acceptLanguage: 'en' }, 'zh'],
    [{ lang: 'fr' }, 'zh'],
    [{ lang: 'fr', locale: 'en' }, 'en'],
    [{ locale: 'en' }, 'en'],
    [{ lang: 'zh', locale: 'en' }, 'zh'],
    [{ lang: 'de', locale: 'ja', acceptLanguage: 'en-GB,en;q=0.9' }, 'en'],
    [{ acceptLanguage: 'fr-FR,fr;q=0.9,en;q=0.8,zh;q=0.7' }, 'en'],
    [{ acceptLanguage: 'zh-CN;q=0.9,en;q=0.95' }, 'en'],
    [{ acceptLanguage: 'en;q=0,zh;q=0.1' }, 'zh'],
    [{ acceptLanguage: 'ja,ko' }, 'zh'],
    [{ acceptLanguage: '' }, 'zh'],
    [{ lang: ['en'] }, 'zh'],
  ])('%j → %s', (sources, expected) => {
    expect(negotiateLang(sources)).toBe(expected);
  });

  it('matches tags case-insensitively by their primary language', () => {
    expect(matchLang('En-Us')).toBe('en');
    expect(matchLang('zh-TW')).toBe('zh');
    expect(matchLang('eng')).toBeNull();
    expect(matchLang(undefined)).toBeNull();
    expect(langFromAcceptLanguage('*')).toBeNull();
  });
});

describe('localize', () => {
  it.each([
    ['zh', '中文', 'English', '中文'],
    ['en', '中文', 'English', 'English'],
    ['en', '中文', '', '中文'],
    ['zh', '', 'English', ''],
  ] as const)('lang %s, zh %j, en %j → %j', (lang, zh, en, canonical) => {
    expect(localize('title', zh, en, lang)).toEqual({ title: canonical, titleZh: zh, titleEn: en });
  });
});

describe('channel rule', () => {
  it.each([undefined, '', '1.18', '1.12', '3.3.5', 'all', 42])('%j → 1.18', (value) => {
    expect(resolveChannel(value)).toBe('1.18');
    expect(CHANNEL).toBe('1.18');
  });
});

describe('update decision', () => {
  it.each([
    [110, false, 100, true, false],
    [110, true, 100, true, true],
    [110, true, 110, false, false],
    [110, true, 120, false, false],
    [1, false, 0, true, false],
  ])('latest %i forced %s, client %i → hasUpdate %s, forceUpdate %s', (code, forced, client, has, force) => {
    expect(decideUpdate({ versionCode: code, forceUpdate: forced }, client)).toEqual({
      hasUpdate: has,
      forceUpdate: force,
    });
  });
});

describe('store paths', () => {
  it.each([
    ['/uploads/2026-11/a.png', '2026-11/a.png'],
    ['/uploads/a', 'a'],
    ['/uploads/../etc/passwd', null],
    ['/uploads/a/../../b', null],
    ['/uploads/.tmp/x', null],
    ['/uploads//a', null],
    ['/uploads/a\\b', null],
    ['/uploads/', null],
    ['/etc/passwd', null],
    ['uploads/a', null],
    ['https://x.test/uploads/a', null],
  ])('%s → %j', (filePath, key) => {
    expect(keyFromFilePath(filePath)).toBe(key);
  });

  it('makes unique, safe upload keys that keep a readable name', () => {
    const key = keyForUpload('../../我的 Setup!.exe', new Date('2026-03-04T00:00:00Z'));
    expect(key).toMatch(/^2026-03\/[0-9a-f-]{36}-Setup_\.exe$/);
    expect(isSafeKey(key)).toBe(true);
    expect(keyForUpload('x.png')).not.toBe(keyForUpload('x.png'));
    expect(isSafeKey(keyForUpload('...'))).toBe(true);
  });

  it('serves only raster images inline', () => {
    expect(servedType('a.PNG')).toEqual({ contentType: 'image/png', inline: true });
    expect(servedType('a.jpeg').contentType).toBe('image/jpeg');
    expect(servedType('a.ico').contentType).toBe('image/x-icon');
    expect(servedType('a.svg')).toEqual({ contentType: 'application/octet-stream', inline: false });
    expect(servedType('a.html').inline).toBe(false);
  });
});
