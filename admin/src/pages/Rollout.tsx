import { LineChart } from '@mantine/charts';
import {
  Alert,
  Badge,
  Button,
  Card,
  Group,
  NumberInput,
  SimpleGrid,
  Slider,
  Stack,
  Switch,
  Text,
  Title,
} from '@mantine/core';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { api, data, type Version } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { useI18n } from '../i18n';
import { useWrite } from '../write';
import { Stat } from './Dashboard';

const KEY = ['software'] as const;
const MARKS = [1, 5, 10, 25, 50, 100].map((value) => ({ value, label: `${value}%` }));

const percentOf = (share: number | null | undefined) =>
  share === null || share === undefined ? '–' : `${Math.round(share * 1000) / 10}%`;

/** Where a version's rollout stands, as a badge for the versions table. */
export function RolloutBadge({ version }: { version: Version }) {
  const { t } = useI18n();
  if (version.revokedAt !== null) return <Badge color="red">{t('revoked')}</Badge>;
  if (version.rolloutPercent === 0) return <Badge color="orange">{t('halted')}</Badge>;
  if (version.rolloutPercent < 100) return <Badge color="yellow">{version.rolloutPercent}%</Badge>;
  return <Text size="sm">100%</Text>;
}

function AutoHalt({ version }: { version: Version }) {
  const { t } = useI18n();
  const [enabled, setEnabled] = useState(version.autoHalt !== null);
  const [maxQuietPercent, setMaxQuietPercent] = useState<number | string>(
    Math.round((version.autoHalt?.maxQuietRate ?? 0.2) * 100),
  );
  const [minDevices, setMinDevices] = useState<number | string>(version.autoHalt?.minDevices ?? 20);
  const save = useWrite({
    mutationFn: async () =>
      data(
        await api.PUT('/api/software/versions/{versionId}', {
          params: { path: { versionId: version.id } },
          body: {
            autoHalt: enabled ? { maxQuietRate: Number(maxQuietPercent) / 100, minDevices: Number(minDevices) } : null,
          },
        }),
      ),
    invalidate: KEY,
    success: 'saved',
  });
  return (
    <Card withBorder>
      <Switch
        label={t('autoHalt')}
        description={t('autoHaltHint')}
        checked={enabled}
        onChange={(e) => setEnabled(e.currentTarget.checked)}
        data-testid="auto-halt"
      />
      <Group align="flex-end" mt="sm">
        <NumberInput
          label={t('maxQuietRate')}
          value={maxQuietPercent}
          onChange={setMaxQuietPercent}
          min={0}
          max={100}
          suffix="%"
          disabled={!enabled}
          w={180}
        />
        <NumberInput
          label={t('minDevices')}
          value={minDevices}
          onChange={setMinDevices}
          min={1}
          allowDecimal={false}
          disabled={!enabled}
          w={180}
        />
        <Button variant="default" onClick={() => save.mutate()} loading={save.isPending} data-testid="auto-halt-save">
          {t('save')}
        </Button>
      </Group>
    </Card>
  );
}

