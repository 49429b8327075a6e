import { Alert, Button, Card, Code, CopyButton, Group, PasswordInput, Stack, Table, Text, TextInput, Title } from '@mantine/core';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { describeError, notifyError, notifySuccess } from '../errors';
import { useI18n } from '../i18n';
import { ME_KEY } from '../App';
import { useWrite } from '../write';

function ChangePassword() {
  const { t } = useI18n();
  const [currentPassword, setCurrent] = useState('');
  const [newPassword, setNew] = useState('');
  const change = useMutation({
    mutationFn: async () => data(await api.POST('/api/admin/change-password', { body: { currentPassword, newPassword } })),
    onSuccess: () => {
      notifySuccess(t('passwordChanged'));
      setCurrent('');
      setNew('');
    },
  });
  return (
    <Card withBorder>
      <Title order={4} mb="sm">
        {t('changePassword')}
      </Title>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          change.mutate();
        }}
      >
        <Stack maw={420}>
          {change.isError && (
            <Alert color="red" data-testid="password-error">
              {describeError(change.error, t)}
            </Alert>
          )}
          {change.isSuccess && (
            <Alert color="green" data-testid="password-changed">
              {t('passwordChanged')}
            </Alert>
          )}
          <PasswordInput label={t('currentPassword')} value={currentPassword} onChange={(e) => setCurrent(e.currentTarget.value)} required data-testid="current-password" />
          <PasswordInput
            label={t('newPassword')}
            value={newPassword}
            onChange={(e) => setNew(e.currentTarget.value)}
            required
            error={newPassword !== '' && newPassword.length < 6 ? t('passwordTooShort') : undefined}
            data-testid="new-password"
          />
          <Button type="submit" loading={change.isPending} disabled={newPassword.length < 6} data-testid="change-password-submit">
            {t('changePassword')}
          </Button>
        </Stack>
      </form>
    </Card>
  );
}

function Tokens() {
  const { t } = useI18n();
  const [name, setName] = useState('');
  const [fresh, setFresh] = useState<{ name: string; token: string } | null>(null);
  const tokens = useQuery({ queryKey: ['tokens'], queryFn: async () => data(await api.GET('/api/admin/tokens')) });
  // No success notification: the new token itself is shown, once.
  const create = useWrite({
    mutationFn: async () => data(await api.POST('/api/admin/tokens', { body: { name } })),
    invalidate: ['tokens'],
    onDone: (token) => {
      setFresh({ name: token.name, token: token.token });
      setName('');
    },
  });
  const revoke = useWrite({
    mutationFn: async (id: string) => data(await api.DELETE('/api/admin/tokens/{id}', { params: { path: { id } } })),
    invalidate: ['tokens'],
    success: 'deleted',
  });
  return (
    <Card withBorder>
      <Title order={4} mb="sm">
        {t('apiTokens')}
      </Title>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create.mutate();
        }}
      >
        <Group align="flex-end">
          <TextInput label={t('tokenName')} value={name} onChange={(e) => setName(e.currentTarget.value)} required placeholder="ci-publish" data-testid="token-name" />
          <Button type="submit" loading={create.isPending} data-testid="create-token">
            {t('createToken')}
          </Button>
        </Group>
      </form>
      {fresh && (
        <Alert color="yellow" mt="md" title={`${fresh.name}: ${t('tokenOnce')}`} withCloseButton onClose={() => setFresh(null)}>
          <Group>
            <Code data-testid="new-token">{fresh.token}</Code>
            <CopyButton value={fresh.token}>
              {({ copied, copy }) => (
                <Button size="xs" variant="light" onClick={copy}>
                  {copied ? t('copied') : t('copy')}
                </Button>
              )}
            </CopyButton>
          </Group>
        </Alert>
      )}
      {tokens.data?.length === 0 ? (
        <Text c="dimmed" mt="md">
          {t('noTokens')}
        </Text>
      ) : (
        <Table mt="md" data-testid="tokens">
          <Table.Thead>
            <Table.Tr>
              <Table.Th>{t('tokenName')}</Table.Th>
              <Table.Th>{t('created_at')}</Table.Th>
              <Table.Th />
            </Table.Tr>
          </Table.Thead>
          <Table.Tbody>
            {tokens.data?.map((token) => (
              <Table.Tr key={token.id}>
                <Table.Td>{token.name}</Table.Td>
                <Table.Td>{new Date(token.createdAt).toLocaleString()}</Table.Td>
                <Table.Td ta="right">
                  <ConfirmButton message={t('confirmRevoke', { name: token.name })} onConfirm={() => revoke.mutate(token.id)}>
                    {t('revoke')}
                  </ConfirmButton>
                </Table.Td>
              </Table.Tr>
            ))}
          </Table.Tbody>
        </Table>
      )}
    </Card>
  );
}

export function AccountPage() {
  const { t } = useI18n();
  const queryClient = useQueryClient();
  const logout = useMutation({
    mutationFn: async () => data(await api.POST('/api/admin/logout')),
    onSettled: () => {
      queryClient.removeQueries({ predicate: (query) => query.queryKey[0] !== ME_KEY[0] });
      queryClient.setQueryData(ME_KEY, null);
    },
    onError: (error) => notifyError(error, t),
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('account')}</Title>
        <Button variant="default" onClick={() => logout.mutate()} loading={logout.isPending} data-testid="logout">
          {t('logout')}
        </Button>
      </Group>
      <ChangePassword />
      <Tokens />
    </Stack>
  );
}
