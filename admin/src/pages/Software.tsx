import { Badge, Button, Card, Group, Modal, NumberInput, Stack, Switch, Table, Text, Textarea, TextInput, Title } from '@mantine/core';
import { useDisclosure } from '@mantine/hooks';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { emptySource, FileSource, sourceBody, sourceReady } from '../components/FileSource';
import { formatBytes } from '../components/Upload';
import { notifyError } from '../errors';
import { useI18n } from '../i18n';
import { useWrite } from '../write';

const KEY = ['software'] as const;

function PackageForm({
  initial,
  onSubmit,
  submitLabel,
  withSlug,
}: {
  initial: { slug: string; nameZh: string; nameEn: string; descriptionZh: string; descriptionEn: string };
  onSubmit: (value: typeof initial) => void;
  submitLabel: string;
  withSlug: boolean;
}) {
  const { t } = useI18n();
  const [value, setValue] = useState(initial);
  const set = (key: keyof typeof initial) => (e: { currentTarget: { value: string } }) =>
    setValue({ ...value, [key]: e.currentTarget.value });
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        onSubmit(value);
      }}
    >
      <Stack>
        {withSlug && <TextInput label={t('slug')} value={value.slug} onChange={set('slug')} required data-testid="pkg-slug" />}
        <TextInput label={t('nameZh')} value={value.nameZh} onChange={set('nameZh')} required data-testid="pkg-name-zh" />
        <TextInput label={t('nameEn')} value={value.nameEn} onChange={set('nameEn')} data-testid="pkg-name-en" />
        <Textarea label={`${t('description')} (中文)`} value={value.descriptionZh} onChange={set('descriptionZh')} />
        <Textarea label={`${t('description')} (English)`} value={value.descriptionEn} onChange={set('descriptionEn')} />
        <Button type="submit" data-testid="pkg-submit">
          {submitLabel}
        </Button>
      </Stack>
    </form>
  );
}

function VersionForm({ packageId, onDone }: { packageId: string; onDone: () => void }) {
  const { t } = useI18n();
  const [version, setVersion] = useState('');
  const [versionCode, setVersionCode] = useState<number | string>('');
  const [changelogZh, setChangelogZh] = useState('');
  const [changelogEn, setChangelogEn] = useState('');
  const [forceUpdate, setForceUpdate] = useState(false);
  const [minVersion, setMinVersion] = useState('');
  const [source, setSource] = useState(emptySource);
  const create = useWrite({
    mutationFn: async () =>
      data(
        await api.POST('/api/software/{id}/versions', {
          params: { path: { id: packageId } },
          body: {
            version,
            versionCode: Number(versionCode),
            changelogZh,
            changelogEn,
            forceUpdate,
            minVersion: minVersion.trim() === '' ? null : minVersion.trim(),
            ...sourceBody(source),
          },
        }),
      ),
    invalidate: KEY,
    success: 'created',
    onDone,
  });
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        if (!sourceReady(source)) return notifyError(new Error(t('fileRequired')), t);
        create.mutate();
      }}
    >
      <Stack>
        <Group grow>
          <TextInput label={t('version')} value={version} onChange={(e) => setVersion(e.currentTarget.value)} required placeholder="1.2.0" data-testid="ver-version" />
          <NumberInput label={t('versionCode')} value={versionCode} onChange={setVersionCode} required min={0} allowDecimal={false} data-testid="ver-code" />
        </Group>
        <FileSource value={source} onChange={setSource} />
        <Textarea label={t('changelogZh')} value={changelogZh} onChange={(e) => setChangelogZh(e.currentTarget.value)} autosize minRows={3} data-testid="ver-changelog-zh" />
        <Textarea label={t('changelogEn')} value={changelogEn} onChange={(e) => setChangelogEn(e.currentTarget.value)} autosize minRows={3} data-testid="ver-changelog-en" />
        <Group grow>
          <TextInput label={t('minVersion')} value={minVersion} onChange={(e) => setMinVersion(e.currentTarget.value)} />
          <Switch label={t('forceUpdate')} checked={forceUpdate} onChange={(e) => setForceUpdate(e.currentTarget.checked)} mt="lg" />
        </Group>
        <Button type="submit" loading={create.isPending} data-testid="ver-submit">
          {t('create')}
        </Button>
      </Stack>
    </form>
  );
}

