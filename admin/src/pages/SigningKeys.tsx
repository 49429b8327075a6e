import { Badge, Card, Code, Group, Stack, Table, Text, Title } from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { useI18n } from '../i18n';
import { useWrite } from '../write';

const KEY = ['signing-keys'] as const;

/** SHA-256 of the raw public key bytes as 16 groups of 4 hex digits; null where the browser offers no Web Crypto (a console not on HTTPS or localhost). */
async function fingerprint(publicKey: string): Promise<string | null> {
  if (globalThis.crypto?.subtle === undefined) return null;
  const raw = Uint8Array.from(atob(publicKey), (c) => c.charCodeAt(0));
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', raw));
  const hex = Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
  return hex.match(/.{4}/g)!.join(' ');
}

function Fingerprint({ publicKey }: { publicKey: string }) {
  const { t } = useI18n();
  const value = useQuery({
    queryKey: [...KEY, 'fingerprint', publicKey],
    queryFn: () => fingerprint(publicKey),
    staleTime: Infinity,
  });
  if (value.data === undefined) return null;
  return value.data === null ? (
    <Text size="xs" c="dimmed">
      {t('fingerprintNeedsHttps')}
    </Text>
  ) : (
    <Text size="sm" ff="monospace" data-testid="fingerprint">
      {value.data}
    </Text>
  );
}

export function SigningKeysPage() {
  const { t, time } = useI18n();
  const keys = useQuery({ queryKey: KEY, queryFn: async () => data(await api.GET('/api/signing-keys')) });
  const rotate = useWrite({
    mutationFn: async () => data(await api.POST('/api/admin/signing-keys/rotate')),
    invalidate: KEY,
    success: 'keyRotated',
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('signingKeys')}</Title>
        <ConfirmButton
          color="orange"
          variant="filled"
          size="sm"
          message={t('confirmRotate')}
          onConfirm={() => rotate.mutate()}
          loading={rotate.isPending}
          data-testid="rotate-key"
        >
          {t('rotateKey')}
        </ConfirmButton>
      </Group>
      <Text c="dimmed" size="sm">
        {t('signingKeysHint')}
      </Text>
      <Card withBorder>
        <Table.ScrollContainer minWidth={900}>
          <Table data-testid="signing-keys">
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t('keyId')}</Table.Th>
                <Table.Th>{t('fingerprint')}</Table.Th>
                <Table.Th>{t('status')}</Table.Th>
                <Table.Th>{t('created_at')}</Table.Th>
                <Table.Th>{t('endorsement')}</Table.Th>
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {keys.data?.map((key) => (
                <Table.Tr key={key.keyId} data-testid={`key-${key.keyId}`}>
                  <Table.Td>
                    <Text ff="monospace" size="sm">
                      {key.keyId}
                    </Text>
                    <Text size="xs" c="dimmed">
                      {key.algorithm}
                    </Text>
                  </Table.Td>
                  <Table.Td>
                    <Fingerprint publicKey={key.publicKey} />
                    <Code fz="xs">{key.publicKey}</Code>
                  </Table.Td>
                  <Table.Td miw={110}>
                    {key.status === 'active' ? (
                      <Badge color="green">{t('keyActive')}</Badge>
                    ) : (
                      <Badge color="gray">{t('keyRetired')}</Badge>
                    )}
                  </Table.Td>
                  <Table.Td>{time(key.createdAt)}</Table.Td>
                  <Table.Td>
                    {key.endorsement === null ? (
                      <Text size="xs" c="dimmed">
                        {t('firstKey')}
                      </Text>
                    ) : (
                      <Text size="xs">{t('endorsedBy', { keyId: key.endorsement.keyId })}</Text>
                    )}
                  </Table.Td>
                </Table.Tr>
              ))}
            </Table.Tbody>
          </Table>
        </Table.ScrollContainer>
      </Card>
    </Stack>
  );
}
