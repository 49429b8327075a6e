import { Badge, Card, Group, SimpleGrid, Stack, Switch, Table, Text, Title } from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data } from '../api/client';
import { useI18n } from '../i18n';
import { Breakdown, useDeviceStats } from './Dashboard';

export function DevicesPage() {
  const { t, time } = useI18n();
  const [onlineOnly, setOnlineOnly] = useState(false);
  const stats = useDeviceStats();
  const devices = useQuery({
    queryKey: ['devices', 'list', onlineOnly],
    queryFn: async () =>
      data(
        await api.GET('/api/admin/devices', {
          params: { query: { limit: '500', ...(onlineOnly ? { online: '1' } : {}) } },
        }),
      ),
    refetchInterval: 30_000,
  });
  // Online first, then most recently seen.
  const rows = [...(devices.data ?? [])].sort(
    (a, b) => Number(b.online) - Number(a.online) || b.lastSeenAt.localeCompare(a.lastSeenAt),
  );
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('devices')}</Title>
        <Switch
          label={t('onlineOnly')}
          checked={onlineOnly}
          onChange={(e) => setOnlineOnly(e.currentTarget.checked)}
          data-testid="online-only"
        />
      </Group>
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
      <Card withBorder>
        <Text size="sm" c="dimmed" mb="xs">
          {t('onlineNow')}: {stats.data?.online ?? '–'} · {t('totalDevices')}: {stats.data?.total ?? '–'}
        </Text>
        {rows.length === 0 ? (
          <Text c="dimmed">{t('noDevices')}</Text>
        ) : (
          <Table.ScrollContainer minWidth={800}>
            <Table striped>
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t('deviceId')}</Table.Th>
                  <Table.Th>{t('online')}</Table.Th>
                  <Table.Th>{t('appVersion')}</Table.Th>
                  <Table.Th>{t('os')}</Table.Th>
                  <Table.Th>{t('ip')}</Table.Th>
                  <Table.Th>{t('lastSeen')}</Table.Th>
                  <Table.Th>{t('firstSeen')}</Table.Th>
                  <Table.Th>{t('heartbeats')}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {rows.map((d) => (
                  <Table.Tr key={d.deviceId}>
                    <Table.Td ff="monospace">{d.deviceId}</Table.Td>
                    <Table.Td>
                      <Badge color={d.online ? 'green' : 'gray'}>{d.online ? t('online') : t('offline')}</Badge>
                    </Table.Td>
                    <Table.Td>{d.appVersion ?? '–'}</Table.Td>
                    <Table.Td>{[d.os, d.osVersion].filter(Boolean).join(' ') || '–'}</Table.Td>
                    <Table.Td>{d.ip ?? '–'}</Table.Td>
                    <Table.Td>{time(d.lastSeenAt)}</Table.Td>
                    <Table.Td>{time(d.firstSeenAt)}</Table.Td>
                    <Table.Td>{d.heartbeatCount}</Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </Table.ScrollContainer>
        )}
      </Card>
    </Stack>
  );
}
