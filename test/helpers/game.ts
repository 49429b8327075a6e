import { createHash } from 'node:crypto';
import type { TestApp } from './app.js';

/** Hex SHA-256 of bytes, computed here without the service's code. */
export const sha256Of = (bytes: Buffer | string): string => createHash('sha256').update(bytes).digest('hex');

export interface GameFile {
  path: string;
  content: Buffer;
  /** Cut into chunks of this many bytes (default: one chunk). */
  chunkBytes?: number;
  /** Cut into chunks of these lengths, in order (a content-defined cut); before `chunkBytes`. */
  chunkLengths?: readonly number[];
  extra?: Record<string, unknown>;
}

export interface BuiltManifest {
  text: string;
  /** Every chunk the manifest names, by its name. */
  chunks: Map<string, Buffer>;
}

/** A manifest of `files` for `app`/`version`/`buildCode` (fixed-size chunks: how they are cut is the publisher's business). */
export function manifestOf(
  build: { app?: string; version: string; buildCode: number },
  files: readonly GameFile[],
  extra: Record<string, unknown> = {},
): BuiltManifest {
  const chunks = new Map<string, Buffer>();
  const listed = files.map((file) => {
    const step = file.chunkBytes ?? Math.max(file.content.length, 1);
    const lengths = file.chunkLengths ?? [];
    const list: [string, number][] = [];
    for (let at = 0, i = 0; at < file.content.length; at += lengths[i++] ?? step) {
      const piece = file.content.subarray(at, at + (lengths[i] ?? step));
      const name = sha256Of(piece);
      chunks.set(name, piece);
      list.push([name, piece.length]);
    }
    return { path: file.path, size: file.content.length, sha256: sha256Of(file.content), chunks: list, ...file.extra };
  });
  const text = JSON.stringify({
    format: 1,
    app: build.app ?? 'app',
    version: build.version,
    buildCode: build.buildCode,
    files: listed,
    ...extra,
  });
  return { text, chunks };
}

export function putChunk(t: TestApp, name: string, bytes: Buffer) {
  return t.inject({
    method: 'PUT',
    url: `/api/admin/game/chunks/${name}`,
    headers: { cookie: t.cookie, 'content-type': 'application/octet-stream' },
    payload: bytes,
  });
}

/** Uploads the manifest's chunks, then creates the build: the answer to the creation. */
export async function publishBuild(
  t: TestApp,
  build: { version: string; buildCode: number },
  manifest: BuiltManifest,
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
) {
  for (const [name, bytes] of manifest.chunks) {
    const res = await putChunk(t, name, bytes);
    if (res.statusCode !== 201 && res.statusCode !== 200) throw new Error(`chunk ${res.statusCode}: ${res.body}`);
  }
  return t.inject({
    method: 'POST',
    url: '/api/admin/game/builds',
    headers: { cookie: t.cookie, ...headers },
    payload: { ...build, manifest: manifest.text, ...body },
  });
}

/** A build of one file, `WoW.exe`, plus `files` (for manifests that break one rule each). */
const exeFile: GameFile = { path: 'WoW.exe', content: Buffer.from('MZ the game') };
const textFile = (path: string, content = path): GameFile => ({ path, content: Buffer.from(content) });

/**
 * Manifests that break the player-safety and path rules (issue 51's table, game-files.md as amended
 * 2026-12-05), each with the words of the rule the refusal names: the service, the publish command
 * and the launcher refuse every one.
 */
export const RULE_BREAKS: readonly {
  name: string;
  files: readonly GameFile[];
  extra?: Record<string, unknown>;
  rule: string;
}[] = [
  { name: 'no file (an empty folder)', files: [], rule: 'files: a build lists at least one file' },
  {
    name: 'WTF/Config.wtf not initial',
    files: [exeFile, textFile('WTF/Config.wtf', 'SET realmlist "a"\n')],
    rule: 'files[1].policy: "WTF/Config.wtf" is in a player folder',
  },
  {
    name: 'an addon in Interface/ not initial',
    files: [exeFile, textFile('Interface/AddOns/Foo/Foo.toc', '## Title: Foo\n')],
    rule: 'files[1].policy: "Interface/AddOns/Foo/Foo.toc" is in a player folder',
  },
  {
    name: 'remove "Logs/*"',
    files: [exeFile, textFile('Data/patch-3.mpq')],
    extra: { remove: ['Logs/*'] },
    rule: 'remove[0]: "Logs/*" may not reach into the player folder "Logs/"',
  },
  {
    name: 'remove "*" in a build that lists no top-level file',
    files: [textFile('Data/patch-3.mpq'), textFile('Data/common.MPQ')],
    extra: { remove: ['*'] },
    rule: 'remove[0]: "*" must have at least two segments',
  },
  {
    name: 'a CON.txt',
    files: [exeFile, textFile('CON.txt')],
    rule: 'files[1].path: "CON.txt" has a segment Windows reserves ("CON.txt")',
  },
  {
    name: 'two names differing only in case',
    files: [exeFile, textFile('Data/Patch-3.mpq'), textFile('data/patch-3.MPQ', 'other')],
    rule: 'files: "data/patch-3.MPQ" and "Data/Patch-3.mpq" differ only in case',
  },
];

/** game-files.md's own example: `Data/patch-3.mpq` listed, `remove: ["Data/patch-*.mpq"]` (valid). */
export const SPEC_EXAMPLE: readonly GameFile[] = [
  { path: 'WoW.exe', content: Buffer.from('MZ the game, build 1183'), extra: { executable: true } },
  { path: 'Data/patch-3.mpq', content: Buffer.from('MPQ patch 3') },
  {
    path: 'WTF/Config.wtf',
    content: Buffer.from('SET realmlist "logon.example.test"\n'),
    extra: { policy: 'initial' },
  },
];
export const SPEC_REMOVE = { remove: ['Data/patch-*.mpq'] };
