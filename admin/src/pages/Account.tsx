import {
  Alert,
  Badge,
  Button,
  Card,
  Code,
  CopyButton,
  Group,
  PasswordInput,
  Select,
  SimpleGrid,
  Stack,
  Table,
  Text,
  TextInput,
  Title,
} from '@mantine/core';
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { QRCodeSVG } from 'qrcode.react';
import { useState } from 'react';
import { api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { describeError, notifyError, notifySuccess } from '../errors';
import { useI18n } from '../i18n';
import { covers, ROLE_LABEL, ROLES, type Role } from '../roles';
import { changeSession, ME_KEY, useMe, useRole } from '../session';
import { useWrite } from '../write';
import { USERS_KEY, useRoleOptions } from './Team';

function ChangePassword() {
  const { t } = useI18n();
  const [currentPassword, setCurrent] = useState('');
  const [newPassword, setNew] = useState('');
  const change = useMutation({
    mutationFn: async () =>
      data(await api.POST('/api/admin/change-password', { body: { currentPassword, newPassword } })),
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
          <PasswordInput
            label={t('currentPassword')}
            value={currentPassword}
            onChange={(e) => setCurrent(e.currentTarget.value)}
            required
            data-testid="current-password"
          />
          <PasswordInput
            label={t('newPassword')}
            value={newPassword}
            onChange={(e) => setNew(e.currentTarget.value)}
            required
            error={newPassword !== '' && newPassword.length < 6 ? t('passwordTooShort') : undefined}
            data-testid="new-password"
          />
          <Button
            type="submit"
            loading={change.isPending}
            disabled={newPassword.length < 6}
            data-testid="change-password-submit"
          >
            {t('changePassword')}
          </Button>
        </Stack>
      </form>
    </Card>
  );
}

function CopyValue({ value }: { value: string }) {
  const { t } = useI18n();
  return (
    <CopyButton value={value}>
      {({ copied, copy }) => (
        <Button size="xs" variant="light" onClick={copy}>
          {copied ? t('copied') : t('copy')}
        </Button>
      )}
    </CopyButton>
  );
}

function Tokens() {
  const { t, time } = useI18n();
  const [name, setName] = useState('');
  const myRole = useRole();
  // A token acts with a role no higher than its creator's.
  const roleOptions = useRoleOptions(ROLES.filter((role) => covers(myRole, role)));
  // The least role the account may grant is preselected (ROLES runs from the most to the least): a token
  // with more power than its job is the one that leaks.
  const [role, setRole] = useState<Role>(ROLES.filter((r) => covers(myRole, r)).at(-1) ?? myRole);
  const [fresh, setFresh] = useState<{ name: string; token: string } | null>(null);
  const tokens = useQuery({ queryKey: ['tokens'], queryFn: async () => data(await api.GET('/api/admin/tokens')) });
  // No success notification: the new token itself is shown, once.
  const create = useWrite({
    mutationFn: async () => data(await api.POST('/api/admin/tokens', { body: { name, role } })),
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
          <TextInput
            label={t('tokenName')}
            value={name}
            onChange={(e) => setName(e.currentTarget.value)}
            required
            placeholder="ci-publish"
            data-testid="token-name"
          />
          <Select
            label={t('role')}
            data={roleOptions}
            value={role}
            onChange={(v) => v && setRole(v as Role)}
            allowDeselect={false}
            w={160}
            data-testid="token-role"
          />
          <Button type="submit" loading={create.isPending} data-testid="create-token">
            {t('createToken')}
          </Button>
        </Group>
      </form>
      {fresh && (
        <Alert
          color="yellow"
          mt="md"
          title={`${fresh.name}: ${t('tokenOnce')}`}
          withCloseButton
          onClose={() => setFresh(null)}
        >
          <Group>
            <Code data-testid="new-token">{fresh.token}</Code>
            <CopyValue value={fresh.token} />
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
              <Table.Th>{t('role')}</Table.Th>
              <Table.Th>{t('created_at')}</Table.Th>
              <Table.Th />
            </Table.Tr>
          </Table.Thead>
          <Table.Tbody>
            {tokens.data?.map((token) => (
              <Table.Tr key={token.id}>
                <Table.Td>{token.name}</Table.Td>
                <Table.Td>{t(ROLE_LABEL[token.role])}</Table.Td>
                <Table.Td>{time(token.createdAt)}</Table.Td>
                <Table.Td ta="right">
                  <ConfirmButton
                    message={t('confirmRevoke', { name: token.name })}
                    onConfirm={() => revoke.mutate(token.id)}
                  >
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

/** The codes that log in once each without the app: shown right after enrolment, and never again. */
function RecoveryCodes({ codes, onClose }: { codes: string[]; onClose: () => void }) {
  const { t } = useI18n();
  return (
    <Alert color="yellow" title={t('recoveryTitle')} data-testid="recovery">
      <Stack>
        <Text size="sm">{t('recoveryNote')}</Text>
        <SimpleGrid cols={2} maw={360} spacing={4} data-testid="recovery-codes">
          {codes.map((code) => (
            <Code key={code}>{code}</Code>
          ))}
        </SimpleGrid>
        <Group>
          <CopyValue value={codes.join('\n')} />
          <Button size="xs" variant="default" onClick={onClose} data-testid="recovery-saved">
            {t('recoverySaved')}
          </Button>
        </Group>
      </Stack>
    </Alert>
  );
}

function TwoFactor() {
  const { t } = useI18n();
  const me = useMe();
  const enabled = me.data?.totpEnabled;
  const [enrolment, setEnrolment] = useState<{ secret: string; otpauthUrl: string } | null>(null);
  const [code, setCode] = useState('');
  const [recovery, setRecovery] = useState<string[] | null>(null);
  const [password, setPassword] = useState('');
  const enroll = useWrite({
    mutationFn: async () => data(await api.POST('/api/admin/totp/enroll')),
    invalidate: USERS_KEY,
    onDone: (started) => {
      setEnrolment(started);
      setCode('');
    },
  });
  const confirm = useWrite({
    mutationFn: async () => data(await api.POST('/api/admin/totp/confirm', { body: { code: code.trim() } })),
    invalidate: [USERS_KEY, ME_KEY],
    success: 'totpEnabled',
    onDone: (result) => {
      setEnrolment(null);
      setRecovery(result.recoveryCodes);
    },
  });
  const disable = useWrite({
    mutationFn: async () => data(await api.POST('/api/admin/totp/disable', { body: { password } })),
    invalidate: [USERS_KEY, ME_KEY],
    success: 'totpDisabled',
    onDone: () => {
      setPassword('');
    },
  });
  return (
    <Card withBorder data-testid="two-factor">
      <Group mb="sm">
        <Title order={4}>{t('totpTitle')}</Title>
        {enabled !== undefined && (
          <Badge color={enabled ? 'green' : 'gray'} data-testid="totp-status">
            {enabled ? t('totpOn') : t('totpOff')}
          </Badge>
        )}
      </Group>
      <Stack>
        <Text size="sm" c="dimmed">
          {t('totpIntro')}
        </Text>
        {recovery && <RecoveryCodes codes={recovery} onClose={() => setRecovery(null)} />}
        {enrolment ? (
          <Group align="flex-start" gap="xl">
            <QRCodeSVG
              value={enrolment.otpauthUrl}
              size={184}
              marginSize={2}
              title={t('totpScan')}
              data-testid="totp-qr"
            />
            <form
              onSubmit={(e) => {
                e.preventDefault();
                confirm.mutate();
              }}
            >
              <Stack maw={420}>
                <Text size="sm">{t('totpScan')}</Text>
                <Group gap="xs">
                  <Code data-testid="totp-secret">{enrolment.secret}</Code>
                  <CopyValue value={enrolment.secret} />
                </Group>
                <TextInput
                  label={t('totpCode')}
                  value={code}
                  onChange={(e) => setCode(e.currentTarget.value)}
                  inputMode="numeric"
                  autoComplete="one-time-code"
                  required
                  data-testid="totp-code"
                />
                <Group>
                  <Button type="submit" loading={confirm.isPending} data-testid="totp-confirm">
                    {t('totpConfirm')}
                  </Button>
                  <Button variant="default" onClick={() => setEnrolment(null)}>
                    {t('cancel')}
                  </Button>
                </Group>
              </Stack>
            </form>
          </Group>
        ) : (
          enabled !== true && (
            <Group>
              <Button onClick={() => enroll.mutate()} loading={enroll.isPending} data-testid="totp-enroll">
                {t('totpEnroll')}
              </Button>
            </Group>
          )
        )}
        {enabled !== false && !enrolment && (
          <form
            onSubmit={(e) => {
              e.preventDefault();
              disable.mutate();
            }}
          >
            <Group align="flex-end">
              <PasswordInput
                label={t('currentPassword')}
                description={t('totpDisableHint')}
                value={password}
                onChange={(e) => setPassword(e.currentTarget.value)}
                required
                w={300}
                data-testid="totp-disable-password"
              />
              <Button type="submit" color="red" variant="light" loading={disable.isPending} data-testid="totp-disable">
                {t('totpDisable')}
              </Button>
            </Group>
          </form>
        )}
      </Stack>
    </Card>
  );
}

export function AccountPage() {
  const { t } = useI18n();
  const queryClient = useQueryClient();
  const logout = useMutation({
    mutationFn: async () => data(await api.POST('/api/admin/logout')),
    onSettled: () => changeSession(queryClient, null),
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
      <TwoFactor />
      <Tokens />
    </Stack>
  );
}
