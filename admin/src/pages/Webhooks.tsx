import {
  Alert,
  Badge,
  Button,
  Card,
  Code,
  Group,
  Modal,
  MultiSelect,
  Select,
  Stack,
  Switch,
  Table,
  Text,
  TextInput,
  Title,
} from '@mantine/core';
import { useDisclosure } from '@mantine/hooks';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { WEBHOOK_EVENTS, type WebhookEventName } from '../../../src/domain/webhook-events';
import { api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { useI18n } from '../i18n';
import { useWrite } from '../write';

const KEY = ['webhooks'] as const;
type Format = 'json' | 'discord';

function useWebhooks() {
  return useQuery({ queryKey: KEY, queryFn: async () => data(await api.GET('/api/admin/webhooks')) });
}
type Webhook = NonNullable<ReturnType<typeof useWebhooks>['data']>[number];

/** The signing secret, shown once after a webhook is made or its secret rotated. */
function SecretOnce({ secret, onClose }: { secret: string | null; onClose: () => void }) {
  const { t } = useI18n();
  if (secret === null) return null;
  return (
    <Alert color="yellow" title={t('webhookSecretOnce')} withCloseButton onClose={onClose} data-testid="webhook-secret">
      <Code fz="sm">{secret}</Code>
    </Alert>
  );
}

function NewWebhook({ onSecret }: { onSecret: (secret: string) => void }) {
  const { t } = useI18n();
  const [url, setUrl] = useState('');
  const [format, setFormat] = useState<Format>('json');
  const [events, setEvents] = useState<string[]>(['release.published']);
  const create = useWrite({
    mutationFn: async () =>
      data(
        await api.POST('/api/admin/webhooks', {
          body: { url: url.trim(), format, events: events as WebhookEventName[] },
        }),
      ),
    invalidate: KEY,
    success: 'webhookCreated',
    onDone: (created) => {
      setUrl('');
      if (created.secret !== undefined) onSecret(created.secret);
    },
  });
  return (
    <Card withBorder>
      <Title order={4} mb="sm">
        {t('newWebhook')}
      </Title>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create.mutate();
        }}
      >
        <Stack>
          <Group align="flex-start" grow>
            <TextInput
              label={t('webhookUrl')}
              placeholder="https://"
              value={url}
              onChange={(e) => setUrl(e.currentTarget.value)}
              required
              data-testid="webhook-url"
            />
            <Select
              label={t('webhookFormat')}
              data={[
                { value: 'json', label: t('webhookFormatJson') },
                { value: 'discord', label: 'Discord' },
              ]}
              value={format}
              onChange={(v) => v && setFormat(v as Format)}
              allowDeselect={false}
              data-testid="webhook-format"
            />
          </Group>
          <MultiSelect
            label={t('webhookEvents')}
            data={[...WEBHOOK_EVENTS]}
            value={events}
            onChange={setEvents}
            required
            data-testid="webhook-events"
          />
          <Group justify="flex-end">
            <Button
              type="submit"
              loading={create.isPending}
              disabled={url.trim() === '' || events.length === 0}
              data-testid="webhook-create"
            >
              {t('createWebhook')}
            </Button>
          </Group>
        </Stack>
      </form>
    </Card>
  );
}

function Deliveries({ webhook }: { webhook: Webhook }) {
  const { t, time } = useI18n();
  const [opened, { open, close }] = useDisclosure(false);
  const deliveries = useQuery({
    queryKey: [...KEY, webhook.id, 'deliveries'],
    queryFn: async () =>
      data(await api.GET('/api/admin/webhooks/{id}/deliveries', { params: { path: { id: webhook.id } } })),
    enabled: opened,
    refetchInterval: opened ? 2000 : false,
  });
  const color = { delivered: 'green', pending: 'yellow', failed: 'red' } as const;
  return (
    <>
      <Button size="xs" variant="default" onClick={open} data-testid="webhook-deliveries">
        {t('webhookDeliveries')}
      </Button>
      <Modal opened={opened} onClose={close} size="xl" title={`${t('webhookDeliveries')} · ${webhook.url}`}>
        <Table data-testid="deliveries">
          <Table.Thead>
            <Table.Tr>
              <Table.Th>{t('webhookEvent')}</Table.Th>
              <Table.Th>{t('status')}</Table.Th>
              <Table.Th>{t('webhookAttempts')}</Table.Th>
              <Table.Th>{t('webhookLastResult')}</Table.Th>
              <Table.Th>{t('created_at')}</Table.Th>
            </Table.Tr>
          </Table.Thead>
          <Table.Tbody>
            {deliveries.data?.map((d) => (
              <Table.Tr key={d.id} data-testid="delivery">
                <Table.Td>
                  <Code>{d.event}</Code>
                </Table.Td>
                <Table.Td>
                  <Badge color={color[d.status]} data-testid="delivery-status">
                    {t(`delivery_${d.status}`)}
                  </Badge>
                </Table.Td>
                <Table.Td>{d.attempts}</Table.Td>
                <Table.Td>
                  <Text size="xs">{d.lastError ?? (d.lastStatus === null ? '–' : `HTTP ${d.lastStatus}`)}</Text>
                  {d.nextAttemptAt !== null && (
                    <Text size="xs" c="dimmed">
                      {t('webhookNextAttempt', { at: time(d.nextAttemptAt, 'time') })}
                    </Text>
                  )}
                </Table.Td>
                <Table.Td>{time(d.createdAt)}</Table.Td>
              </Table.Tr>
            ))}
          </Table.Tbody>
        </Table>
        {deliveries.data?.length === 0 && (
          <Text c="dimmed" size="sm" mt="sm">
            {t('webhookNoDeliveries')}
          </Text>
        )}
      </Modal>
    </>
  );
}

