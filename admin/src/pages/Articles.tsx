import {
  Badge,
  Button,
  Card,
  Group,
  Image,
  Modal,
  SimpleGrid,
  Stack,
  Switch,
  Table,
  Tabs,
  Text,
  Textarea,
  TextInput,
  Title,
} from '@mantine/core';
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { type Answer, api, data, type RequestBody } from '../api/client';
import { ConfirmButton } from '../components/Confirm';
import { MarkdownEditor } from '../components/Markdown';
import { isScheduled, PublishAtInput, ScheduledBadge } from '../components/Schedule';
import { ImageField } from '../components/Upload';
import { useI18n } from '../i18n';
import { useWrite } from '../write';

type Article = Answer<'/api/admin/articles', 'get'>[number];
type ArticleWrite = RequestBody<'/api/articles/{id}', 'put'>;

const KEY = ['articles'] as const;
/** The form edits both languages; the single-language `title`, `summary`, `content` are left out. */
type ArticleForm = Required<Omit<ArticleWrite, 'title' | 'summary' | 'content'>>;

const emptyArticle: ArticleForm = {
  slug: '',
  titleZh: '',
  titleEn: '',
  summaryZh: '',
  summaryEn: '',
  contentZh: '',
  contentEn: '',
  coverImage: '',
  published: true,
  publishAt: null,
};

function Editor({
  initial,
  onSubmit,
  busy,
}: {
  initial: ArticleForm;
  onSubmit: (v: ArticleForm) => void;
  busy: boolean;
}) {
  const { t } = useI18n();
  const [v, setV] = useState(initial);
  const text = (key: keyof ArticleForm) => (e: { currentTarget: { value: string } }) =>
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
          <TextInput label={t('slug')} value={v.slug} onChange={text('slug')} required data-testid="article-slug" />
          <Switch
            label={t('published')}
            checked={v.published}
            onChange={(e) => setV({ ...v, published: e.currentTarget.checked })}
            mt="lg"
            data-testid="article-published"
          />
        </SimpleGrid>
        <Tabs defaultValue="zh" keepMounted={false}>
          <Tabs.List>
            <Tabs.Tab value="zh" data-testid="article-tab-zh">
              中文
            </Tabs.Tab>
            <Tabs.Tab value="en" data-testid="article-tab-en">
              English
            </Tabs.Tab>
          </Tabs.List>
          <Tabs.Panel value="zh" pt="sm">
            <Stack>
              <TextInput
                label={t('titleZh')}
                value={v.titleZh}
                onChange={text('titleZh')}
                required
                data-testid="article-title-zh"
              />
              <Textarea label={t('summaryZh')} value={v.summaryZh} onChange={text('summaryZh')} autosize />
              <MarkdownEditor
                label={t('contentZh')}
                value={v.contentZh}
                onChange={(c) => setV({ ...v, contentZh: c })}
                testId="article-content-zh"
              />
            </Stack>
          </Tabs.Panel>
          <Tabs.Panel value="en" pt="sm">
            <Stack>
              <TextInput
                label={t('titleEn')}
                value={v.titleEn}
                onChange={text('titleEn')}
                data-testid="article-title-en"
              />
              <Textarea
                label={t('summaryEn')}
                value={v.summaryEn}
                onChange={text('summaryEn')}
                autosize
                data-testid="article-summary-en"
              />
              <MarkdownEditor
                label={t('contentEn')}
                value={v.contentEn}
                onChange={(c) => setV({ ...v, contentEn: c })}
                testId="article-content-en"
              />
            </Stack>
          </Tabs.Panel>
        </Tabs>
        <PublishAtInput value={v.publishAt} onChange={(publishAt) => setV({ ...v, publishAt })} />
        <ImageField
          label={t('coverImage')}
          buttonLabel={t('uploadCover')}
          value={v.coverImage || null}
          onChange={(p) => setV({ ...v, coverImage: p })}
          testId="article-cover-input"
        />
        <Button type="submit" loading={busy} data-testid="article-submit">
          {t('save')}
        </Button>
      </Stack>
    </form>
  );
}

