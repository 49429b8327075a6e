import { Badge, Button, Card, Code, Group, Stack, Table, Text, TextInput, Title } from '@mantine/core';
import { useDebouncedValue } from '@mantine/hooks';
import { useInfiniteQuery } from '@tanstack/react-query';
import { Fragment, useState } from 'react';
import { api, data, nextCursor } from '../api/client';
import { useI18n } from '../i18n';
import { OwnersOnly } from '../roles';
import { useRole } from '../session';

/** Records per page. */
const PAGE = 50;

/** The audit log (owners only): newest first, filtered by account and target, one page after another. */
export function AuditPage() {
  const { t, time } = useI18n();
  const owner = useRole() === 'owner';
  const [actorInput, setActor] = useState('');
  const [targetInput, setTarget] = useState('');
  const [actor] = useDebouncedValue(actorInput.trim(), 300);
  const [target] = useDebouncedValue(targetInput.trim(), 300);
  const [open, setOpen] = useState<string | null>(null);
  const records = useInfiniteQuery({
    queryKey: ['audit', actor, target],
    initialPageParam: null as string | null,
    queryFn: async ({ pageParam }) => {
      const answer = await api.GET('/api/admin/audit', {
        params: {
          query: {
            limit: String(PAGE),
            ...(pageParam !== null ? { cursor: pageParam } : {}),
            ...(actor !== '' ? { actor } : {}),
            ...(target !== '' ? { target } : {}),
          },
        },
      });
      return { records: data(answer), next: nextCursor(answer.response) };
    },
    getNextPageParam: (page) => page.next,
    enabled: owner,
  });
  if (!owner) {
    return <OwnersOnly title="audit" />;
  }
  const rows = records.data?.pages.flatMap((page) => page.records) ?? [];
  return (
    <Stack>
      <Title order={2}>{t('audit')}</Title>
      <Text size="sm" c="dimmed">
        {t('auditHint')}
      </Text>
      <Group>
        <TextInput
          label={t('auditActor')}
          value={actorInput}
          onChange={(e) => setActor(e.currentTarget.value)}
          data-testid="audit-actor"
        />
        <TextInput
          label={t('auditTarget')}
          value={targetInput}
          onChange={(e) => setTarget(e.currentTarget.value)}
          data-testid="audit-target"
        />
      </Group>
      <Card withBorder>
        {records.isSuccess && rows.length === 0 ? (
          <Text c="dimmed">{t('auditEmpty')}</Text>
        ) : (
          <Table.ScrollContainer minWidth={900}>
            <Table striped data-testid="audit-table">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t('auditWhen')}</Table.Th>
                  <Table.Th>{t('auditActor')}</Table.Th>
                  <Table.Th>{t('ip')}</Table.Th>
                  <Table.Th>{t('auditAction')}</Table.Th>
                  <Table.Th>{t('auditTarget')}</Table.Th>
                  <Table.Th>{t('auditChanges')}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {rows.map((r) => {
                  const fields = Object.keys(r.changes);
                  return (
                    <Fragment key={r.id}>
                      <Table.Tr data-testid="audit-row">
                        <Table.Td>{time(r.at)}</Table.Td>
                        <Table.Td>
                          {r.actor}
                          {r.tokenName !== null && (
                            <Badge ml="xs" variant="light" title={t('auditToken')}>
                              {r.tokenName}
                            </Badge>
                          )}
                        </Table.Td>
                        <Table.Td ff="monospace">{r.ip}</Table.Td>
                        <Table.Td ff="monospace">{r.action}</Table.Td>
                        <Table.Td>
                          {r.targetType}
                          {r.targetId !== null && (
                            <Text span ff="monospace" size="xs" c="dimmed" ml={4}>
                              {r.targetId}
                            </Text>
                          )}
                        </Table.Td>
                        <Table.Td>
                          {fields.length === 0 ? (
                            '–'
                          ) : (
                            <Button
                              variant="subtle"
                              size="compact-xs"
                              onClick={() => setOpen(open === r.id ? null : r.id)}
                              data-testid="audit-changes"
                            >
                              {fields.join(', ')}
                            </Button>
                          )}
                        </Table.Td>
                      </Table.Tr>
                      {open === r.id && (
                        <Table.Tr>
                          <Table.Td colSpan={6}>
                            <Code block data-testid="audit-changes-json">
                              {JSON.stringify(r.changes, null, 2)}
                            </Code>
                          </Table.Td>
                        </Table.Tr>
                      )}
                    </Fragment>
                  );
                })}
              </Table.Tbody>
            </Table>
          </Table.ScrollContainer>
        )}
        {records.hasNextPage && (
          <Group justify="center" mt="sm">
            <Button
              variant="light"
              loading={records.isFetchingNextPage}
              onClick={() => void records.fetchNextPage()}
              data-testid="audit-older"
            >
              {t('auditOlder')}
            </Button>
          </Group>
        )}
      </Card>
    </Stack>
  );
}
