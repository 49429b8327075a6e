import { type QueryKey, useMutation, useQueryClient } from '@tanstack/react-query';
import { notifyError, notifySuccess } from './errors';
import { type MessageKey, useI18n } from './i18n';

export interface WriteOptions<TData, TVariables> {
  mutationFn: (variables: TVariables) => Promise<TData>;
  /** The query key, or keys, whose data the write changes. */
  invalidate: QueryKey | readonly QueryKey[];
  /** The message to show on success; none when omitted. */
  success?: MessageKey;
  /** Runs after the notification and the invalidation, e.g. to close a form or navigate. */
  onDone?: (result: TData, variables: TVariables) => void;
}

/** A console write: on success a notification, the affected queries invalidated, then `onDone`; on failure an error notification. */
export function useWrite<TData, TVariables = void>({
  mutationFn,
  invalidate,
  success,
  onDone,
}: WriteOptions<TData, TVariables>) {
  const { t } = useI18n();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn,
    onSuccess: (result, variables) => {
      if (success !== undefined) notifySuccess(t(success));
      const keys = Array.isArray(invalidate[0]) ? (invalidate as readonly QueryKey[]) : [invalidate as QueryKey];
      for (const queryKey of keys) void queryClient.invalidateQueries({ queryKey });
      onDone?.(result, variables);
    },
    onError: (error) => notifyError(error, t),
  });
}

/** The fields of `next` that differ from `before`: an update sends only what the operator changed (counters and the rest stay). */
export function changedFields<T extends object>(before: T, next: T): Partial<T> {
  const changed: Partial<T> = {};
  for (const key of Object.keys(next) as (keyof T)[]) {
    if (JSON.stringify(next[key]) !== JSON.stringify(before[key])) changed[key] = next[key];
  }
  return changed;
}