/** A version's staged rollout: ramp, halt, revoke, and how the devices that took it are doing. */
export function RolloutPanel({ version }: { version: Version }) {
  const { t, time } = useI18n();
  const [draft, setDraft] = useState<number | null>(null);
  const percent = draft ?? version.rolloutPercent;
  const health = useQuery({
    queryKey: [...KEY, 'rollout', version.id],
    queryFn: async () =>
      data(
        await api.GET('/api/admin/software/versions/{versionId}/rollout', {
          params: { path: { versionId: version.id } },
        }),
      ),
    refetchInterval: 15_000,
  });
  const setRollout = useWrite({
    mutationFn: async (rolloutPercent: number) =>
      data(
        await api.PUT('/api/software/versions/{versionId}', {
          params: { path: { versionId: version.id } },
          body: { rolloutPercent },
        }),
      ),
    invalidate: KEY,
    success: 'saved',
    onDone: () => setDraft(null),
  });
  const revocation = useWrite({
    mutationFn: async (action: 'revoke' | 'unrevoke') =>
      data(
        action === 'revoke'
          ? await api.POST('/api/software/versions/{versionId}/revoke', { params: { path: { versionId: version.id } } })
          : await api.POST('/api/software/versions/{versionId}/unrevoke', {
              params: { path: { versionId: version.id } },
            }),
      ),
    invalidate: KEY,
    success: 'saved',
  });
  const h = health.data;
  // Reading the health applies a due automatic halt: the versions list then learns of it at once.
  const queryClient = useQueryClient();
  const haltedMeanwhile = h !== undefined && h.haltedAt !== version.haltedAt;
  useEffect(() => {
    if (haltedMeanwhile)
      void queryClient.invalidateQueries({ queryKey: KEY, predicate: (query) => query.queryKey[1] !== 'rollout' });
  }, [haltedMeanwhile, queryClient]);
  const previous = h?.previous ?? null;
  const timeline = (h?.timeline ?? []).map((p) => ({
    at: time(p.at, 'chart'),
    current: p.devicesOnVersion,
    previous: p.devicesOnPrevious,
  }));
  return (
    <Stack data-testid="rollout-panel">
      {version.revokedAt !== null && (
        <Alert color="red" title={t('revoked')} data-testid="revoked-alert">
          {t('revokedAt', { time: time(version.revokedAt) })}
        </Alert>
      )}
      {version.haltedAt !== null && (
        <Alert color="orange" title={t('halted')} data-testid="halted-alert">
          {t('haltedAt', { time: time(version.haltedAt), reason: version.haltReason ?? '' })}
        </Alert>
      )}
      <Card withBorder>
        <Group justify="space-between" mb="xs">
          <Title order={5}>{t('rolloutPercent')}</Title>
          <Text fw={700} data-testid="rollout-current">
            {version.rolloutPercent}%
          </Text>
        </Group>
        <Slider
          value={percent}
          onChange={setDraft}
          min={0}
          max={100}
          marks={MARKS}
          label={(v) => `${v}%`}
          mb="xl"
          data-testid="rollout-slider"
        />
        <Group justify="space-between" mt="lg">
          {version.revokedAt === null ? (
            <ConfirmButton
              size="sm"
              message={t('confirmRevokeVersion', { version: version.version })}
              onConfirm={() => revocation.mutate('revoke')}
              data-testid="revoke-version"
            >
              {t('revokeVersion')}
            </ConfirmButton>
          ) : (
            <ConfirmButton
              size="sm"
              color="blue"
              message={t('confirmUnrevokeVersion', { version: version.version })}
              onConfirm={() => revocation.mutate('unrevoke')}
              data-testid="unrevoke-version"
            >
              {t('unrevokeVersion')}
            </ConfirmButton>
          )}
          <Group gap="xs">
            <Button
              color="orange"
              variant="light"
              onClick={() => setRollout.mutate(0)}
              disabled={version.rolloutPercent === 0}
              data-testid="rollout-halt"
            >
              {t('halt')}
            </Button>
            <Button
              onClick={() => setRollout.mutate(percent)}
              disabled={percent === version.rolloutPercent}
              loading={setRollout.isPending}
              data-testid="rollout-apply"
            >
              {t('applyRollout', { percent })}
            </Button>
          </Group>
        </Group>
      </Card>
      <SimpleGrid cols={{ base: 2, sm: 5 }}>
        <Stat label={t('devicesOnVersion')} value={h?.devicesOnVersion} testId="health-devices" />
        <Stat label={t('onlineOnVersion')} value={h?.onlineOnVersion} testId="health-online" />
        <Stat label={t('quietAfterUpdate')} value={h && percentOf(h.quietAfterUpdate)} testId="health-quiet" />
        <Stat
          label={t('previousDevices', { version: previous?.version ?? '–' })}
          value={previous?.devicesOnVersion}
          testId="health-previous-devices"
        />
        <Stat
          label={t('previousQuiet', { version: previous?.version ?? '–' })}
          value={previous && percentOf(previous.quietAfterUpdate)}
          testId="health-previous-quiet"
        />
      </SimpleGrid>
      <Card withBorder>
        <Title order={5} mb="xs">
          {t('devicesOverTime')}
        </Title>
        {timeline.length === 0 ? (
          <Text c="dimmed" size="sm">
            {t('noData')}
          </Text>
        ) : (
          <LineChart
            h={200}
            data={timeline}
            dataKey="at"
            withLegend
            curveType="linear"
            series={[
              { name: 'current', label: version.version, color: 'blue.6' },
              { name: 'previous', label: previous?.version ?? t('previousVersion'), color: 'gray.6' },
            ]}
            data-testid="rollout-chart"
          />
        )}
        {h && (
          <Text size="xs" c="dimmed" mt="xs">
            {t('publishedAt', { time: time(h.publishedAt) })}
          </Text>
        )}
      </Card>
      <AutoHalt version={version} />
    </Stack>
  );
}
