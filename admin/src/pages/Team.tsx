import {
  Badge,
  Button,
  Card,
  Group,
  Modal,
  PasswordInput,
  Select,
  Stack,
  Table,
  Text,
  TextInput,
  Title,
} from '@mantine/core';
import { useDisclosure } from '@mantine/hooks';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { useI18n } from '../i18n';
import { OwnersOnly, ROLE_LABEL, ROLES, type Role } from '../roles';
import { ME_KEY, useMe, useRole } from '../session';
import { useWrite } from '../write';

export const USERS_KEY = ['users'] as const;
const MIN_PASSWORD = 6;

/** The administrator accounts (owners only: everyone else is refused them). */
export function useAccounts() {
  const role = useRole();
  return useQuery({
    queryKey: USERS_KEY,
    queryFn: async () => data(await api.GET('/api/admin/users')),
    enabled: role === 'owner',
  });
}

type Account = NonNullable<ReturnType<typeof useAccounts>['data']>[number];
type AccountChange = { role?: Role; disabled?: boolean; password?: string };

/** The roles as options of a Select, in the reader's language. */
export function useRoleOptions(roles: readonly Role[] = ROLES) {
  const { t } = useI18n();
  return roles.map((role) => ({ value: role, label: t(ROLE_LABEL[role]) }));
}

function useUpdateAccount(id: string, onDone?: () => void) {
  return useWrite({
    mutationFn: async (body: AccountChange) =>
      data(await api.PUT('/api/admin/users/{id}', { params: { path: { id } }, body })),
    // One's own role may be what changed.
    invalidate: [USERS_KEY, ME_KEY],
    success: 'saved',
    onDone,
  });
}

function PasswordField(props: { label: string; value: string; onChange: (value: string) => void; testId: string }) {
  const { t } = useI18n();
  return (
    <PasswordInput
      label={props.label}
      value={props.value}
      onChange={(e) => props.onChange(e.currentTarget.value)}
      required
      error={props.value !== '' && props.value.length < MIN_PASSWORD ? t('passwordTooShort') : undefined}
      data-testid={props.testId}
    />
  );
}

function NewAccount() {
  const { t } = useI18n();
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const [role, setRole] = useState<Role>('editor');
  const roleOptions = useRoleOptions();
  const create = useWrite({
    mutationFn: async () =>
      data(await api.POST('/api/admin/users', { body: { username: username.trim(), password, role } })),
    invalidate: USERS_KEY,
    success: 'accountCreated',
    onDone: () => {
      setUsername('');
      setPassword('');
    },
  });
  return (
    <Card withBorder>
      <Title order={4} mb="sm">
        {t('newAccount')}
      </Title>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create.mutate();
        }}
      >
        <Group align="flex-start" grow>
          <TextInput
            label={t('username')}
            value={username}
            onChange={(e) => setUsername(e.currentTarget.value)}
            required
            data-testid="account-username"
          />
          <PasswordField label={t('password')} value={password} onChange={setPassword} testId="account-password" />
          <Select
            label={t('role')}
            data={roleOptions}
            value={role}
            onChange={(v) => v && setRole(v as Role)}
            allowDeselect={false}
            data-testid="account-role"
          />
        </Group>
        <Group justify="flex-end" mt="md">
          <Button
            type="submit"
            loading={create.isPending}
            disabled={password.length < MIN_PASSWORD}
            data-testid="account-create"
          >
            {t('createAccount')}
          </Button>
        </Group>
      </form>
    </Card>
  );
}

function ResetPassword({ account }: { account: Account }) {
  const { t } = useI18n();
  const [opened, { open, close }] = useDisclosure(false);
  const [password, setPassword] = useState('');
  const reset = useUpdateAccount(account.id, () => {
    setPassword('');
    close();
  });
  return (
    <>
      <Button size="xs" variant="default" onClick={open} data-testid="reset-password">
        {t('resetPassword')}
      </Button>
      <Modal opened={opened} onClose={close} title={`${t('resetPassword')} · ${account.username}`}>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            reset.mutate({ password });
          }}
        >
          <Stack>
            <Text size="sm" c="dimmed">
              {t('resetPasswordNote')}
            </Text>
            <PasswordField
              label={t('newPassword')}
              value={password}
              onChange={setPassword}
              testId="reset-password-input"
            />
            <Button
              type="submit"
              loading={reset.isPending}
              disabled={password.length < MIN_PASSWORD}
              data-testid="reset-password-submit"
            >
              {t('resetPassword')}
            </Button>
          </Stack>
        </form>
      </Modal>
    </>
  );
}

function AccountRow({ account, self }: { account: Account; self: boolean }) {
  const { t, time } = useI18n();
  const roleOptions = useRoleOptions();
  const update = useUpdateAccount(account.id);
  return (
    <Table.Tr data-testid={`account-${account.username}`}>
      <Table.Td>
        <Group gap={6}>
          <Text fw={500}>{account.username}</Text>
          {self && <Badge variant="outline">{t('you')}</Badge>}
        </Group>
      </Table.Td>
      <Table.Td>
        <Select
          size="xs"
          w={140}
          data={roleOptions}
          value={account.role}
          onChange={(v) => v && v !== account.role && update.mutate({ role: v as Role })}
          allowDeselect={false}
          aria-label={t('role')}
          data-testid="account-role-select"
        />
      </Table.Td>
      <Table.Td>
        {account.totpEnabled ? <Badge color="green">{t('totpOn')}</Badge> : <Badge color="gray">{t('totpOff')}</Badge>}
      </Table.Td>
      <Table.Td>
        {account.disabled ? (
          <Badge color="red" data-testid="account-status">
            {t('disabled')}
          </Badge>
        ) : (
          <Badge color="green" data-testid="account-status">
            {t('enabled')}
          </Badge>
        )}
      </Table.Td>
      <Table.Td>{time(account.createdAt)}</Table.Td>
      <Table.Td>
        <Group gap={4} wrap="nowrap" justify="flex-end">
          <ResetPassword account={account} />
          {account.disabled ? (
            <ConfirmButton
              color="green"
              message={t('confirmEnableAccount', { name: account.username })}
              onConfirm={() => update.mutate({ disabled: false })}
              data-testid="account-enable"
            >
              {t('enableAccount')}
            </ConfirmButton>
          ) : (
            <ConfirmButton
              message={t('confirmDisableAccount', { name: account.username })}
              onConfirm={() => update.mutate({ disabled: true })}
              data-testid="account-disable"
            >
              {t('disableAccount')}
            </ConfirmButton>
          )}
        </Group>
      </Table.Td>
    </Table.Tr>
  );
}

export function TeamPage() {
  const { t } = useI18n();
  const me = useMe();
  const accounts = useAccounts();
  if (me.data?.role !== 'owner') {
    return <OwnersOnly title="team" />;
  }
  return (
    <Stack>
      <Title order={2}>{t('team')}</Title>
      <Text c="dimmed" size="sm">
        {t('teamIntro')}
      </Text>
      <NewAccount />
      <Card withBorder>
        <Table.ScrollContainer minWidth={800}>
          <Table data-testid="accounts">
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t('username')}</Table.Th>
                <Table.Th>{t('role')}</Table.Th>
                <Table.Th>{t('twoFactor')}</Table.Th>
                <Table.Th>{t('status')}</Table.Th>
                <Table.Th>{t('created_at')}</Table.Th>
                <Table.Th />
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {accounts.data?.map((account) => (
                <AccountRow key={account.id} account={account} self={account.id === me.data?.id} />
              ))}
            </Table.Tbody>
          </Table>
        </Table.ScrollContainer>
      </Card>
    </Stack>
  );
}
