import { AppShell, Badge, Burger, Button, Center, Group, Loader, NavLink, Text, Title } from '@mantine/core';
import { useDisclosure } from '@mantine/hooks';
import { useQueryClient } from '@tanstack/react-query';
import { useEffect } from 'react';
import { api, setUnauthorizedHandler } from './api/client';
import { LanguageSwitch } from './components/LanguageSwitch';
import { notifyError } from './errors';
import { type MessageKey, useI18n } from './i18n';
import { AccountPage } from './pages/Account';
import { AddonDetailPage, AddonsPage } from './pages/Addons';
import { ArticlesPage } from './pages/Articles';
import { BannersPage } from './pages/Banners';
import { DashboardPage } from './pages/Dashboard';
import { DevicesPage } from './pages/Devices';
import { GalleryPage } from './pages/Gallery';
import { GamePage } from './pages/Game';
import { LoginPage } from './pages/Login';
import { SigningKeysPage } from './pages/SigningKeys';
import { SoftwarePage } from './pages/Software';
import { AuditPage } from './pages/Audit';
import { TeamPage } from './pages/Team';
import { WebhooksPage } from './pages/Webhooks';
import { ROLE_LABEL, RoleGuard } from './roles';
import { useLink, useRouter } from './router';
import { changeSession, ME_KEY, useMe } from './session';

const NAV: { to: string; label: MessageKey; ownersOnly?: true }[] = [
  { to: '/', label: 'dashboard' },
  { to: '/software', label: 'software' },
  { to: '/game', label: 'game' },
  { to: '/addons', label: 'addons' },
  { to: '/articles', label: 'articles' },
  { to: '/banners', label: 'banners' },
  { to: '/gallery', label: 'gallery' },
  { to: '/devices', label: 'devices' },
  { to: '/signing-keys', label: 'signingKeys' },
  { to: '/account', label: 'account' },
  { to: '/team', label: 'team', ownersOnly: true },
  { to: '/webhooks', label: 'webhooks', ownersOnly: true },
  { to: '/audit', label: 'audit', ownersOnly: true },
];

function NavItem({
  to,
  label,
  active,
  onNavigate,
}: {
  to: string;
  label: string;
  active: boolean;
  onNavigate: () => void;
}) {
  const link = useLink(to);
  return (
    <NavLink
      component="a"
      href={link.href}
      label={label}
      active={active}
      data-testid={`nav-${to === '/' ? 'dashboard' : to.slice(1)}`}
      onClick={(e) => {
        link.onClick(e);
        onNavigate();
      }}
    />
  );
}

function Page({ route }: { route: string }) {
  if (route === '/' || route === '') return <DashboardPage />;
  if (route === '/software') return <SoftwarePage />;
  if (route === '/game') return <GamePage />;
  if (route === '/addons') return <AddonsPage />;
  const addon = /^\/addons\/([^/]+)$/.exec(route);
  if (addon?.[1]) return <AddonDetailPage id={decodeURIComponent(addon[1])} />;
  if (route === '/articles') return <ArticlesPage />;
  if (route === '/banners') return <BannersPage />;
  if (route === '/gallery') return <GalleryPage />;
  if (route === '/devices') return <DevicesPage />;
  if (route === '/signing-keys') return <SigningKeysPage />;
  if (route === '/account') return <AccountPage />;
  if (route === '/team') return <TeamPage />;
  if (route === '/webhooks') return <WebhooksPage />;
  if (route === '/audit') return <AuditPage />;
  return <DashboardPage />;
}

export function App() {
  const { t, lang } = useI18n();
  const { route, navigate } = useRouter();
  const queryClient = useQueryClient();
  const me = useMe();
  const [opened, { toggle, close }] = useDisclosure();

  useEffect(() => {
    document.documentElement.lang = lang;
    document.title = t('appTitle');
  }, [lang, t]);

  useEffect(() => {
    setUnauthorizedHandler(() => {
      queryClient.setQueryData(ME_KEY, null);
    });
    return () => setUnauthorizedHandler(null);
  }, [queryClient]);

  if (me.isPending) {
    return (
      <Center h="100vh">
        <Loader />
      </Center>
    );
  }
  if (!me.data) {
    return (
      <LoginPage
        onLoggedIn={(user) => {
          changeSession(queryClient, user);
          if (route === '/login') navigate('/');
        }}
      />
    );
  }

  const section = '/' + (route.split('/')[1] ?? '');
  const role = me.data.role;
  const logout = () => {
    void api
      .POST('/api/admin/logout')
      .catch((error: unknown) => notifyError(error, t))
      .finally(() => changeSession(queryClient, null));
  };
  return (
    <AppShell
      header={{ height: 56 }}
      navbar={{ width: 220, breakpoint: 'sm', collapsed: { mobile: !opened } }}
      padding="md"
    >
      <AppShell.Header>
        <Group h="100%" px="md" justify="space-between">
          <Group>
            <Burger opened={opened} onClick={toggle} hiddenFrom="sm" size="sm" />
            <Title order={4}>{t('appTitle')}</Title>
          </Group>
          <Group>
            <Text size="sm" c="dimmed" visibleFrom="sm" data-testid="signed-in-as">
              {t('signedInAs', { name: me.data.username })}
            </Text>
            <Badge variant="light" visibleFrom="sm" data-testid="my-role">
              {t(ROLE_LABEL[role])}
            </Badge>
            <LanguageSwitch />
            <Button size="xs" variant="default" onClick={logout} data-testid="header-logout">
              {t('logout')}
            </Button>
          </Group>
        </Group>
      </AppShell.Header>
      <AppShell.Navbar p="xs">
        {NAV.filter((item) => !item.ownersOnly || role === 'owner').map((item) => (
          <NavItem key={item.to} to={item.to} label={t(item.label)} active={section === item.to} onNavigate={close} />
        ))}
      </AppShell.Navbar>
      <AppShell.Main>
        <RoleGuard section={section}>
          <Page route={route} />
        </RoleGuard>
      </AppShell.Main>
    </AppShell>
  );
}
