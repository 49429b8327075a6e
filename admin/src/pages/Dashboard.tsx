import { AreaChart, BarChart } from '@mantine/charts';
import { Card, Group, SegmentedControl, SimpleGrid, Stack, Table, Text, Title } from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { type ReactNode, useState } from 'react';
import { api, data } from '../api/client';
import { type FormatTime, useI18n } from '../i18n';

export function useDeviceStats() {
  return useQuery({
    queryKey: ['devices', 'stats'],
    queryFn: async () => data(await api.GET('/api/admin/devices/stats')),
    refetchInterval: 30_000,
  });
}

export function Breakdown({ title, rows }: { title: string; rows: { label: string; count: number }[] }) {
  const { t } = useI18n();
  return (
    <Card withBorder>
      <Title order={5} mb="xs">
        {title}
      </Title>
      {rows.length === 0 ? (
        <Text c="dimmed" size="sm">
          {t('noData')}
        </Text>
      ) : (
        <Table>
          <Table.Tbody>
            {rows.map((row) => (
              <Table.Tr key={row.label}>
                <Table.Td>{row.label || t('unknown')}</Table.Td>
                <Table.Td ta="right">{row.count}</Table.Td>
              </Table.Tr>
            ))}
          </Table.Tbody>
        </Table>
      )}
    </Card>
  );
}

export function Stat({ label, value, testId }: { label: string; value: ReactNode; testId: string }) {
  return (
    <Card withBorder>
      <Text size="sm" c="dimmed">
        {label}
      </Text>
      <Text fz={32} fw={700} data-testid={testId}>
        {value ?? '–'}
      </Text>
    </Card>
  );
}

const VERSION_COLORS = [
  'blue.6',
  'teal.6',
  'orange.6',
  'grape.6',
  'red.6',
  'cyan.6',
  'lime.7',
  'pink.6',
  'indigo.6',
  'yellow.7',
];

type HistoryPoint = { at: string; online: number; byAppVersion: Record<string, number> };

/**
 * The chart's rows: one per sample over a day; over longer ranges the hourly average of the
 * 5-minute samples (a month of samples is more points than a chart can show). Versions are keyed
 * `v0`, `v1`… because a version may be any text, the empty one included.
 */
function historyRows(points: HistoryPoint[], hourly: boolean, time: FormatTime) {
  const versions = [...new Set(points.flatMap((p) => Object.keys(p.byAppVersion)))].sort();
  const buckets = new Map<string, { at: string; samples: number; sums: number[] }>();
  for (const point of points) {
    const key = hourly ? point.at.slice(0, 13) : point.at;
    const bucket = buckets.get(key) ?? {
      at: hourly ? `${key}:00:00.000Z` : key,
      samples: 0,
      sums: versions.map(() => 0),
    };
    bucket.samples += 1;
    versions.forEach((version, i) => (bucket.sums[i]! += point.byAppVersion[version] ?? 0));
    buckets.set(key, bucket);
  }
  const rows = [...buckets.values()].map((bucket) => ({
    at: time(bucket.at, hourly ? 'chart' : 'time'),
    ...Object.fromEntries(bucket.sums.map((sum, i) => [`v${i}`, Math.round((sum / bucket.samples) * 10) / 10])),
  }));
  return { versions, rows };
}

function Figure({ label, value, testId }: { label: string; value: number | undefined; testId: string }) {
  return (
    <div>
      <Text size="xs" c="dimmed">
        {label}
      </Text>
      <Text fw={700} fz="xl" data-testid={testId}>
        {value ?? '–'}
      </Text>
    </div>
  );
}

