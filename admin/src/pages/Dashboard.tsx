import { BarChart } from '@mantine/charts';
import { Card, Group, SimpleGrid, Stack, Table, Text, Title } from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import type { ReactNode } from 'react';
import { api, data } from '../api/client';
import { useI18n } from '../i18n';

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
            {downloads.data ? `${downloads.data.totals.installer} / ${downloads.data.totals.launcher} / ${downloads.data.totals.addon}` : '–'}
          </Text>
        </Card>
      </SimpleGrid>
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
        <Breakdown title={t('onlineByOs')} rows={(stats.data?.onlineByOs ?? []).map((r) => ({ label: r.os, count: r.count }))} />
      </SimpleGrid>
    </Stack>
  );
}
