/**
 * Pinned addons (`addon-pins.json` in the state folder, `{"pins": {slug: version}}`): an addon pinned
 * stays at its version; `AddonManager.update` leaves it alone and lists it as `pinned`.
 * `install SLUG@VERSION` pins, `install SLUG` (the newest) and `remove` unpin.
 */
import { StateError, UsageError } from '../errors.js';
import type { StateFolder } from '../disk/state.js';

const FILE = 'addon-pins.json';

/** `SLUG` or `SLUG@VERSION`, as `addons install` takes them. */
export interface AddonSpec {
  readonly slug: string;
  readonly version: string | null;
}

/** Splits `SLUG@VERSION` (a version is anything non-empty after the first `@`). */
export function parseAddonSpec(spec: string): AddonSpec {
  const at = spec.indexOf('@');
  if (at < 0) return { slug: spec, version: null };
  const version = spec.slice(at + 1);
  if (version === '') throw new UsageError(`${JSON.stringify(spec)}: no version after @`);
  return { slug: spec.slice(0, at), version };
}

export class AddonPins {
  constructor(private readonly state: StateFolder) {}

  /** The pinned addons: slug → version. */
  async read(): Promise<Map<string, string>> {
    const kept = await this.state.readJson<{ pins?: unknown }>(FILE, { pins: {} });
    const pins = kept.pins;
    if (typeof pins !== 'object' || pins === null || Object.values(pins).some((v) => typeof v !== 'string')) {
      throw new StateError(`${FILE} is not a list of pinned addons`);
    }
    return new Map(Object.entries(pins as Record<string, string>));
  }

  async set(slug: string, version: string | null): Promise<void> {
    const pins = await this.read();
    if (version === null ? !pins.delete(slug) : pins.get(slug) === version) return;
    if (version !== null) pins.set(slug, version);
    await this.state.writeJson(FILE, { pins: Object.fromEntries([...pins].sort(([a], [b]) => (a < b ? -1 : 1))) });
  }
}
