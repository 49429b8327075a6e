import { type QueryClient, useQuery } from '@tanstack/react-query';
import { ApiError, api, data } from './api/client';
import type { Role } from '../../src/domain/roles';

/** The signed-in administrator's query: the console's session. */
export const ME_KEY = ['me'] as const;

/** The signed-in administrator with its role. */
export async function fetchMe() {
  return data(await api.GET('/api/admin/me')).user;
}

export type Me = Awaited<ReturnType<typeof fetchMe>>;

/** The signed-in administrator, or null when no one is signed in (401). */
export function useMe() {
  return useQuery({
    queryKey: ME_KEY,
    queryFn: async () => {
      try {
        return await fetchMe();
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) return null;
        throw error;
      }
    },
    staleTime: 60_000,
  });
}

/** The signed-in administrator's role (the console renders pages only once it is known). */
export function useRole(): Role {
  const me = useMe();
  if (!me.data) throw new Error('useRole before the administrator is known');
  return me.data.role;
}

/** A login (`user`) or a logout (null): nothing cached for an earlier session survives. */
export function changeSession(queryClient: QueryClient, user: Me | null): void {
  queryClient.removeQueries({ predicate: (query) => query.queryKey[0] !== ME_KEY[0] });
  queryClient.setQueryData(ME_KEY, user);
}