function Versions({ packageId }: { packageId: string }) {
  const { t, lang } = useI18n();
  const detail = useQuery({
    queryKey: [...KEY, packageId, lang],
    queryFn: async () => data(await api.GET('/api/software/{idOrSlug}', { params: { path: { idOrSlug: packageId }, query: { lang } } })),
  });
  const update = useWrite({
    mutationFn: async (args: { id: string; body: { isLatest?: boolean; forceUpdate?: boolean } }) =>
      data(await api.PUT('/api/software/versions/{versionId}', { params: { path: { versionId: args.id } }, body: args.body })),
    invalidate: KEY,
    success: 'saved',
  });
  const remove = useWrite({
    mutationFn: async (id: string) =>
      data(await api.DELETE('/api/software/versions/{versionId}', { params: { path: { versionId: id } } })),
    invalidate: KEY,
    success: 'deleted',
  });
  const versions = detail.data?.versions ?? [];
  if (versions.length === 0) return <Text c="dimmed" size="sm">{detail.isPending ? t('loading') : t('noVersions')}</Text>;
  return (
    <Table.ScrollContainer minWidth={900}>
      <Table striped data-testid={`versions-${packageId}`}>
        <Table.Thead>
          <Table.Tr>
            <Table.Th>{t('version')}</Table.Th>
            <Table.Th>{t('versionCode')}</Table.Th>
            <Table.Th>{t('size')}</Table.Th>
            <Table.Th>{t('downloadsCol')}</Table.Th>
            <Table.Th>{t('launcherDownloads')}</Table.Th>
            <Table.Th>{t('forceUpdate')}</Table.Th>
            <Table.Th>{t('minVersion')}</Table.Th>
            <Table.Th>{t('created_at')}</Table.Th>
            <Table.Th>{t('actions')}</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {versions.map((v) => (
            <Table.Tr key={v.id}>
              <Table.Td>
                <Group gap={6}>
                  <Text fw={500}>{v.version}</Text>
                  {v.isLatest && <Badge color="green">{t('latest')}</Badge>}
                  {v.downloadType === 'url' && <Badge variant="outline">URL</Badge>}
                </Group>
                <Text size="xs" c="dimmed" lineClamp={2}>
                  {v.changelog}
                </Text>
              </Table.Td>
              <Table.Td>{v.versionCode}</Table.Td>
              <Table.Td>{v.downloadType === 'local' ? formatBytes(v.fileSize) : '–'}</Table.Td>
              <Table.Td>{v.downloadCount}</Table.Td>
              <Table.Td>{v.launcherDownloadCount}</Table.Td>
              <Table.Td>
                <Switch size="xs" checked={v.forceUpdate} onChange={(e) => update.mutate({ id: v.id, body: { forceUpdate: e.currentTarget.checked } })} />
              </Table.Td>
              <Table.Td>{v.minVersion ?? '–'}</Table.Td>
              <Table.Td>{new Date(v.createdAt).toLocaleString()}</Table.Td>
              <Table.Td>
                <Group gap={4} wrap="nowrap">
                  {!v.isLatest && (
                    <Button size="xs" variant="light" onClick={() => update.mutate({ id: v.id, body: { isLatest: true } })}>
                      {t('setLatest')}
                    </Button>
                  )}
                  <ConfirmButton message={t('confirmDelete', { name: v.version })} onConfirm={() => remove.mutate(v.id)}>
                    {t('delete')}
                  </ConfirmButton>
                </Group>
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </Table.ScrollContainer>
  );
}

type Pkg = { id: string; slug: string; name: string; nameZh: string; nameEn: string; descriptionZh: string; descriptionEn: string; _count: { versions: number } };

function PackageCard({ pkg }: { pkg: Pkg }) {
  const { t } = useI18n();
  const [renaming, rename] = useDisclosure(false);
  const [adding, add] = useDisclosure(false);
  const update = useWrite({
    mutationFn: async (body: { slug: string; nameZh: string; nameEn: string; descriptionZh: string; descriptionEn: string }) =>
      data(await api.PUT('/api/software/{id}', { params: { path: { id: pkg.id } }, body })),
    invalidate: KEY,
    success: 'saved',
    onDone: rename.close,
  });
  const remove = useWrite({
    mutationFn: async () => data(await api.DELETE('/api/software/{id}', { params: { path: { id: pkg.id } } })),
    invalidate: KEY,
    success: 'deleted',
  });
  return (
    <Card withBorder data-testid={`package-${pkg.slug}`}>
      <Group justify="space-between" mb="sm">
        <div>
          <Title order={4}>{pkg.name}</Title>
          <Text size="sm" c="dimmed" ff="monospace">
            {pkg.slug} · {t('versions')}: {pkg._count.versions}
          </Text>
        </div>
        <Group gap="xs">
          <Button size="xs" onClick={add.open} data-testid="new-version">
            {t('newVersion')}
          </Button>
          <Button size="xs" variant="default" onClick={rename.open}>
            {t('rename')}
          </Button>
          <ConfirmButton message={t('confirmDelete', { name: pkg.name })} onConfirm={() => remove.mutate()}>
            {t('delete')}
          </ConfirmButton>
        </Group>
      </Group>
      <Versions packageId={pkg.id} />
      <Modal opened={renaming} onClose={rename.close} title={t('rename')} size="lg">
        <PackageForm initial={pkg} withSlug submitLabel={t('save')} onSubmit={(v) => update.mutate(v)} />
      </Modal>
      <Modal opened={adding} onClose={add.close} title={`${t('newVersion')} · ${pkg.name}`} size="lg">
        <VersionForm packageId={pkg.id} onDone={add.close} />
      </Modal>
    </Card>
  );
}

export function SoftwarePage() {
  const { t, lang } = useI18n();
  const [creating, create] = useDisclosure(false);
  const list = useQuery({
    queryKey: [...KEY, 'list', lang],
    queryFn: async () => data(await api.GET('/api/software', { params: { query: { lang } } })),
  });
  const add = useWrite({
    mutationFn: async (body: { slug: string; nameZh: string; nameEn: string; descriptionZh: string; descriptionEn: string }) =>
      data(await api.POST('/api/software', { body })),
    invalidate: KEY,
    success: 'created',
    onDone: create.close,
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('software')}</Title>
        <Button onClick={create.open} data-testid="new-package">
          {t('newPackage')}
        </Button>
      </Group>
      {list.data?.length === 0 && <Text c="dimmed">{t('noPackages')}</Text>}
      {list.data?.map((pkg) => <PackageCard key={pkg.id} pkg={pkg} />)}
      <Modal opened={creating} onClose={create.close} title={t('newPackage')} size="lg">
        <PackageForm
          initial={{ slug: '', nameZh: '', nameEn: '', descriptionZh: '', descriptionEn: '' }}
          withSlug
          submitLabel={t('create')}
          onSubmit={(v) => add.mutate(v)}
        />
      </Modal>
    </Stack>
  );
}
