import { Alert, Fieldset, Stack, Title } from '@mantine/core';
import type { ReactNode } from 'react';
import { covers, ROLES, type Role } from '../../src/domain/roles';
import { type MessageKey, useI18n } from './i18n';
import { useRole } from './session';

/** The service's own role rules (src/domain/roles.ts), shared so that the console shows what the service allows. */
export { covers, ROLES, type Role };

export const ROLE_LABEL: Record<Role, MessageKey> = {
  owner: 'roleOwner',
  publisher: 'rolePublisher',
  editor: 'roleEditor',
};

/**
 * Who besides owners may change what a console section shows, as the service checks it per module
 * (`changesBy`): a section not listed here has nothing to change, or only one's own account.
 */
const SECTION_WRITERS: Record<string, readonly Role[]> = {
  '/software': ['publisher'],
  '/game': ['publisher'],
  '/addons': ['publisher'],
  '/articles': ['editor'],
  '/banners': ['editor'],
  '/gallery': ['editor'],
  // Rotating the keys launchers pin: owners only.
  '/signing-keys': [],
};

export function mayChange(role: Role, section: string): boolean {
  const writers = SECTION_WRITERS[section];
  return writers === undefined || role === 'owner' || writers.includes(role);
}

/**
 * A section as the role may use it: everything it reads stays visible, and when the role may not
 * change it, every control inside is disabled (a disabled fieldset) under a note that says why.
 */
export function RoleGuard({ section, children }: { section: string; children: ReactNode }) {
  const { t } = useI18n();
  const role = useRole();
  if (mayChange(role, section)) return children;
  return (
    <Stack>
      <Alert color="gray" data-testid="read-only">
        {t('readOnlyRole', { role: t(ROLE_LABEL[role]) })}
      </Alert>
      <Fieldset disabled variant="unstyled" p={0} m={0}>
        {children}
      </Fieldset>
    </Stack>
  );
}

/** What a page for owners shows anyone else: its title and a note that it is for owners. */
export function OwnersOnly({ title }: { title: MessageKey }) {
  const { t } = useI18n();
  return (
    <Stack>
      <Title order={2}>{t(title)}</Title>
      <Alert color="gray" data-testid="owners-only">
        {t('ownersOnly')}
      </Alert>
    </Stack>
  );
}
