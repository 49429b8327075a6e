import { Alert, Button, Center, Group, Paper, PasswordInput, Stack, TextInput, Title } from '@mantine/core';
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import { ApiError, api, data } from '../api/client';
import { LanguageSwitch } from '../components/LanguageSwitch';
import { describeError } from '../errors';
import { useI18n } from '../i18n';
import { fetchMe, type Me } from '../session';

/** The login answer of an account with a second factor when the code is missing or wrong. */
function totpRequired(error: unknown): boolean {
  return error instanceof ApiError && error.details.totpRequired === true;
}

export function LoginPage({ onLoggedIn }: { onLoggedIn: (user: Me) => void }) {
  const { t } = useI18n();
  const [username, setUsername] = useState('admin');
  const [password, setPassword] = useState('');
  const [totp, setTotp] = useState('');
  const [askCode, setAskCode] = useState(false);
  const login = useMutation({
    mutationFn: async (code: string) => {
      data(
        await api.POST('/api/admin/login', { body: { username, password, ...(code === '' ? {} : { totp: code }) } }),
      );
      // The login answer names the user; `me` adds the role the console needs.
      return fetchMe();
    },
    onSuccess: (user) => onLoggedIn(user),
    onError: (error) => {
      if (totpRequired(error)) setAskCode(true);
    },
  });
  // Asked for the code without having given one: the code field says what to do, nothing failed.
  const codeMissing = totpRequired(login.error) && login.variables === '';
  return (
    <Center mih="100vh" bg="gray.0">
      <Paper withBorder shadow="sm" p="xl" w={380} radius="md">
        <form
          onSubmit={(e) => {
            e.preventDefault();
            login.mutate(askCode ? totp.trim() : '');
          }}
        >
          <Stack>
            <Group justify="space-between">
              <Title order={3}>{t('loginTitle')}</Title>
              <LanguageSwitch />
            </Group>
            {login.isError && !codeMissing && (
              <Alert color="red" data-testid="login-error">
                {totpRequired(login.error) ? t('totpWrong') : describeError(login.error, t)}
              </Alert>
            )}
            <TextInput
              label={t('username')}
              value={username}
              onChange={(e) => setUsername(e.currentTarget.value)}
              name="username"
              required
            />
            <PasswordInput
              label={t('password')}
              value={password}
              onChange={(e) => setPassword(e.currentTarget.value)}
              name="password"
              required
            />
            {askCode && (
              <TextInput
                label={t('totpLoginCode')}
                description={t('totpLoginHint')}
                value={totp}
                onChange={(e) => setTotp(e.currentTarget.value)}
                name="totp"
                autoComplete="one-time-code"
                autoFocus
                required
                data-testid="login-totp"
              />
            )}
            <Button type="submit" loading={login.isPending} data-testid="login-submit">
              {t('login')}
            </Button>
          </Stack>
        </form>
      </Paper>
    </Center>
  );
}
