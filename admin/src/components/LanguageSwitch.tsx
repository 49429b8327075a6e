import { SegmentedControl } from '@mantine/core';
import { type Lang, useI18n } from '../i18n';

/** The console's language: 中文 or English. */
export function LanguageSwitch() {
  const { lang, setLang } = useI18n();
  return (
    <SegmentedControl
      size="xs"
      value={lang}
      onChange={(v) => setLang(v as Lang)}
      data={[
        { value: 'zh', label: '中文' },
        { value: 'en', label: 'English' },
      ]}
      data-testid="lang-switch"
    />
  );
}