function toForm(a: Article): ArticleForm {
  return {
    slug: a.slug,
    titleZh: a.titleZh,
    titleEn: a.titleEn,
    summaryZh: a.summaryZh,
    summaryEn: a.summaryEn,
    contentZh: a.contentZh,
    contentEn: a.contentEn,
    coverImage: a.coverImage ?? '',
    published: a.published,
    publishAt: a.publishAt,
  };
}

export function ArticlesPage() {
  const { t, lang, time } = useI18n();
  const [editing, setEditing] = useState<Article | 'new' | null>(null);
  const list = useQuery({
    queryKey: [...KEY, lang],
    queryFn: async () => data(await api.GET('/api/admin/articles', { params: { query: { lang } } })),
  });
  const close = () => setEditing(null);
  const save = useWrite({
    mutationFn: async (args: { id: string | null; body: ArticleForm }) => {
      const body = { ...args.body, coverImage: args.body.coverImage };
      return args.id === null
        ? data(await api.POST('/api/articles', { body }))
        : data(await api.PUT('/api/articles/{id}', { params: { path: { id: args.id } }, body }));
    },
    invalidate: KEY,
    success: 'saved',
    onDone: close,
  });
  const toggle = useWrite({
    mutationFn: async (args: { id: string; published: boolean }) =>
      data(
        await api.PUT('/api/articles/{id}', { params: { path: { id: args.id } }, body: { published: args.published } }),
      ),
    invalidate: KEY,
  });
  const remove = useWrite({
    mutationFn: async (id: string) => data(await api.DELETE('/api/articles/{id}', { params: { path: { id } } })),
    invalidate: KEY,
    success: 'deleted',
    onDone: close,
  });
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>{t('articles')}</Title>
        <Button onClick={() => setEditing('new')} data-testid="new-article">
          {t('newArticle')}
        </Button>
      </Group>
      <Card withBorder>
        {list.data?.length === 0 ? (
          <Text c="dimmed">{t('noArticles')}</Text>
        ) : (
          <Table.ScrollContainer minWidth={700}>
            <Table data-testid="articles">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>{t('coverImage')}</Table.Th>
                  <Table.Th>{t('title')}</Table.Th>
                  <Table.Th>{t('published')}</Table.Th>
                  <Table.Th>{t('created_at')}</Table.Th>
                  <Table.Th>{t('actions')}</Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {list.data?.map((a) => (
                  <Table.Tr key={a.id}>
                    <Table.Td>
                      {a.coverImage ? <Image src={a.coverImage} h={40} w={64} fit="cover" radius="sm" alt="" /> : '–'}
                    </Table.Td>
                    <Table.Td>
                      <Text fw={500}>{a.title}</Text>
                      <Text size="xs" c="dimmed" ff="monospace">
                        {a.slug}
                      </Text>
                    </Table.Td>
                    <Table.Td>
                      <Group gap="xs">
                        <Switch
                          checked={a.published}
                          onChange={(e) => toggle.mutate({ id: a.id, published: e.currentTarget.checked })}
                          aria-label={t('published')}
                        />
                        {!a.published ? (
                          <Badge color="gray">{t('draft')}</Badge>
                        ) : isScheduled(a.publishAt) ? (
                          <ScheduledBadge publishAt={a.publishAt} />
                        ) : (
                          <Badge color="green">{t('published')}</Badge>
                        )}
                      </Group>
                    </Table.Td>
                    <Table.Td>{time(a.createdAt)}</Table.Td>
                    <Table.Td>
                      <Group gap={4} wrap="nowrap">
                        <Button size="xs" variant="default" onClick={() => setEditing(a)}>
                          {t('edit')}
                        </Button>
                        <ConfirmButton
                          message={t('confirmDelete', { name: a.title })}
                          onConfirm={() => remove.mutate(a.id)}
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
      <Modal
        opened={editing !== null}
        onClose={() => setEditing(null)}
        title={editing === null ? '' : editing === 'new' ? t('newArticle') : t('editArticle')}
        size="95%"
      >
        {editing !== null && (
          <Editor
            initial={editing === 'new' ? emptyArticle : toForm(editing)}
            busy={save.isPending}
            onSubmit={(body) => save.mutate({ id: editing === 'new' ? null : editing.id, body })}
          />
        )}
      </Modal>
    </Stack>
  );
}