function WebhookRow({ webhook, onSecret }: { webhook: Webhook; onSecret: (secret: string) => void }) {
  const { t } = useI18n();
  const update = useWrite({
    mutationFn: async (body: { enabled?: boolean; rotateSecret?: boolean }) =>
      data(await api.PUT('/api/admin/webhooks/{id}', { params: { path: { id: webhook.id } }, body })),
    invalidate: KEY,
    success: 'saved',
    onDone: (changed) => changed.secret !== undefined && onSecret(changed.secret),
  });
  const remove = useWrite({
    mutationFn: async () =>
      data(await api.DELETE('/api/admin/webhooks/{id}', { params: { path: { id: webhook.id } } })),
    invalidate: KEY,
    success: 'deleted',
  });
  const test = useWrite({
    mutationFn: async () =>
      data(await api.POST('/api/admin/webhooks/{id}/test', { params: { path: { id: webhook.id } } })),
    invalidate: [...KEY, webhook.id, 'deliveries'],
  });
  const result = test.data;
  return (
    <Table.Tr data-testid="webhook">
      <Table.Td>
        <Text size="sm" ff="monospace" style={{ wordBreak: 'break-all' }}>
          {webhook.url}
        </Text>
        <Text size="xs" c="dimmed">
          {webhook.format === 'discord' ? 'Discord' : t('webhookFormatJson')} · {t('webhookSecret')}{' '}
          {webhook.secretHint}
        </Text>
      </Table.Td>
      <Table.Td>
        <Group gap={4}>
          {webhook.events.map((e) => (
            <Badge key={e} variant="light" size="sm">
              {e}
            </Badge>
          ))}
        </Group>
      </Table.Td>
      <Table.Td>
        <Switch
          checked={webhook.enabled}
          onChange={(e) => update.mutate({ enabled: e.currentTarget.checked })}
          aria-label={t('enabled')}
          data-testid="webhook-enabled"
        />
      </Table.Td>
      <Table.Td>
        <Group gap={4} wrap="nowrap" justify="flex-end">
          <Button
            size="xs"
            variant="light"
            loading={test.isPending}
            onClick={() => test.mutate()}
            data-testid="webhook-test"
          >
            {t('webhookSendTest')}
          </Button>
          <Deliveries webhook={webhook} />
          <ConfirmButton
            size="xs"
            color="orange"
            message={t('confirmRotateWebhookSecret')}
            onConfirm={() => update.mutate({ rotateSecret: true })}
            data-testid="webhook-rotate"
          >
            {t('webhookRotateSecret')}
          </ConfirmButton>
          <ConfirmButton
            size="xs"
            color="red"
            message={t('confirmDeleteWebhook', { url: webhook.url })}
            onConfirm={() => remove.mutate()}
            data-testid="webhook-delete"
          >
            {t('delete')}
          </ConfirmButton>
        </Group>
        {result !== undefined && (
          <Text
            size="xs"
            c={result.status === 'delivered' ? 'green' : 'red'}
            ta="right"
            data-testid="webhook-test-result"
          >
            {result.status === 'delivered'
              ? t('webhookTestDelivered', { status: String(result.lastStatus) })
              : t('webhookTestFailed', { error: result.lastError ?? '' })}
          </Text>
        )}
      </Table.Td>
    </Table.Tr>
  );
}

/** Webhooks (owners): receivers of publication events, with a test button and the delivery log. */
export function WebhooksPage() {
  const { t } = useI18n();
  const webhooks = useWebhooks();
  const [secret, setSecret] = useState<string | null>(null);
  return (
    <Stack>
      <Title order={2}>{t('webhooks')}</Title>
      <Text c="dimmed" size="sm">
        {t('webhooksHint')}
      </Text>
      <SecretOnce secret={secret} onClose={() => setSecret(null)} />
      <NewWebhook onSecret={setSecret} />
      <Card withBorder>
        <Table.ScrollContainer minWidth={900}>
          <Table data-testid="webhooks">
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t('webhookUrl')}</Table.Th>
                <Table.Th>{t('webhookEvents')}</Table.Th>
                <Table.Th>{t('enabled')}</Table.Th>
                <Table.Th />
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {webhooks.data?.map((w) => (
                <WebhookRow key={w.id} webhook={w} onSecret={setSecret} />
              ))}
            </Table.Tbody>
          </Table>
        </Table.ScrollContainer>
        {webhooks.data?.length === 0 && (
          <Text c="dimmed" size="sm" mt="sm">
            {t('noWebhooks')}
          </Text>
        )}
      </Card>
    </Stack>
  );
}
