import { Badge, TextInput } from '@mantine/core';
import { useI18n } from '../i18n';

const pad = (n: number) => String(n).padStart(2, '0');

/** An ISO timestamp as the value of a `datetime-local` input (the browser's time zone, to the minute). */
function toLocalInput(iso: string | null): string {
  if (iso === null) return '';
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** Whether `publishAt` names a time still to come (the row is hidden from the public until then). */
export function isScheduled(publishAt: string | null | undefined): publishAt is string {
  return typeof publishAt === 'string' && Date.parse(publishAt) > Date.now();
}

/** `publishAt` of a version, release or article: empty publishes at once, a date and time (local) schedules it. */
export function PublishAtInput({
  value,
  onChange,
}: {
  value: string | null;
  onChange: (value: string | null) => void;
}) {
  const { t } = useI18n();
  return (
    <TextInput
      type="datetime-local"
      label={t('publishAt')}
      description={t('publishAtHint', { zone: Intl.DateTimeFormat().resolvedOptions().timeZone })}
      value={toLocalInput(value)}
      onChange={(e) => {
        const local = e.currentTarget.value;
        onChange(local === '' ? null : new Date(local).toISOString());
      }}
      data-testid="publish-at"
    />
  );
}

/** "Scheduled for …" on a row whose `publishAt` is still to come; nothing once it is published. */
export function ScheduledBadge({ publishAt }: { publishAt: string | null | undefined }) {
  const { t, time } = useI18n();
  if (!isScheduled(publishAt)) return null;
  return (
    <Badge color="orange" variant="light" tt="none" data-testid="scheduled">
      {t('scheduledFor', {
        time: time(publishAt),
      })}
    </Badge>
  );
}
