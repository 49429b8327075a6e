/**
 * Addon archives made by hand (a small zip writer that writes whatever it is told, hostile names,
 * links and lying sizes included) and addons published on the real service.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { admin, upload } from '../../../test/helpers/app.js';
import type { TestApp } from '../../../test/helpers/app.js';

export interface RawEntry {
  readonly name: string;
  readonly data?: Buffer | string;
  /** 0 stored, 8 deflated (default 8). */
  readonly method?: 0 | 8;
  /** The uncompressed size written in the headers (default: the real one). */
  readonly declaredSize?: number;
  /** A Unix mode (file type and permissions): the entry is then marked as made on Unix. */
  readonly unixMode?: number;
}

/** A zip file of `entries`, exactly as given (no name is checked or changed). */
export function zip(entries: readonly RawEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name, 'utf8');
    const data = Buffer.from(entry.data ?? '');
    const method = entry.method ?? 8;
    const stored = method === 8 ? zlib.deflateRawSync(data) : data;
    const crc = zlib.crc32(data);
    const size = entry.declaredSize ?? data.length;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x0800, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt16LE(0x21, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(stored.length, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(entry.unixMode === undefined ? 20 : (3 << 8) | 20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(0x0800, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt16LE(0x21, 14);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(stored.length, 20);
    central.writeUInt32LE(size, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE(((entry.unixMode ?? 0) << 16) >>> 0, 38);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, stored);
    centrals.push(central, name);
    offset += local.length + name.length + stored.length;
  }
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, end]);
}

/** An ordinary addon archive: `folder/<folder>.toc` and `folder/core.lua` per folder, tagged with `tag`. */
export function addonZip(folders: readonly string[], tag: string): Buffer {
  return zip(
    folders.flatMap((folder) => [
      { name: `${folder}/` },
      { name: `${folder}/${folder}.toc`, data: `## Title: ${folder}\n## Version: ${tag}\n` },
      { name: `${folder}/core.lua`, data: `-- ${folder} ${tag}\n` },
    ]),
  );
}

export interface Dependency {
  slug: string;
  minVersion?: string;
  optional?: boolean;
}

/** Publishes release `version` of addon `slug` (made when new) with `archive` as its file; answers the release id. */
export async function publishAddon(
  t: TestApp,
  slug: string,
  version: string,
  archive: Buffer,
  dependencies: readonly Dependency[] = [],
  extra: Record<string, unknown> = {},
): Promise<string> {
  let addon = await admin(t, 'GET', `/api/admin/addons/${slug}`);
  if (addon.statusCode === 404) addon = await admin(t, 'POST', '/api/addons', { slug, name: slug, summary: slug });
  const addonId = addon.json<{ id: string }>().id;
  const file = await upload(t, `${slug}-${version}.zip`, archive);
  const res = await admin(t, 'POST', '/api/releases', {
    addonId,
    version,
    downloadType: 'local',
    filePath: file.filePath,
    dependencies,
    ...extra,
  });
  if (res.statusCode !== 201) throw new Error(`release failed ${res.statusCode}: ${res.body}`);
  return res.json<{ id: string }>().id;
}

/** The release's download count as the service reads it. */
export async function downloadCount(t: TestApp, slug: string, releaseId: string): Promise<number> {
  const addon = (await admin(t, 'GET', `/api/admin/addons/${slug}`)).json<{
    releases: { id: string; downloadCount: number }[];
  }>();
  return addon.releases.find((r) => r.id === releaseId)?.downloadCount ?? -1;
}

/** Every file and folder under `dir` with its content (folders as `/`), to compare trees exactly. */
export function tree(dir: string): Record<string, string> {
  if (!fs.existsSync(dir)) return {};
  const out: Record<string, string> = {};
  for (const name of fs.readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort()) {
    const file = path.join(dir, name);
    out[name.split(path.sep).join('/')] = fs.lstatSync(file).isDirectory() ? '/' : fs.readFileSync(file, 'utf8');
  }
  return out;
}

/** A game folder with the player's settings and an addon of their own that no manifest names. */
export function gameFolder(root: string): string {
  const game = path.join(root, 'game');
  fs.mkdirSync(path.join(game, 'WTF', 'Account'), { recursive: true });
  fs.writeFileSync(path.join(game, 'WTF', 'Account', 'SavedVariables.lua'), 'settings = true\n');
  fs.mkdirSync(path.join(game, 'Interface', 'AddOns', 'MyOwnAddon'), { recursive: true });
  fs.writeFileSync(path.join(game, 'Interface', 'AddOns', 'MyOwnAddon', 'mine.lua'), '-- mine\n');
  return game;
}
