import {
  Badge,
  Button,
  Card,
  Group,
  Modal,
  NumberInput,
  Stack,
  Switch,
  Table,
  Text,
  Textarea,
  TextInput,
  Title,
} from '@mantine/core';
import { useDisclosure } from '@mantine/hooks';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data, type Version } from '../api/client';
import { BuildForm, buildBody, type BuildFields, buildFields, emptyBuild } from '../components/BuildForm';
import { ConfirmButton } from '../components/Confirm';
import { ScheduledBadge } from '../components/Schedule';
import { FileSignatureBadge, formatBytes, Sha256 } from '../components/Upload';
import { useI18n } from '../i18n';
import { useWrite } from '../write';
import { RolloutBadge, RolloutPanel } from './Rollout';

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
        {withSlug && (
          <TextInput label={t('slug')} value={value.slug} onChange={set('slug')} required data-testid="pkg-slug" />
        )}
        <TextInput
          label={t('nameZh')}
          value={value.nameZh}
          onChange={set('nameZh')}
          required
          data-testid="pkg-name-zh"
        />
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

interface VersionFormValue extends BuildFields {
  versionCode: number | string;
  forceUpdate: boolean;
  minVersion: string;
}

const emptyVersion: VersionFormValue = { ...emptyBuild, versionCode: '', forceUpdate: false, minVersion: '' };

function versionForm(v: Version): VersionFormValue {
  return { ...buildFields(v), versionCode: v.versionCode, forceUpdate: v.forceUpdate, minVersion: v.minVersion ?? '' };
}

function versionBody(v: VersionFormValue) {
  return {
    ...buildBody(v),
    versionCode: Number(v.versionCode),
    forceUpdate: v.forceUpdate,
    minVersion: v.minVersion.trim() === '' ? null : v.minVersion.trim(),
  };
}

/** Publishes a new version, or (`editing`) corrects any field of one: only the changed fields are sent, so its counters stay. */
function VersionForm({ packageId, editing, onDone }: { packageId: string; editing?: Version; onDone: () => void }) {
  const { t } = useI18n();
  return (
    <BuildForm
      initial={editing === undefined ? emptyVersion : versionForm(editing)}
      editing={editing}
      body={versionBody}
      create={async (body) =>
        data(await api.POST('/api/software/{id}/versions', { params: { path: { id: packageId } }, body }))
      }
      update={async (id, body) =>
        data(
          await api.PUT('/api/software/versions/{versionId}', {
            params: { path: { versionId: id } },
            body,
          }),
        )
      }
      invalidate={KEY}
      onDone={onDone}
      testId="ver"
      versionPlaceholder="1.2.0"
      beside={(value, set) => (
        <NumberInput
          label={t('versionCode')}
          value={value.versionCode}
          onChange={(c) => set('versionCode', c)}
          required
          min={0}
          allowDecimal={false}
          data-testid="ver-code"
        />
      )}
      beforeSchedule={(value, set) => (
        <Group grow>
          <TextInput
            label={t('minVersion')}
            value={value.minVersion}
            onChange={(e) => set('minVersion', e.currentTarget.value)}
            data-testid="ver-min-version"
          />
          <Switch
            label={t('forceUpdate')}
            checked={value.forceUpdate}
            onChange={(e) => set('forceUpdate', e.currentTarget.checked)}
            mt="lg"
            data-testid="ver-force"
          />
        </Group>
      )}
    />
  );
}

const DELTA_COLORS = { pending: 'gray', ready: 'green', skipped: 'yellow', failed: 'red' } as const;

/** The delta updates to a version: each one's size and the bytes it saves a player against the full file. */
function Deltas({ version }: { version: Version }) {
  const { t } = useI18n();
  if (version.deltas === undefined || version.deltas.length === 0) return null;
  return (
    <Stack gap={2} mt={4} data-testid="deltas">
      {version.deltas.map((d) => (
        <Group key={d.fromVersionCode} gap={4} wrap="nowrap" data-testid={`delta-${d.fromVersionCode}`}>
          <Text size="xs" c="dimmed" style={{ whiteSpace: 'nowrap' }}>
            {t('deltaFrom', { code: String(d.fromVersionCode) })}
          </Text>
          {d.status === 'ready' && d.fileSize !== null ? (
            <Text size="xs" style={{ whiteSpace: 'nowrap' }} title={d.sha256 ?? undefined}>
              {formatBytes(d.fileSize)} ·{' '}
              <span data-testid="delta-saves">
                {t('deltaSaves', {
                  bytes: formatBytes(version.fileSize - d.fileSize),
                  percent: String(Math.round((100 * (version.fileSize - d.fileSize)) / Math.max(1, version.fileSize))),
                })}
              </span>
            </Text>
          ) : (
            <Badge size="xs" variant="light" color={DELTA_COLORS[d.status]}>
              {t(`delta_${d.status}`)}
            </Badge>
          )}
        </Group>
      ))}
    </Stack>
  );
}

/** A package with every version, scheduled ones included (the administrators' read). */
function usePackageDetail(packageId: string) {
  const { lang } = useI18n();
  return useQuery({
    queryKey: [...KEY, packageId, lang],
    queryFn: async () =>
      data(
        await api.GET('/api/admin/software/{idOrSlug}', { params: { path: { idOrSlug: packageId }, query: { lang } } }),
      ),
  });
}

