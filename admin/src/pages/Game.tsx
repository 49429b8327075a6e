import {
  Badge,
  Button,
  Code,
  CopyButton,
  Group,
  Modal,
  Stack,
  Switch,
  Table,
  Text,
  Textarea,
  Title,
  Tooltip,
} from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { api, data, type GameBuild } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { PublishAtInput, ScheduledBadge } from '../components/Schedule';
import { formatBytes, Sha256 } from '../components/Upload';
import { useI18n } from '../i18n';
import { changedFields, useWrite } from '../write';

const KEY = ['game-builds'] as const;

/** The `launcher-publish game` command for the next build on this service (packages/publish/README.md). */
function PublishCommand({ nextBuildCode }: { nextBuildCode: number }) {
  const { t } = useI18n();
  const command = [
    'LAUNCHER_TOKEN=… launcher-publish game',
    `--server ${window.location.origin}`,
    '--dir ./client',
    '--version <VERSION>',
    `--build-code ${nextBuildCode}`,
    "--changelog-zh '…' --changelog-en '…'",
  ].join(' \\\n  ');
  return (
    <Stack gap={4}>
      <Group justify="space-between">
        <Text fw={500}>{t('gamePublishCommand')}</Text>
        <CopyButton value={command}>
          {({ copied, copy }) => (
            <Button size="xs" variant="light" onClick={copy} data-testid="copy-publish-command">
              {copied ? t('copied') : t('copy')}
            </Button>
          )}
        </CopyButton>
      </Group>
      <Code block data-testid="publish-command">
        {command}
      </Code>
      <Text size="xs" c="dimmed">
        {t('gamePublishHint')}
      </Text>
    </Stack>
  );
}

interface EditValue {
  changelogZh: string;
  changelogEn: string;
  forceUpdate: boolean;
  publishAt: string | null;
}

const editValue = (b: GameBuild): EditValue => ({
  changelogZh: b.changelogZh,
  changelogEn: b.changelogEn,
  forceUpdate: b.forceUpdate,
  publishAt: b.publishAt,
});

/** A build's changelog, forceUpdate and publishAt: only the changed fields are sent. */
function BuildEditForm({ build, onDone }: { build: GameBuild; onDone: () => void }) {
  const { t } = useI18n();
  const [value, setValue] = useState(() => editValue(build));
  const save = useWrite({
    mutationFn: async (body: Partial<EditValue>) =>
      data(
        await api.PUT('/api/admin/game/builds/{buildCode}', {
          params: { path: { buildCode: String(build.buildCode) } },
          body,
        }),
      ),
    invalidate: KEY,
    success: 'saved',
    onDone,
  });
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        save.mutate(changedFields(editValue(build), value));
      }}
    >
      <Stack>
        <Textarea
          label={t('changelogZh')}
          value={value.changelogZh}
          onChange={(e) => setValue({ ...value, changelogZh: e.currentTarget.value })}
          autosize
          minRows={3}
          data-testid="build-changelog-zh"
        />
        <Textarea
          label={t('changelogEn')}
          value={value.changelogEn}
          onChange={(e) => setValue({ ...value, changelogEn: e.currentTarget.value })}
          autosize
          minRows={3}
          data-testid="build-changelog-en"
        />
        <Switch
          label={t('forceUpdate')}
          checked={value.forceUpdate}
          onChange={(e) => setValue({ ...value, forceUpdate: e.currentTarget.checked })}
          data-testid="build-force"
        />
        <PublishAtInput value={value.publishAt} onChange={(publishAt) => setValue({ ...value, publishAt })} />
        <Button type="submit" loading={save.isPending} data-testid="build-submit">
          {t('save')}
        </Button>
      </Stack>
    </form>
  );
}

