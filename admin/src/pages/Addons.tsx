import {
  ActionIcon,
  Anchor,
  Autocomplete,
  Avatar,
  Badge,
  Button,
  Card,
  Checkbox,
  Group,
  Image,
  Modal,
  Select,
  SimpleGrid,
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
import { type Answer, api, data, type Paths, type RequestBody } from '../api/client';
import { BuildForm, buildBody, type BuildFields, buildFields, emptyBuild } from '../components/BuildForm';
import { ConfirmButton } from '../components/Confirm';
import { MarkdownEditor, MarkdownPreview } from '../components/Markdown';
import { ScheduledBadge } from '../components/Schedule';
import { FileSignatureBadge, formatBytes, ImageField, Sha256, UploadButton } from '../components/Upload';
import { useI18n } from '../i18n';
import { useLink, useRouter } from '../router';
import { useWrite } from '../write';

type Addon = Answer<'/api/addons', 'get'>[number];
type AddonWrite = RequestBody<'/api/addons/{id}', 'put'>;

const KEY = ['addons'] as const;
const CATEGORIES = ['general', 'ui', 'quest', 'combat'];

type AddonFormValue = Required<Omit<AddonWrite, 'name' | 'summary' | 'description' | 'iconUrl'>> & {
  iconUrl: string | null;
};

function AddonForm({
  initial,
  onSubmit,
  submitLabel,
  busy,
}: {
  initial: AddonFormValue;
  onSubmit: (v: AddonFormValue) => void;
  submitLabel: string;
  busy: boolean;
}) {
  const { t } = useI18n();
  const [v, setV] = useState(initial);
  const text = (key: keyof AddonFormValue) => (e: { currentTarget: { value: string } }) =>
    setV({ ...v, [key]: e.currentTarget.value });
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        onSubmit(v);
      }}
    >
      <Stack>
        <SimpleGrid cols={{ base: 1, sm: 2 }}>
          <TextInput label={t('slug')} value={v.slug} onChange={text('slug')} required data-testid="addon-slug" />
          <Select
            label={t('category')}
            data={CATEGORIES}
            value={v.category}
            onChange={(c) => setV({ ...v, category: c ?? 'general' })}
            allowDeselect={false}
          />
          <TextInput
            label={t('nameZh')}
            value={v.nameZh}
            onChange={text('nameZh')}
            required
            data-testid="addon-name-zh"
          />
          <TextInput label={t('nameEn')} value={v.nameEn} onChange={text('nameEn')} data-testid="addon-name-en" />
          <Textarea
            label={t('summaryZh')}
            value={v.summaryZh}
            onChange={text('summaryZh')}
            required
            autosize
            data-testid="addon-summary-zh"
          />
          <Textarea
            label={t('summaryEn')}
            value={v.summaryEn}
            onChange={text('summaryEn')}
            autosize
            data-testid="addon-summary-en"
          />
        </SimpleGrid>
        <MarkdownEditor
          label={t('descriptionZh')}
          value={v.descriptionZh}
          onChange={(d) => setV({ ...v, descriptionZh: d })}
          testId="addon-desc-zh"
        />
        <MarkdownEditor
          label={t('descriptionEn')}
          value={v.descriptionEn}
          onChange={(d) => setV({ ...v, descriptionEn: d })}
          testId="addon-desc-en"
        />
        <Group align="flex-end" justify="space-between">
          <ImageField
            label={t('icon')}
            buttonLabel={t('uploadIcon')}
            value={v.iconUrl}
            onChange={(p) => setV({ ...v, iconUrl: p })}
            testId="addon-icon-input"
          />
          <Switch
            label={t('published')}
            checked={v.published}
            onChange={(e) => setV({ ...v, published: e.currentTarget.checked })}
            data-testid="addon-published"
          />
        </Group>
        <Button type="submit" loading={busy} data-testid="addon-submit">
          {submitLabel}
        </Button>
      </Stack>
    </form>
  );
}

const emptyAddon: AddonFormValue = {
  slug: '',
  nameZh: '',
  nameEn: '',
  summaryZh: '',
  summaryEn: '',
  descriptionZh: '',
  descriptionEn: '',
  iconUrl: null,
  category: 'general',
  published: true,
};

