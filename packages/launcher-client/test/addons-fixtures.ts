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
  /** The compressed size written in the headers (default: the real one). */
  readonly storedSize?: number;
  /** The CRC-32 written in the headers (default: the real one). */
  readonly crc?: number;
  /** The name its local header gives (default: `name`). */
  readonly localName?: string;
  /**
   * A data descriptor after the data, with or without its signature (flag bit 3; the local header's
   * CRC-32 and sizes 0); `missing`: the flag without the descriptor.
   */
  readonly descriptor?: 'signed' | 'unsigned' | 'missing';
  /** Its local record lies inside the previous entry's data (which must be stored), as in an overlapping zip bomb. */
  readonly inside?: boolean;
  /** Left out of the central directory: its local record is in the file, listed nowhere. */
  readonly unlisted?: boolean;
}

export interface ZipOptions {
  /** The entries the end record counts (default: those the central directory lists). */
  readonly endCount?: number;
  /** The entries it counts on this disk (default: `endCount`). */
  readonly endDiskCount?: number;
  /** A ZIP64 end record and its locator before the end record; they count the entries listed (`endCount` is the end record's). */
  readonly zip64End?: boolean;
}

interface BuiltEntry {
  /** Local header, name, data as stored, data descriptor. */
  readonly record: Buffer;
  /** The central directory header without its offset. */
  readonly central: Buffer;
  readonly name: Buffer;
  /** Where the entry's own data starts in `record` (an entry inside it follows that data). */
  readonly ownDataEnd: number;
}

function buildEntry(entry: RawEntry, data: Buffer, ownLength: number): BuiltEntry {
  const name = Buffer.from(entry.name, 'utf8');
  const localName = Buffer.from(entry.localName ?? entry.name, 'utf8');
  const method = entry.method ?? 8;
  const stored = method === 8 ? zlib.deflateRawSync(data) : data;
  const crc = entry.crc ?? zlib.crc32(data);
  const size = entry.declaredSize ?? data.length;
  const storedSize = entry.storedSize ?? stored.length;
  const flags = 0x0800 | (entry.descriptor === undefined ? 0 : 0x0008);
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt16LE(flags, 6);
  local.writeUInt16LE(method, 8);
  local.writeUInt16LE(0x21, 12);
  if (entry.descriptor === undefined) {
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(storedSize, 18);
    local.writeUInt32LE(size, 22);
  }
  local.writeUInt16LE(localName.length, 26);
  const descriptor = Buffer.alloc({ signed: 16, unsigned: 12, missing: 0, none: 0 }[entry.descriptor ?? 'none']);
  if (descriptor.length > 0) {
    const at = entry.descriptor === 'signed' ? 4 : 0;
    if (at === 4) descriptor.writeUInt32LE(0x08074b50, 0);
    descriptor.writeUInt32LE(crc, at);
    descriptor.writeUInt32LE(storedSize, at + 4);
    descriptor.writeUInt32LE(size, at + 8);
  }
  const central = Buffer.alloc(46);
  central.writeUInt32LE(0x02014b50, 0);
  central.writeUInt16LE(entry.unixMode === undefined ? 20 : (3 << 8) | 20, 4);
  central.writeUInt16LE(20, 6);
  central.writeUInt16LE(flags, 8);
  central.writeUInt16LE(method, 10);
  central.writeUInt16LE(0x21, 14);
  central.writeUInt32LE(crc, 16);
  central.writeUInt32LE(storedSize, 20);
  central.writeUInt32LE(size, 24);
  central.writeUInt16LE(name.length, 28);
  central.writeUInt32LE(((entry.unixMode ?? 0) << 16) >>> 0, 38);
  return {
    record: Buffer.concat([local, localName, stored, descriptor]),
    central,
    name,
    ownDataEnd: local.length + localName.length + ownLength,
  };
}

/** A zip file of `entries`, exactly as given (no name is checked or changed). */
export function zip(entries: readonly RawEntry[], options: ZipOptions = {}): Buffer {
  // The last first: an entry inside the previous one is part of that one's data.
  const built: BuiltEntry[] = [];
  let nested: Buffer | null = null;
  for (let i = entries.length - 1; i >= 0; i--) {
    const entry = entries[i]!;
    const own = Buffer.from(entry.data ?? '');
    if (nested !== null && entry.method !== 0) throw new Error(`${entry.name} holds another entry: it must be stored`);
    built[i] = buildEntry(entry, nested === null ? own : Buffer.concat([own, nested]), own.length);
    nested = entry.inside === true ? built[i]!.record : null;
  }
  const offsets: number[] = [];
  const locals: Buffer[] = [];
  let offset = 0;
  entries.forEach((entry, i) => {
    if (entry.inside === true) {
      offsets.push(offsets[i - 1]! + built[i - 1]!.ownDataEnd);
      return;
    }
    offsets.push(offset);
    locals.push(built[i]!.record);
    offset += built[i]!.record.length;
  });
  const centrals: Buffer[] = [];
  entries.forEach((entry, i) => {
    if (entry.unlisted === true) return;
    const central = Buffer.from(built[i]!.central);
    central.writeUInt32LE(offsets[i]!, 42);
    centrals.push(central, built[i]!.name);
  });
  const directory = Buffer.concat(centrals);
  const listed = centrals.length / 2;
  const count = options.endCount ?? listed;
  const zip64 = Buffer.alloc(options.zip64End === true ? 56 + 20 : 0);
  if (zip64.length > 0) {
    zip64.writeUInt32LE(0x06064b50, 0);
    zip64.writeBigUInt64LE(44n, 4);
    zip64.writeUInt16LE(45, 12);
    zip64.writeUInt16LE(45, 14);
    zip64.writeBigUInt64LE(BigInt(listed), 24);
    zip64.writeBigUInt64LE(BigInt(listed), 32);
    zip64.writeBigUInt64LE(BigInt(directory.length), 40);
    zip64.writeBigUInt64LE(BigInt(offset), 48);
    zip64.writeUInt32LE(0x07064b50, 56);
    zip64.writeBigUInt64LE(BigInt(offset + directory.length), 64);
    zip64.writeUInt32LE(1, 72);
  }
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(options.endDiskCount ?? count, 8);
  end.writeUInt16LE(count, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, zip64, end]);
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