function BuildRow({ build, onEdit }: { build: GameBuild; onEdit: () => void }) {
  const { t, time } = useI18n();
  const path = { params: { path: { buildCode: String(build.buildCode) } } };
  const revocation = useWrite({
    mutationFn: async (action: 'revoke' | 'unrevoke') =>
      data(
        action === 'revoke'
          ? await api.POST('/api/admin/game/builds/{buildCode}/revoke', path)
          : await api.POST('/api/admin/game/builds/{buildCode}/unrevoke', path),
      ),
    invalidate: KEY,
    success: 'saved',
  });
  const remove = useWrite({
    mutationFn: async () => data(await api.DELETE('/api/admin/game/builds/{buildCode}', path)),
    invalidate: KEY,
    success: 'deleted',
  });
  const revoked = build.revokedAt !== null;
  return (
    <Table.Tr data-testid={`build-${build.buildCode}`}>
      <Table.Td miw={220}>
        <Group gap={6}>
          <Text fw={500}>{build.version}</Text>
          {revoked && (
            <Badge color="red" data-testid="build-revoked">
              {t('revoked')}
            </Badge>
          )}
          {build.forceUpdate && <Badge variant="outline">{t('forceUpdate')}</Badge>}
          {build.broken !== null && (
            <Tooltip label={t('gameBrokenHint')} multiline w={360} withArrow>
              <Badge color="red" variant="light" tt="none" data-testid="build-broken">
                {t('gameBroken')}
              </Badge>
            </Tooltip>
          )}
        </Group>
        {build.broken !== null && (
          <Text size="xs" c="red" data-testid="build-broken-rule">
            {build.broken}
          </Text>
        )}
        <ScheduledBadge publishAt={build.publishAt} />
        <Text size="xs" c="dimmed" lineClamp={2} data-testid="build-changelog">
          {build.changelog}
        </Text>
      </Table.Td>
      <Table.Td>{build.buildCode}</Table.Td>
      <Table.Td data-testid="build-files">{build.fileCount}</Table.Td>
      <Table.Td>
        <Text size="sm" data-testid="build-size">
          {formatBytes(build.totalSize)}
        </Text>
        <Sha256 value={build.manifestSha256} short />
      </Table.Td>
      <Table.Td>
        <Text size="sm" data-testid="build-new-bytes">
          {formatBytes(build.newBytes)}
        </Text>
        <Text size="xs" c="dimmed">
          {t('gameChunks', { count: build.chunkCount })}
        </Text>
      </Table.Td>
      <Table.Td data-testid="build-downloads">{build.downloadCount}</Table.Td>
      <Table.Td>{time(build.publishedAt)}</Table.Td>
      <Table.Td miw={200}>
        <Group gap={4}>
          <Button size="xs" variant="default" onClick={onEdit} data-testid="edit-build">
            {t('edit')}
          </Button>
          {revoked ? (
            <ConfirmButton
              color="green"
              message={t('confirmUnrevokeBuild', { version: build.version })}
              onConfirm={() => revocation.mutate('unrevoke')}
              data-testid="unrevoke-build"
            >
              {t('unrevokeVersion')}
            </ConfirmButton>
          ) : (
            <ConfirmButton
              message={t('confirmRevokeBuild', { version: build.version })}
              onConfirm={() => revocation.mutate('revoke')}
              data-testid="revoke-build"
            >
              {t('revokeVersion')}
            </ConfirmButton>
          )}
          <ConfirmButton
            message={t('confirmDelete', { name: `${build.version} (${build.buildCode})` })}
            onConfirm={() => remove.mutate()}
            data-testid="delete-build"
          >
            {t('delete')}
          </ConfirmButton>
        </Group>
      </Table.Td>
    </Table.Tr>
  );
}

/** What the game client takes in the store, every build's chunks together (each stored once). */
function StoreTotal() {
  const { t } = useI18n();
  const store = useQuery({
    queryKey: [...KEY, 'store'],
    queryFn: async () => data(await api.GET('/api/admin/game/store')),
  });
  if (!store.data) return null;
  return (
    <Text data-testid="game-store">
      {t('gameStore', { chunks: store.data.chunks, bytes: formatBytes(store.data.bytes) })}
    </Text>
  );
}

/** The game client's builds (game-files.md): sizes, what each cost the store, scheduling and revocation. */
export function GamePage() {
  const { t, lang } = useI18n();
  const [editing, setEditing] = useState<GameBuild | null>(null);
  const list = useQuery({
    queryKey: [...KEY, lang],
    queryFn: async () => data(await api.GET('/api/admin/game/builds', { params: { query: { lang } } })),
  });
  const builds = list.data ?? [];
  return (
    <Stack>
      <Title order={2}>{t('game')}</Title>
      <StoreTotal />
      <PublishCommand nextBuildCode={(builds[0]?.buildCode ?? 0) + 1} />
      {builds.length === 0 ? (
        <Text c="dimmed">{list.isPending ? t('loading') : t('noBuilds')}</Text>
      ) : (
        <Table.ScrollContainer minWidth={1000}>
          <Table striped data-testid="game-builds">
            <Table.Thead>
              <Table.Tr>
                <Table.Th>{t('version')}</Table.Th>
                <Table.Th>{t('buildCode')}</Table.Th>
                <Table.Th>{t('gameFiles')}</Table.Th>
                <Table.Th>{t('gameTotalSize')}</Table.Th>
                <Table.Th>{t('gameNewBytes')}</Table.Th>
                <Table.Th>{t('downloadsCol')}</Table.Th>
                <Table.Th>{t('gamePublishedAt')}</Table.Th>
                <Table.Th>{t('actions')}</Table.Th>
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {builds.map((b) => (
                <BuildRow key={b.buildCode} build={b} onEdit={() => setEditing(b)} />
              ))}
            </Table.Tbody>
          </Table>
        </Table.ScrollContainer>
      )}
      <Modal
        opened={editing !== null}
        onClose={() => setEditing(null)}
        title={`${t('edit')} · ${editing?.version ?? ''} (${editing?.buildCode ?? ''})`}
        size="lg"
      >
        {editing !== null && <BuildEditForm build={editing} onDone={() => setEditing(null)} />}
      </Modal>
    </Stack>
  );
}