function Versions({ packageId }: { packageId: string }) {
  const { t, time } = useI18n();
  const [editing, setEditing] = useState<Version | null>(null);
  const [rolloutId, setRolloutId] = useState<string | null>(null);
  const detail = usePackageDetail(packageId);
  const update = useWrite({
    mutationFn: async (args: { id: string; body: { isLatest?: boolean; forceUpdate?: boolean } }) =>
      data(
        await api.PUT('/api/software/versions/{versionId}', {
          params: { path: { versionId: args.id } },
          body: args.body,
        }),
      ),
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
  const rollout = versions.find((v) => v.id === rolloutId);
  if (versions.length === 0)
    return (
      <Text c="dimmed" size="sm">
        {detail.isPending ? t('loading') : t('noVersions')}
      </Text>
    );
  return (
    <Table.ScrollContainer minWidth={1000}>
      <Table striped data-testid={`versions-${packageId}`}>
        <Table.Thead>
          <Table.Tr>
            <Table.Th>{t('version')}</Table.Th>
            <Table.Th>{t('versionCode')}</Table.Th>
            <Table.Th>{t('file')}</Table.Th>
            <Table.Th>{t('downloadsCol')}</Table.Th>
            <Table.Th>{t('rollout')}</Table.Th>
            <Table.Th>{t('forceUpdate')}</Table.Th>
            <Table.Th>{t('minVersion')}</Table.Th>
            <Table.Th>{t('created_at')}</Table.Th>
            <Table.Th>{t('actions')}</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {versions.map((v) => (
            <Table.Tr key={v.id} data-testid={`version-${v.version}`}>
              <Table.Td miw={240}>
                <Group gap={6}>
                  <Text fw={500}>{v.version}</Text>
                  {v.isLatest && <Badge color="green">{t('latest')}</Badge>}
                  {v.downloadType === 'url' && <Badge variant="outline">URL</Badge>}
                </Group>
                <ScheduledBadge publishAt={v.publishAt} />
                <Text size="xs" c="dimmed" lineClamp={2}>
                  {v.changelog}
                </Text>
              </Table.Td>
              <Table.Td>{v.versionCode}</Table.Td>
              <Table.Td>
                <Text size="sm">{v.downloadType === 'local' ? formatBytes(v.fileSize) : '–'}</Text>
                <Sha256 value={v.sha256} short />
                <Deltas version={v} />
                <FileSignatureBadge item={v} />
              </Table.Td>
              <Table.Td>
                <Text size="sm" data-testid="downloads">
                  {v.downloadCount}
                </Text>
                <Text size="xs" c="dimmed" style={{ whiteSpace: 'nowrap' }}>
                  {t('launcherDownloads')}: <span data-testid="launcher-downloads">{v.launcherDownloadCount}</span>
                </Text>
              </Table.Td>
              <Table.Td>
                <RolloutBadge version={v} />
              </Table.Td>
              <Table.Td>
                <Switch
                  size="xs"
                  checked={v.forceUpdate}
                  onChange={(e) => update.mutate({ id: v.id, body: { forceUpdate: e.currentTarget.checked } })}
                />
              </Table.Td>
              <Table.Td>{v.minVersion ?? '–'}</Table.Td>
              <Table.Td>{time(v.createdAt)}</Table.Td>
              <Table.Td miw={170}>
                <Group gap={4}>
                  <Button size="xs" variant="default" onClick={() => setEditing(v)} data-testid="edit-version">
                    {t('edit')}
                  </Button>
                  <Button size="xs" variant="light" onClick={() => setRolloutId(v.id)} data-testid="open-rollout">
                    {t('rollout')}
                  </Button>
                  {!v.isLatest && (
                    <Button
                      size="xs"
                      variant="light"
                      onClick={() => update.mutate({ id: v.id, body: { isLatest: true } })}
                    >
                      {t('setLatest')}
                    </Button>
                  )}
                  <ConfirmButton
                    message={t('confirmDelete', { name: v.version })}
                    onConfirm={() => remove.mutate(v.id)}
                  >
                    {t('delete')}
                  </ConfirmButton>
                </Group>
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
      <Modal
        opened={editing !== null}
        onClose={() => setEditing(null)}
        title={`${t('editVersion')} · ${editing?.version ?? ''}`}
        size="lg"
      >
        {editing !== null && <VersionForm packageId={packageId} editing={editing} onDone={() => setEditing(null)} />}
      </Modal>
      <Modal
        opened={rollout !== undefined}
        onClose={() => setRolloutId(null)}
        title={t('rolloutOf', { version: rollout?.version ?? '' })}
        size="xl"
      >
        {rollout !== undefined && <RolloutPanel version={rollout} />}
      </Modal>
    </Table.ScrollContainer>
  );
}

type Pkg = {
  id: string;
  slug: string;
  name: string;
  nameZh: string;
  nameEn: string;
  descriptionZh: string;
  descriptionEn: string;
};

function PackageCard({ pkg }: { pkg: Pkg }) {
  const { t } = useI18n();
  const detail = usePackageDetail(pkg.id);
  const [renaming, rename] = useDisclosure(false);
  const [adding, add] = useDisclosure(false);
  const update = useWrite({
    mutationFn: async (body: {
      slug: string;
      nameZh: string;
      nameEn: string;
      descriptionZh: string;
      descriptionEn: string;
    }) => data(await api.PUT('/api/software/{id}', { params: { path: { id: pkg.id } }, body })),
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
            {pkg.slug} · {t('versions')}: {detail.data?.versions.length ?? '–'}
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
    mutationFn: async (body: {
      slug: string;
      nameZh: string;
      nameEn: string;
      descriptionZh: string;
      descriptionEn: string;
    }) => data(await api.POST('/api/software', { body })),
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
      {list.data?.map((pkg) => (
        <PackageCard key={pkg.id} pkg={pkg} />
      ))}
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
