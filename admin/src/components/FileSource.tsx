import { SegmentedControl, Stack, TextInput } from '@mantine/core';
import { useI18n } from '../i18n';
import { UploadButton } from './Upload';

export interface FileSourceValue {
  downloadType: 'local' | 'url';
  filePath: string;
  externalUrl: string;
}

export const emptySource: FileSourceValue = { downloadType: 'local', filePath: '', externalUrl: '' };

export function sourceReady(value: FileSourceValue): boolean {
  return value.downloadType === 'local' ? value.filePath !== '' : value.externalUrl.trim() !== '';
}

/** The body fields of a version or release for the chosen source. */
export function sourceBody(value: FileSourceValue) {
  return value.downloadType === 'local'
    ? { downloadType: 'local' as const, filePath: value.filePath }
    : { downloadType: 'url' as const, externalUrl: value.externalUrl.trim() };
}

/** Upload a file (with progress) or give an external link. */
export function FileSource({ value, onChange }: { value: FileSourceValue; onChange: (value: FileSourceValue) => void }) {
  const { t } = useI18n();
  return (
    <Stack gap="xs">
      <SegmentedControl
        value={value.downloadType}
        onChange={(v) => onChange({ ...value, downloadType: v as 'local' | 'url' })}
        data={[
          { value: 'local', label: t('uploadFile') },
          { value: 'url', label: t('externalUrl') },
        ]}
        data-testid="source-type"
      />
      {value.downloadType === 'local' ? (
        <UploadButton label={t('chooseFile')} onUploaded={(r) => onChange({ ...value, filePath: r.filePath })} testId="file-input" />
      ) : (
        <TextInput
          label={t('externalUrl')}
          placeholder="https://"
          value={value.externalUrl}
          onChange={(e) => onChange({ ...value, externalUrl: e.currentTarget.value })}
          data-testid="external-url"
        />
      )}
    </Stack>
  );
}
