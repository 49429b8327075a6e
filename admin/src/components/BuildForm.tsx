import { Button, Group, Stack, Textarea, TextInput } from '@mantine/core';
import type { QueryKey } from '@tanstack/react-query';
import { type ReactNode, useState } from 'react';
import { notifyError } from '../errors';
import { useI18n } from '../i18n';
import { changedFields, useWrite } from '../write';
import {
  emptySource,
  FileSource,
  type FileSourceValue,
  sourceBody,
  sourceReady,
  type StoredFile,
  storedSource,
} from './FileSource';
import { PublishAtInput } from './Schedule';

/** What a launcher version and an addon release share: a version, the file, a changelog per language, a publication time. */
export interface BuildFields {
  version: string;
  changelogZh: string;
  changelogEn: string;
  source: FileSourceValue;
  publishAt: string | null;
}

export const emptyBuild: BuildFields = {
  version: '',
  changelogZh: '',
  changelogEn: '',
  source: emptySource,
  publishAt: null,
};

/** The shared fields of a stored version or release, as the form edits them. */
export function buildFields(
  stored: StoredFile & { version: string; changelogZh: string; changelogEn: string; publishAt: string | null },
): BuildFields {
  return {
    version: stored.version,
    changelogZh: stored.changelogZh,
    changelogEn: stored.changelogEn,
    source: storedSource(stored),
    publishAt: stored.publishAt,
  };
}

/** The shared fields of a create or update body. */
export function buildBody(value: BuildFields) {
  return {
    version: value.version,
    changelogZh: value.changelogZh,
    changelogEn: value.changelogEn,
    ...sourceBody(value.source),
    publishAt: value.publishAt,
  };
}

type Setter<V> = <K extends keyof V>(key: K, next: V[K]) => void;

/**
 * Publishes a new version or release, or (`editing`) corrects any field of one: only the changed
 * fields are sent, so its counters stay. `beside` is the field beside the version, `beforeSchedule`
 * and `afterSchedule` what the kind of build adds; test ids start with `testId`.
 */
export function BuildForm<V extends BuildFields, B extends object>({
  initial,
  editing,
  body,
  create,
  update,
  invalidate,
  onDone,
  testId,
  versionPlaceholder,
  beside,
  beforeSchedule,
  afterSchedule,
}: {
  initial: V;
  /** The stored version or release being corrected (its file is shown until replaced). */
  editing: (StoredFile & { id: string }) | undefined;
  body: (value: V) => B;
  create: (body: B) => Promise<unknown>;
  /** Sends the changed fields of the version or release `id`. */
  update: (id: string, changed: Partial<B>) => Promise<unknown>;
  invalidate: QueryKey;
  onDone: () => void;
  testId: string;
  versionPlaceholder?: string;
  beside: (value: V, set: Setter<V>) => ReactNode;
  beforeSchedule?: (value: V, set: Setter<V>) => ReactNode;
  afterSchedule?: (value: V, set: Setter<V>) => ReactNode;
}) {
  const { t } = useI18n();
  const [value, setValue] = useState(initial);
  const set: Setter<V> = (key, next) => setValue({ ...value, [key]: next });
  const save = useWrite({
    mutationFn: async () =>
      editing === undefined ? create(body(value)) : update(editing.id, changedFields(body(initial), body(value))),
    invalidate,
    success: editing === undefined ? 'created' : 'saved',
    onDone,
  });
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        if (!sourceReady(value.source)) return notifyError(new Error(t('fileRequired')), t);
        save.mutate();
      }}
    >
      <Stack>
        <Group grow>
          <TextInput
            label={t('version')}
            value={value.version}
            onChange={(e) => set('version', e.currentTarget.value)}
            required
            placeholder={versionPlaceholder}
            data-testid={`${testId}-version`}
          />
          {beside(value, set)}
        </Group>
        <FileSource value={value.source} onChange={(source) => set('source', source)} current={editing} />
        <Textarea
          label={t('changelogZh')}
          value={value.changelogZh}
          onChange={(e) => set('changelogZh', e.currentTarget.value)}
          autosize
          minRows={3}
          data-testid={`${testId}-changelog-zh`}
        />
        <Textarea
          label={t('changelogEn')}
          value={value.changelogEn}
          onChange={(e) => set('changelogEn', e.currentTarget.value)}
          autosize
          minRows={3}
          data-testid={`${testId}-changelog-en`}
        />
        {beforeSchedule?.(value, set)}
        <PublishAtInput value={value.publishAt} onChange={(publishAt) => set('publishAt', publishAt)} />
        {afterSchedule?.(value, set)}
        <Button type="submit" loading={save.isPending} data-testid={`${testId}-submit`}>
          {editing === undefined ? t('create') : t('save')}
        </Button>
      </Stack>
    </form>
  );
}
