import { Badge, Button, Card, Group, Image, SimpleGrid, Stack, Switch, Text, TextInput, Title } from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { type Answer, api, data, type RequestBody } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { UploadButton } from '../components/Upload';
import { useI18n } from '../i18n';
import { useWrite } from '../write';
import { OrderInput } from './Banners';

type GalleryImage = Answer<'/api/gallery', 'get'>[number];
type GalleryWrite = RequestBody<'/api/gallery/{id}', 'put'>;

const KEY = ['gallery'] as const;

function GalleryCard({ image }: { image: GalleryImage }) {
  const { t } = useI18n();
  const [titleZh, setTitleZh] = useState(image.titleZh);
  const [titleEn, setTitleEn] = useState(image.titleEn);
  const update = useWrite({
    mutationFn: async (body: GalleryWrite) =>
      data(await api.PUT('/api/gallery/{id}', { params: { path: { id: image.id } }, body })),
    invalidate: KEY,
    success: 'saved',
  });
  const remove = useWrite({
    mutationFn: async () => data(await api.DELETE('/api/gallery/{id}', { params: { path: { id: image.id } } })),
    invalidate: KEY,
    success: 'deleted',
  });
  const dirty = titleZh !== image.titleZh || titleEn !== image.titleEn;
  return (
    <Card withBorder data-testid="gallery-card">
      <Card.Section>
        <Image
          src={image.imageUrl}
          h={140}
          fit="cover"
          alt={image.title}
          style={{ opacity: image.enabled ? 1 : 0.35 }}
        />
      </Card.Section>
      <Stack gap="xs" mt="sm">
        <TextInput
          size="xs"
          label={t('titleZh')}
          value={titleZh}
          onChange={(e) => setTitleZh(e.currentTarget.value)}
          data-testid="gallery-title-zh"
        />
        <TextInput
          size="xs"
          label={t('titleEn')}
          value={titleEn}
          onChange={(e) => setTitleEn(e.currentTarget.value)}
          data-testid="gallery-title-en"
        />
        {dirty && (
          <Button size="xs" onClick={() => update.mutate({ titleZh, titleEn })} data-testid="gallery-save">
            {t('save')}
          </Button>
        )}
        <Group justify="space-between" align="flex-end">
          <OrderInput value={image.sortOrder} onSave={(sortOrder) => update.mutate({ sortOrder })} />
          <Stack gap={4} align="flex-end">
            {image.enabled ? <Badge color="green">{t('enabled')}</Badge> : <Badge color="gray">{t('disabled')}</Badge>}
            <Switch
              label={t('enabled')}
              checked={image.enabled}
              onChange={(e) => update.mutate({ enabled: e.currentTarget.checked })}
            />
          </Stack>
        </Group>
        <Group justify="flex-end">
          <ConfirmButton
            message={t('confirmDelete', { name: image.title || image.imageUrl.split('/').pop() || '' })}
            onConfirm={() => remove.mutate()}
          >
            {t('delete')}
          </ConfirmButton>
        </Group>
      </Stack>
    </Card>
  );
}

export function GalleryPage() {
  const { t, lang } = useI18n();
  const list = useQuery({
    queryKey: [...KEY, lang],
    queryFn: async () => data(await api.GET('/api/gallery', { params: { query: { lang } } })),
  });
  const add = useWrite({
    mutationFn: async (imageUrl: string) =>
      data(
        await api.POST('/api/gallery', {
          body: { imageUrl, titleZh: '', sortOrder: (list.data?.at(-1)?.sortOrder ?? -1) + 1, enabled: true },
        }),
      ),
    invalidate: KEY,
    success: 'created',
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('gallery')}</Title>
        <UploadButton
          label={t('newGalleryImage')}
          accept="image/*"
          onUploaded={(r) => add.mutate(r.filePath)}
          testId="gallery-input"
        />
      </Group>
      {list.data?.length === 0 && <Text c="dimmed">{t('noGallery')}</Text>}
      <SimpleGrid cols={{ base: 1, sm: 2, lg: 3 }}>
        {list.data?.map((image) => (
          <GalleryCard key={image.id} image={image} />
        ))}
      </SimpleGrid>
    </Stack>
  );
}