function OnlineHistory() {
  const { t, time } = useI18n();
  const [hours, setHours] = useState('24');
  const history = useQuery({
    queryKey: ['devices', 'history', hours],
    queryFn: async () => data(await api.GET('/api/admin/devices/online-history', { params: { query: { hours } } })),
    refetchInterval: 60_000,
  });
  const hourly = hours !== '24';
  const { versions, rows } = historyRows(history.data?.points ?? [], hourly, time);
  return (
    <Card withBorder data-testid="online-history">
      <Group justify="space-between" mb="sm">
        <div>
          <Title order={5}>{t('onlineHistory')}</Title>
          <Text size="xs" c="dimmed">
            {hourly ? t('samplesHourly') : t('samples5min')}
          </Text>
        </div>
        <Group gap="xl">
          <Figure label={t('peak')} value={history.data?.peak} testId="history-peak" />
          <Figure label={t('average')} value={history.data?.average} testId="history-average" />
          <SegmentedControl
            value={hours}
            onChange={setHours}
            data={[
              { value: '24', label: t('last24h') },
              { value: '720', label: t('last30d') },
            ]}
            data-testid="history-range"
          />
        </Group>
      </Group>
      {versions.length === 0 ? (
        <Text c="dimmed" size="sm">
          {history.isPending ? t('loading') : t('noData')}
        </Text>
      ) : (
        <AreaChart
          h={280}
          data={rows}
          dataKey="at"
          type="stacked"
          curveType="linear"
          withDots={false}
          withLegend
          series={versions.map((version, i) => ({
            name: `v${i}`,
            label: version || t('unknown'),
            color: VERSION_COLORS[i % VERSION_COLORS.length]!,
          }))}
          data-testid="online-history-chart"
        />
      )}
    </Card>
  );
}

export function DashboardPage() {
  const { t } = useI18n();
  const stats = useDeviceStats();
  const downloads = useQuery({
    queryKey: ['stats', 'downloads', 30],
    queryFn: async () => data(await api.GET('/api/admin/stats/downloads', { params: { query: { days: '30' } } })),
  });
  const series = downloads.data?.series.map((d) => ({ ...d, day: d.day.slice(5) })) ?? [];
  return (
    <Stack>
      <Title order={2}>{t('dashboard')}</Title>
      <SimpleGrid cols={{ base: 1, sm: 2, lg: 4 }}>
        <Stat label={t('onlineNow')} value={stats.data?.online} testId="stat-online" />
        <Stat label={t('totalDevices')} value={stats.data?.total} testId="stat-total" />
        <Stat label={t('downloads30Total')} value={downloads.data?.totals.total} testId="stat-downloads" />
        <Card withBorder>
          <Text size="sm" c="dimmed">
            {t('kindInstaller')} / {t('kindLauncher')} / {t('kindAddon')}
          </Text>
          <Text fz={24} fw={700}>
            {downloads.data
              ? `${downloads.data.totals.installer} / ${downloads.data.totals.launcher} / ${downloads.data.totals.addon}`
              : '–'}
          </Text>
        </Card>
      </SimpleGrid>
      <OnlineHistory />
      <Card withBorder>
        <Group justify="space-between" mb="sm">
          <Title order={5}>{t('downloads30')}</Title>
        </Group>
        <BarChart
          h={280}
          data={series}
          dataKey="day"
          type="stacked"
          withLegend
          series={[
            { name: 'installer', label: t('kindInstaller'), color: 'blue.6' },
            { name: 'launcher', label: t('kindLauncher'), color: 'teal.6' },
            { name: 'addon', label: t('kindAddon'), color: 'orange.6' },
          ]}
          data-testid="downloads-chart"
        />
      </Card>
      <SimpleGrid cols={{ base: 1, md: 2 }}>
        <Breakdown
          title={t('onlineByVersion')}
          rows={(stats.data?.onlineByAppVersion ?? []).map((r) => ({ label: r.appVersion, count: r.count }))}
        />
        <Breakdown
          title={t('onlineByOs')}
          rows={(stats.data?.onlineByOs ?? []).map((r) => ({ label: r.os, count: r.count }))}
        />
      </SimpleGrid>
    </Stack>
  );
}
