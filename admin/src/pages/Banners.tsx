import { Badge, Card, Group, Image, NumberInput, SimpleGrid, Stack, Switch, Text, Title } from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { type Answer, api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { UploadButton } from '../components/Upload';
import { useI18n } from '../i18n';
import { useWrite } from '../write';

type Banner = Answer<'/api/banners', 'get'>[number];

const KEY = ['banners'] as const;

/** An order field that saves when it loses focus. */
export function OrderInput({ value, onSave }: { value: number; onSave: (value: number) => void }) {
  const { t } = useI18n();
  const [draft, setDraft] = useState<number | string>(value);
  return (
    <NumberInput
      size="xs"
      w={90}
      label={t('sortOrder')}
      value={draft}
      allowDecimal={false}
      onChange={setDraft}
      onBlur={() => {
        const next = Number(draft);
        if (Number.isInteger(next) && next !== value) onSave(next);
      }}
    />
  );
}

function BannerCard({ banner }: { banner: Banner }) {
  const { t } = useI18n();
  const update = useWrite({
    mutationFn: async (body: { enabled?: boolean; sortOrder?: number }) =>
      data(await api.PUT('/api/banners/{id}', { params: { path: { id: banner.id } }, body })),
    invalidate: KEY,
    success: 'saved',
  });
  const remove = useWrite({
    mutationFn: async () => data(await api.DELETE('/api/banners/{id}', { params: { path: { id: banner.id } } })),
    invalidate: KEY,
    success: 'deleted',
  });
  return (
    <Card withBorder data-testid="banner-card">
      <Card.Section>
        <Image src={banner.imageUrl} h={140} fit="cover" alt="" style={{ opacity: banner.enabled ? 1 : 0.35 }} />
      </Card.Section>
      <Group justify="space-between" mt="sm" align="flex-end">
        <OrderInput value={banner.sortOrder} onSave={(sortOrder) => update.mutate({ sortOrder })} />
        <Stack gap={4} align="flex-end">
          {banner.enabled ? <Badge color="green">{t('enabled')}</Badge> : <Badge color="gray">{t('disabled')}</Badge>}
          <Switch
            label={t('enabled')}
            checked={banner.enabled}
            onChange={(e) => update.mutate({ enabled: e.currentTarget.checked })}
            data-testid="banner-enabled"
          />
        </Stack>
      </Group>
      <Group justify="flex-end" mt="sm">
        <ConfirmButton
          message={t('confirmDelete', { name: banner.imageUrl.split('/').pop() ?? '' })}
          onConfirm={() => remove.mutate()}
        >
          {t('delete')}
        </ConfirmButton>
      </Group>
    </Card>
  );
}

export function BannersPage() {
  const { t } = useI18n();
  const list = useQuery({ queryKey: KEY, queryFn: async () => data(await api.GET('/api/banners')) });
  const add = useWrite({
    mutationFn: async (imageUrl: string) =>
      data(
        await api.POST('/api/banners', {
          body: { imageUrl, sortOrder: (list.data?.at(-1)?.sortOrder ?? -1) + 1, enabled: true },
        }),
      ),
    invalidate: KEY,
    success: 'created',
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('banners')}</Title>
        <UploadButton
          label={t('newBanner')}
          accept="image/*"
          onUploaded={(r) => add.mutate(r.filePath)}
          testId="banner-input"
        />
      </Group>
      {list.data?.length === 0 && <Text c="dimmed">{t('noBanners')}</Text>}
      <SimpleGrid cols={{ base: 1, sm: 2, lg: 3 }}>
        {list.data?.map((banner) => (
          <BannerCard key={banner.id} banner={banner} />
        ))}
      </SimpleGrid>
    </Stack>
  );
}
