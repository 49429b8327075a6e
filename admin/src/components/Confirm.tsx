import { Button, type ButtonProps, Group, Modal, Text } from '@mantine/core';
import { useDisclosure } from '@mantine/hooks';
import type { ReactNode } from 'react';
import { useI18n } from '../i18n';

/** A button that asks before it acts (every destructive action). */
export function ConfirmButton(
  props: ButtonProps & { message: string; onConfirm: () => unknown; children: ReactNode; 'data-testid'?: string },
) {
  const { message, onConfirm, children, ...buttonProps } = props;
  const { t } = useI18n();
  const [opened, { open, close }] = useDisclosure(false);
  return (
    <>
      <Button color="red" variant="light" size="xs" {...buttonProps} onClick={open}>
        {children}
      </Button>
      <Modal opened={opened} onClose={close} title={t('confirm')} centered>
        <Text mb="md">{message}</Text>
        <Group justify="flex-end">
          <Button variant="default" onClick={close}>
            {t('cancel')}
          </Button>
          <Button
            color="red"
            data-testid="confirm-yes"
            onClick={() => {
              close();
              void onConfirm();
            }}
          >
            {t('confirm')}
          </Button>
        </Group>
      </Modal>
    </>
  );
}
