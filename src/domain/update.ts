export interface UpdateDecision {
  hasUpdate: boolean;
  forceUpdate: boolean;
}

/** `hasUpdate` when the latest code is newer than the client's; forced only when there is an update and the latest is forced. */
export function decideUpdate(
  latest: { versionCode: number; forceUpdate: boolean },
  clientCode: number,
): UpdateDecision {
  const hasUpdate = latest.versionCode > clientCode;
  return { hasUpdate, forceUpdate: hasUpdate && latest.forceUpdate };
}
