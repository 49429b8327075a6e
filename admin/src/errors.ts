import { notifications } from '@mantine/notifications';
import { ApiError } from './api/client';
import type { Translate } from './i18n';

/** The operator-facing sentence for a failed call: what happened, in words, with the service's message. */
export function describeError(error: unknown, t: Translate): string {
  if (!(error instanceof ApiError)) return error instanceof Error ? error.message : String(error);
  const msg = error.message;
  const status = error.status;
  switch (status) {
    case 0:
      return t('eNetwork');
    case 400:
      return t('e400', { msg });
    case 401:
      return error.path === '/api/admin/login' ? t('e401login') : t('e401');
    case 403:
      return t('e403', { msg });
    case 404:
      return t('e404', { msg });
    case 409:
      // Accounts: a taken username (create), or a change that would leave no enabled owner (update).
      if (error.path === '/api/admin/users') return t('eUsernameTaken');
      if (error.path.startsWith('/api/admin/users/')) return t('eLastOwner');
      return t('e409', { msg });
    case 413:
      return t('e413', { msg });
    case 415:
      return t('e415', { msg });
    case 429:
      return t('e429');
    default:
      return status >= 500 ? t('e500', { status }) : t('eOther', { status, msg });
  }
}

export function notifyError(error: unknown, t: Translate) {
  notifications.show({ color: 'red', title: t('error'), message: describeError(error, t), autoClose: 8000 });
}

export function notifySuccess(message: string) {
  notifications.show({ color: 'green', message, autoClose: 2500 });
}
