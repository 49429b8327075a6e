import type React from 'react';
import { Badge, Button, CopyButton, FileButton, Group, Image, Progress, Stack, Text, Tooltip } from '@mantine/core';
import { useState } from 'react';
import { type UploadResult, uploadFile } from '../api/upload';
import { notifyError } from '../errors';
import { useI18n } from '../i18n';

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/**
 * Whether the publisher signed a stored file (minisign `fileSignature`), and with which key id;
 * nothing for a link, which has no stored file to sign.
 */
export function FileSignatureBadge({ item }: { item: { downloadType: string; fileSignatureKeyId?: string } }) {
  const { t } = useI18n();
  if (item.downloadType !== 'local') return null;
  if (!item.fileSignatureKeyId)
    return (
      <Badge size="xs" variant="outline" color="gray" data-testid="file-signature">
        {t('unsigned')}
      </Badge>
    );
  return (
    <Tooltip label={t('signedBy', { keyId: item.fileSignatureKeyId })} withArrow>
      <Stack gap={0} align="flex-start" data-testid="file-signature">
        <Badge size="xs" variant="light" color="teal">
          {t('signedShort')}
        </Badge>
        <Text size="xs" ff="monospace" c="dimmed" data-testid="file-signature-key">
          {item.fileSignatureKeyId}
        </Text>
      </Stack>
    </Tooltip>
  );
}

/** A file's SHA-256: in full, or its first 12 hex digits (`short`); a click copies the whole value. */
export function Sha256({ value, short = false }: { value: string | null | undefined; short?: boolean }) {
  const { t } = useI18n();
  if (!value)
    return (
      <Text size="xs" c="dimmed">
        –
      </Text>
    );
  return (
    <CopyButton value={value}>
      {({ copied, copy }) => (
        <Tooltip label={copied ? t('copied') : value} withArrow>
          <Text
            size="xs"
            ff="monospace"
            c="dimmed"
            style={{ cursor: 'pointer', ...(short ? { whiteSpace: 'nowrap' } : { wordBreak: 'break-all' }) }}
            onClick={copy}
            data-testid="sha256"
          >
            {short ? `${value.slice(0, 12)}…` : `SHA-256 ${value}`}
          </Text>
        </Tooltip>
      )}
    </CopyButton>
  );
}

/** Choose a file, upload it with a progress bar, and hand the stored file to `onUploaded`. */
export function UploadButton({
  label,
  accept,
  onUploaded,
  testId,
}: {
  label: string;
  accept?: string;
  onUploaded: (result: UploadResult) => void;
  testId?: string;
}) {
  const { t } = useI18n();
  const [progress, setProgress] = useState<number | null>(null);
  const [done, setDone] = useState<UploadResult | null>(null);

  async function start(file: File | null) {
    if (file === null) return;
    setDone(null);
    setProgress(0);
    try {
      const result = await uploadFile(file, setProgress);
      setDone(result);
      onUploaded(result);
    } catch (error) {
      notifyError(error, t);
      setProgress(null);
    }
  }

  return (
    <Stack gap={4}>
      <Group gap="sm">
        <FileButton
          onChange={(file) => void start(file)}
          accept={accept}
          inputProps={{ 'data-testid': testId } as React.ComponentProps<'input'>}
        >
          {(props) => (
            <Button variant="light" size="xs" {...props} loading={progress !== null && done === null}>
              {label}
            </Button>
          )}
        </FileButton>
        {done !== null && (
          <Text size="xs" c="dimmed">
            {t('uploaded')}: {done.originalName} ({formatBytes(done.size)})
          </Text>
        )}
      </Group>
      {done !== null && <Sha256 value={done.sha256} />}
      {progress !== null && (
        <Progress
          value={Math.round(progress * 100)}
          size="lg"
          animated={done === null}
          data-testid="upload-progress"
          aria-label={t('uploading')}
        />
      )}
    </Stack>
  );
}

/** An image field: preview of the current value plus an upload button. */
export function ImageField({
  label,
  buttonLabel,
  value,
  onChange,
  testId,
}: {
  label: string;
  buttonLabel?: string;
  value: string | null;
  onChange: (filePath: string) => void;
  testId?: string;
}) {
  return (
    <Stack gap={4}>
      <Text size="sm" fw={500}>
        {label}
      </Text>
      {value ? (
        <Image
          src={value}
          alt={label}
          h={96}
          w="auto"
          maw={320}
          fit="contain"
          radius="sm"
          style={{ alignSelf: 'flex-start' }}
        />
      ) : null}
      <UploadButton
        label={buttonLabel ?? label}
        accept="image/*"
        onUploaded={(r) => onChange(r.filePath)}
        testId={testId}
      />
    </Stack>
  );
}