function AddonRow({ addon }: { addon: Addon }) {
  const { t } = useI18n();
  const link = useLink(`/addons/${addon.id}`);
  return (
    <Table.Tr>
      <Table.Td>
        <Group gap="sm" wrap="nowrap">
          <Avatar src={addon.iconUrl} radius="sm">
            {addon.name.slice(0, 1)}
          </Avatar>
          <div>
            <Anchor {...link} fw={500}>
              {addon.name}
            </Anchor>
            <Text size="xs" c="dimmed" ff="monospace">
              {addon.slug}
            </Text>
          </div>
        </Group>
      </Table.Td>
      <Table.Td>{addon.category}</Table.Td>
      <Table.Td>
        {addon.published ? <Badge color="green">{t('published')}</Badge> : <Badge color="gray">{t('draft')}</Badge>}
      </Table.Td>
      <Table.Td>{addon.releases[0]?.version ?? '–'}</Table.Td>
      <Table.Td>{addon.totalDownloads}</Table.Td>
      <Table.Td>
        <Button size="xs" variant="light" component="a" {...link}>
          {t('manage')}
        </Button>
      </Table.Td>
    </Table.Tr>
  );
}

export function AddonsPage() {
  const { t, lang } = useI18n();
  const { navigate } = useRouter();
  const [creating, create] = useDisclosure(false);
  const list = useQuery({
    queryKey: [...KEY, 'list', lang],
    queryFn: async () => data(await api.GET('/api/addons', { params: { query: { lang, published: 'false' } } })),
  });
  const add = useWrite({
    mutationFn: async (body: AddonFormValue) => data(await api.POST('/api/addons', { body })),
    invalidate: KEY,
    success: 'created',
    onDone: (addon) => {
      create.close();
      navigate(`/addons/${addon.id}`);
    },
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('addons')}</Title>
        <Button onClick={create.open} data-testid="new-addon">
          {t('newAddon')}
        </Button>
      </Group>
      <Card withBorder>
        {list.data?.length === 0 ? (
          <Text c="dimmed">{t('noAddons')}</Text>
        ) : (
          <Table.ScrollContainer minWidth={700}>
            <Table data-testid="addons">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t('name')}</Table.Th>
                  <Table.Th>{t('category')}</Table.Th>
                  <Table.Th>{t('published')}</Table.Th>
                  <Table.Th>{t('latest')}</Table.Th>
                  <Table.Th>{t('totalDownloads')}</Table.Th>
                  <Table.Th />
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {list.data?.map((addon) => (
                  <AddonRow key={addon.id} addon={addon} />
                ))}
              </Table.Tbody>
            </Table>
          </Table.ScrollContainer>
        )}
      </Card>
      <Modal opened={creating} onClose={create.close} title={t('newAddon')} size="90%">
        <AddonForm
          initial={emptyAddon}
          submitLabel={t('create')}
          busy={add.isPending}
          onSubmit={(v) => add.mutate(v)}
        />
      </Modal>
    </Stack>
  );
}

type Release =
  Paths['/api/admin/addons/{idOrSlug}']['get']['responses'][200]['content']['application/json']['releases'][number];

type Dependency = Release['dependencies'][number];

interface ReleaseFormValue extends BuildFields {
  gameVersion: string;
  dependencies: Dependency[];
}

const emptyRelease: ReleaseFormValue = { ...emptyBuild, gameVersion: '1.18', dependencies: [] };

function releaseForm(r: Release): ReleaseFormValue {
  return { ...buildFields(r), gameVersion: r.gameVersion, dependencies: r.dependencies };
}

function releaseBody(v: ReleaseFormValue) {
  return {
    ...buildBody(v),
    gameVersion: v.gameVersion,
    dependencies: v.dependencies
      .filter((d) => d.slug.trim() !== '')
      .map((d) => ({ slug: d.slug.trim(), minVersion: d.minVersion?.trim() || null, optional: d.optional })),
  };
}

/** An addon slug, completed from the catalogue as a name (or part of one) is typed (drafts too). */
function AddonSlugInput({ value, onChange }: { value: string; onChange: (slug: string) => void }) {
  const { t } = useI18n();
  const found = useQuery({
    queryKey: [...KEY, 'slug-search', value],
    queryFn: async () =>
      data(await api.GET('/api/addons', { params: { query: { published: 'false', search: value, limit: '10' } } })),
    enabled: value.trim().length > 0,
    staleTime: 30_000,
  });
  return (
    <Autocomplete
      label={t('dependencyAddon')}
      value={value}
      onChange={onChange}
      data={[...new Set((found.data ?? []).map((a) => a.slug))]}
      required
      data-testid="dep-slug"
    />
  );
}

