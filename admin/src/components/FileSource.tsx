import { SegmentedControl, Stack, Text, TextInput } from '@mantine/core';
import { useI18n } from '../i18n';
import { formatBytes, Sha256, UploadButton } from './Upload';

export interface FileSourceValue {
  downloadType: 'local' | 'url';
  filePath: string;
  externalUrl: string;
}

export const emptySource: FileSourceValue = { downloadType: 'local', filePath: '', externalUrl: '' };

/** The stored file of a version or release being edited. */
export interface StoredFile {
  downloadType: 'local' | 'url';
  filePath: string;
  externalUrl: string | null;
  fileSize: number;
  sha256: string | null;
}

/** The form value that keeps a version's or release's current file or link. */
export function storedSource(file: StoredFile): FileSourceValue {
  return { downloadType: file.downloadType, filePath: file.filePath, externalUrl: file.externalUrl ?? '' };
}

export function sourceReady(value: FileSourceValue): boolean {
  return value.downloadType === 'local' ? value.filePath !== '' : value.externalUrl.trim() !== '';
}

/**
 * The body fields of a version or release for the chosen source. An external link has no stored
 * file: its size and sha256 are cleared, so that a row moved from a file to a link does not keep
 * (and answer launchers with) the hash of the file it no longer serves.
 */
export function sourceBody(value: FileSourceValue) {
  return value.downloadType === 'local'
    ? { downloadType: 'local' as const, filePath: value.filePath }
    : { downloadType: 'url' as const, externalUrl: value.externalUrl.trim(), fileSize: 0, sha256: null };
}

/** Upload a file (with progress) or give an external link; when editing, `current` is the stored file, shown until replaced. */
export function FileSource({
  value,
  onChange,
  current,
}: {
  value: FileSourceValue;
  onChange: (value: FileSourceValue) => void;
  current?: StoredFile;
}) {
  const { t } = useI18n();
  const keepsCurrent = current !== undefined && current.filePath !== '' && value.filePath === current.filePath;
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
        <>
          {keepsCurrent && (
            <div data-testid="current-file">
              <Text size="xs" c="dimmed">
                {t('currentFile')}: {current.filePath} ({formatBytes(current.fileSize)})
              </Text>
              <Sha256 value={current.sha256} />
            </div>
          )}
          <UploadButton
            label={keepsCurrent ? t('replaceFile') : t('chooseFile')}
            onUploaded={(r) => onChange({ ...value, filePath: r.filePath })}
            testId="file-input"
          />
        </>
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
