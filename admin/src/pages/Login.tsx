import { Alert, Button, Center, Group, Paper, PasswordInput, Stack, TextInput, Title } from '@mantine/core';
import { useMutation } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data } from '../api/client';
import { LanguageSwitch } from '../App';
import { describeError } from '../errors';
import { useI18n } from '../i18n';

export function LoginPage({ onLoggedIn }: { onLoggedIn: (user: { id: string; username: string }) => void }) {
  const { t } = useI18n();
  const [username, setUsername] = useState('admin');
  const [password, setPassword] = useState('');
  const login = useMutation({
    mutationFn: async () => data(await api.POST('/api/admin/login', { body: { username, password } })),
    onSuccess: (result) => onLoggedIn(result.user),
  });
  return (
    <Center mih="100vh" bg="gray.0">
      <Paper withBorder shadow="sm" p="xl" w={380} radius="md">
        <form
          onSubmit={(e) => {
            e.preventDefault();
            login.mutate();
          }}
        >
          <Stack>
            <Group justify="space-between">
              <Title order={3}>{t('loginTitle')}</Title>
              <LanguageSwitch />
            </Group>
            {login.isError && (
              <Alert color="red" data-testid="login-error">
                {describeError(login.error, t)}
              </Alert>
            )}
            <TextInput label={t('username')} value={username} onChange={(e) => setUsername(e.currentTarget.value)} name="username" required />
            <PasswordInput label={t('password')} value={password} onChange={(e) => setPassword(e.currentTarget.value)} name="password" required />
            <Button type="submit" loading={login.isPending} data-testid="login-submit">
              {t('login')}
            </Button>
          </Stack>
        </form>
      </Paper>
    </Center>
  );
}