/** The addons a release needs (or, optional, can use), each with an optional minimum version. */
function DependenciesInput({ value, onChange }: { value: Dependency[]; onChange: (next: Dependency[]) => void }) {
  const { t } = useI18n();
  const change = (i: number, next: Partial<Dependency>) =>
    onChange(value.map((d, j) => (j === i ? { ...d, ...next } : d)));
  return (
    <Stack gap="xs" data-testid="dependencies">
      <Text size="sm" fw={500}>
        {t('dependencies')}
      </Text>
      {value.map((d, i) => (
        <Group key={i} align="flex-end" wrap="nowrap" data-testid="dependency">
          <AddonSlugInput value={d.slug} onChange={(slug) => change(i, { slug })} />
          <TextInput
            label={t('minVersion')}
            value={d.minVersion ?? ''}
            onChange={(e) => change(i, { minVersion: e.currentTarget.value || null })}
            w={120}
            data-testid="dep-min-version"
          />
          <Checkbox
            label={t('optionalDependency')}
            checked={d.optional}
            onChange={(e) => change(i, { optional: e.currentTarget.checked })}
            mb={8}
            data-testid="dep-optional"
          />
          <Button
            variant="subtle"
            color="red"
            size="xs"
            mb={4}
            onClick={() => onChange(value.filter((_, j) => j !== i))}
          >
            {t('remove')}
          </Button>
        </Group>
      ))}
      <Group>
        <Button
          variant="light"
          size="xs"
          onClick={() => onChange([...value, { slug: '', minVersion: null, optional: false }])}
          data-testid="add-dependency"
        >
          {t('addDependency')}
        </Button>
      </Group>
    </Stack>
  );
}

/** "needs a ≥ 1.0, b (optional)" under a release. */
function DependencyList({ dependencies }: { dependencies: Dependency[] }) {
  const { t } = useI18n();
  if (dependencies.length === 0) return null;
  const parts = dependencies.map(
    (d) =>
      `${d.slug}${d.minVersion === null ? '' : ` ≥ ${d.minVersion}`}${d.optional ? ` (${t('optionalDependency')})` : ''}`,
  );
  return (
    <Text size="xs" c="dimmed" data-testid="release-dependencies">
      {t('needs')} {parts.join(', ')}
    </Text>
  );
}

/** Publishes a new release, or (`editing`) corrects any field of one: only the changed fields are sent, so its downloads stay. */
function ReleaseForm({ addonId, editing, onDone }: { addonId: string; editing?: Release; onDone: () => void }) {
  const { t } = useI18n();
  return (
    <BuildForm
      initial={editing === undefined ? emptyRelease : releaseForm(editing)}
      editing={editing}
      body={releaseBody}
      create={async (body) => data(await api.POST('/api/releases', { body: { addonId, ...body } }))}
      update={async (id, body) => data(await api.PUT('/api/releases/{id}', { params: { path: { id } }, body }))}
      invalidate={KEY}
      onDone={onDone}
      testId="rel"
      beside={(value, set) => (
        <TextInput
          label={t('gameVersion')}
          value={value.gameVersion}
          onChange={(e) => set('gameVersion', e.currentTarget.value)}
          data-testid="rel-game-version"
        />
      )}
      afterSchedule={(value, set) => (
        <DependenciesInput value={value.dependencies} onChange={(dependencies) => set('dependencies', dependencies)} />
      )}
    />
  );
}

export function AddonDetailPage({ id }: { id: string }) {
  const { t, lang, time } = useI18n();
  const { navigate } = useRouter();
  const back = useLink('/addons');
  const [editing, edit] = useDisclosure(false);
  const [releasing, release] = useDisclosure(false);
  const [editingRelease, setEditingRelease] = useState<Release | null>(null);
  const detail = useQuery({
    queryKey: [...KEY, id, lang],
    queryFn: async () =>
      data(await api.GET('/api/admin/addons/{idOrSlug}', { params: { path: { idOrSlug: id }, query: { lang } } })),
  });
  const update = useWrite({
    mutationFn: async (body: AddonWrite) => data(await api.PUT('/api/addons/{id}', { params: { path: { id } }, body })),
    invalidate: KEY,
    success: 'saved',
    onDone: edit.close,
  });
  const remove = useWrite({
    mutationFn: async () => data(await api.DELETE('/api/addons/{id}', { params: { path: { id } } })),
    invalidate: KEY,
    success: 'deleted',
    onDone: () => navigate('/addons'),
  });
  const releaseUpdate = useWrite({
    mutationFn: async (args: { id: string; isLatest: true }) =>
      data(
        await api.PUT('/api/releases/{id}', { params: { path: { id: args.id } }, body: { isLatest: args.isLatest } }),
      ),
    invalidate: KEY,
    success: 'saved',
  });
  const releaseDelete = useWrite({
    mutationFn: async (releaseId: string) =>
      data(await api.DELETE('/api/releases/{id}', { params: { path: { id: releaseId } } })),
    invalidate: KEY,
    success: 'deleted',
  });
  const shotAdd = useWrite({
    mutationFn: async (body: { imageUrl: string; sortOrder: number }) =>
      data(await api.POST('/api/addons/{id}/screenshots', { params: { path: { id } }, body })),
    invalidate: KEY,
    success: 'created',
  });
  const shotMove = useWrite({
    mutationFn: async (moves: { id: string; sortOrder: number }[]) => {
      for (const move of moves) {
        data(
          await api.PUT('/api/screenshots/{id}', {
            params: { path: { id: move.id } },
            body: { sortOrder: move.sortOrder },
          }),
        );
      }
    },
    invalidate: KEY,
  });
  const shotDelete = useWrite({
    mutationFn: async (shotId: string) =>
      data(await api.DELETE('/api/screenshots/{id}', { params: { path: { id: shotId } } })),
    invalidate: KEY,
    success: 'deleted',
  });

  const addon = detail.data;
  if (!addon) {
    return <Text c={detail.isError ? 'red' : 'dimmed'}>{detail.isError ? t('e404', { msg: id }) : t('loading')}</Text>;
  }
  const shots = [...addon.screenshots].sort((a, b) => a.sortOrder - b.sortOrder);
  /** Swap with the neighbour; orders are renumbered 0..n so that equal values cannot tie. */
  const move = (index: number, delta: number) => {
    const order = shots.map((s) => s.id);
    const other = index + delta;
    if (other < 0 || other >= order.length) return;
    [order[index], order[other]] = [order[other]!, order[index]!];
    shotMove.mutate(
      order
        .map((shotId, sortOrder) => ({ id: shotId, sortOrder }))
        .filter((m) => shots.find((s) => s.id === m.id)?.sortOrder !== m.sortOrder),
    );
  };

  return (
    <Stack>
      <Group justify="space-between">
        <Group>
          <Anchor {...back}>← {t('back')}</Anchor>
          <Avatar src={addon.iconUrl} radius="sm" />
          <Title order={2}>{addon.name}</Title>
          {addon.published ? <Badge color="green">{t('published')}</Badge> : <Badge color="gray">{t('draft')}</Badge>}
        </Group>
        <Group gap="xs">
          <Switch
            label={t('published')}
            checked={addon.published}
            onChange={(e) => update.mutate({ published: e.currentTarget.checked })}
            data-testid="addon-published-toggle"
          />
          <Button variant="default" size="xs" onClick={edit.open}>
            {t('edit')}
          </Button>
          <ConfirmButton message={t('confirmDelete', { name: addon.name })} onConfirm={() => remove.mutate()}>
            {t('delete')}
          </ConfirmButton>
        </Group>
      </Group>
      <Text c="dimmed">
        {addon.summary} · {t('category')}: {addon.category} · {t('totalDownloads')}:{' '}
        <b data-testid="addon-total-downloads">{addon.totalDownloads}</b>
      </Text>

      {addon.description !== '' && (
        <Card withBorder data-testid="addon-description">
          <MarkdownPreview source={addon.description} />
        </Card>
      )}

      <Card withBorder>
        <Group justify="space-between" mb="sm">
          <Title order={4}>{t('releases')}</Title>
          <Button size="xs" onClick={release.open} data-testid="new-release">
            {t('newRelease')}
          </Button>
        </Group>
        {addon.releases.length === 0 ? (
          <Text c="dimmed" size="sm">
            {t('noVersions')}
          </Text>
        ) : (
          <Table.ScrollContainer minWidth={700}>
            <Table striped data-testid="releases">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t('version')}</Table.Th>
                  <Table.Th>{t('gameVersion')}</Table.Th>
                  <Table.Th>{t('file')}</Table.Th>
                  <Table.Th>{t('downloadsCol')}</Table.Th>
                  <Table.Th>{t('created_at')}</Table.Th>
                  <Table.Th>{t('actions')}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {addon.releases.map((r) => (
                  <Table.Tr key={r.id} data-testid={`release-${r.version}`}>
                    <Table.Td miw={240}>
                      <Group gap={6}>
                        <Text fw={500}>{r.version}</Text>
                        {r.isLatest && <Badge color="green">{t('latest')}</Badge>}
                        {r.downloadType === 'url' && <Badge variant="outline">URL</Badge>}
                      </Group>
                      <ScheduledBadge publishAt={r.publishAt} />
                      <DependencyList dependencies={r.dependencies} />
                      <Text size="xs" c="dimmed" lineClamp={2}>
                        {r.changelog}
                      </Text>
                    </Table.Td>
                    <Table.Td>{r.gameVersion || '–'}</Table.Td>
                    <Table.Td>
                      <Text size="sm">{r.downloadType === 'local' ? formatBytes(r.fileSize) : '–'}</Text>
                      <Sha256 value={r.sha256} short />
                      <FileSignatureBadge item={r} />
                    </Table.Td>
                    <Table.Td data-testid="downloads">{r.downloadCount}</Table.Td>
                    <Table.Td>{time(r.createdAt)}</Table.Td>
                    <Table.Td>
                      <Group gap={4} wrap="nowrap">
                        <Button
                          size="xs"
                          variant="default"
                          onClick={() => setEditingRelease(r)}
                          data-testid="edit-release"
                        >
                          {t('edit')}
                        </Button>
                        {!r.isLatest && (
                          <Button
                            size="xs"
                            variant="light"
                            onClick={() => releaseUpdate.mutate({ id: r.id, isLatest: true })}
                          >
                            {t('setLatest')}
                          </Button>
                        )}
                        <ConfirmButton
                          message={t('confirmDelete', { name: r.version })}
                          onConfirm={() => releaseDelete.mutate(r.id)}
                        >
                          {t('delete')}
                        </ConfirmButton>
                      </Group>
                    </Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </Table.ScrollContainer>
        )}
      </Card>

      <Card withBorder>
        <Group justify="space-between" mb="sm">
          <Title order={4}>{t('screenshots')}</Title>
          <UploadButton
            label={t('addScreenshot')}
            accept="image/*"
            testId="screenshot-input"
            onUploaded={(r) => shotAdd.mutate({ imageUrl: r.filePath, sortOrder: (shots.at(-1)?.sortOrder ?? -1) + 1 })}
          />
        </Group>
        <SimpleGrid cols={{ base: 2, md: 4 }} data-testid="screenshots">
          {shots.map((s, index) => (
            <Card key={s.id} withBorder p="xs">
              <Image src={s.imageUrl} h={120} fit="contain" alt="" />
              <Group justify="space-between" mt="xs" gap={4}>
                <Text size="xs" c="dimmed">
                  #{s.sortOrder}
                </Text>
                <Group gap={4}>
                  <ActionIcon
                    variant="default"
                    size="sm"
                    aria-label={t('moveUp')}
                    disabled={index === 0}
                    onClick={() => move(index, -1)}
                  >
                    ←
                  </ActionIcon>
                  <ActionIcon
                    variant="default"
                    size="sm"
                    aria-label={t('moveDown')}
                    disabled={index === shots.length - 1}
                    onClick={() => move(index, 1)}
                  >
                    →
                  </ActionIcon>
                  <ConfirmButton
                    size="compact-xs"
                    message={t('confirmDelete', { name: `#${s.sortOrder}` })}
                    onConfirm={() => shotDelete.mutate(s.id)}
                  >
                    {t('delete')}
                  </ConfirmButton>
                </Group>
              </Group>
            </Card>
          ))}
        </SimpleGrid>
      </Card>

      <Modal opened={editing} onClose={edit.close} title={t('edit')} size="90%">
        <AddonForm
          initial={{
            slug: addon.slug,
            nameZh: addon.nameZh,
            nameEn: addon.nameEn,
            summaryZh: addon.summaryZh,
            summaryEn: addon.summaryEn,
            descriptionZh: addon.descriptionZh,
            descriptionEn: addon.descriptionEn,
            iconUrl: addon.iconUrl,
            category: addon.category,
            published: addon.published,
          }}
          submitLabel={t('save')}
          busy={update.isPending}
          onSubmit={(v) => update.mutate(v)}
        />
      </Modal>
      <Modal opened={releasing} onClose={release.close} title={`${t('newRelease')} · ${addon.name}`} size="lg">
        <ReleaseForm addonId={addon.id} onDone={release.close} />
      </Modal>
      <Modal
        opened={editingRelease !== null}
        onClose={() => setEditingRelease(null)}
        title={`${t('editRelease')} · ${editingRelease?.version ?? ''}`}
        size="lg"
      >
        {editingRelease !== null && (
          <ReleaseForm addonId={addon.id} editing={editingRelease} onDone={() => setEditingRelease(null)} />
        )}
      </Modal>
    </Stack>
  );
}
