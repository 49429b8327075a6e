/**
 * The game client on a player's real machine, its network and its old copy (game-files.md, "On a
 * player's real machine": deadlines for mirrors, adopting an old copy; issue 52), against the real
 * service through the tampering proxy: a mirror that accepts connections and never answers is given
 * up at its first deadline (not once per chunk), one that answers 404 is still asked, and a first
 * install over an old copy of the client with edits that shift its bytes downloads only the chunks
 * the old copy does not hold.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { BuiltManifest, GameFile } from '../../../test/helpers/game.js';
import type { TrustedKey } from '../src/index.js';
import { Chunker, GAME_CHUNK_SIZES } from '../src/game/fastcdc.js';
import { gameManager, type GameOptions, KiB, publishGame, read, tempDir, withService } from './game-fixtures.js';
import type { Service } from './helpers.js';

const MiB = 1024 * KiB;
let s: Service;
let pinned: TrustedKey[];

/** The chunk lengths the publisher's FastCDC (256 KiB / 1 MiB / 4 MiB) cuts `content` into. */
function cut(content: Buffer): number[] {
  const chunker = new Chunker(GAME_CHUNK_SIZES);
  const lengths: number[] = [];
  for (let at = 0; at < content.length; at += lengths.at(-1)!) lengths.push(chunker.cut(content, at, content.length));
  return lengths;
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** `content` with `insert` put at `at`. */
const inserted = (content: Buffer, at: number, insert: Buffer) =>
  Buffer.concat([content.subarray(0, at), insert, content.subarray(at)]);

/** The old copy, as the operator's old zip unpacks it (no build of it is recorded anywhere). */
const OLD: Record<string, Buffer> = {
  'WoW.exe': randomBytes(700 * KiB),
  'Data/common.MPQ': randomBytes(16 * MiB),
  'Data/model.MPQ': randomBytes(3 * MiB),
  'Fonts/font.ttf': randomBytes(20 * KiB),
};
/** The new build: insertions and a deletion that shift every later byte, a few bytes rewritten, a new file. */
const NEW: Record<string, Buffer> = {
  'WoW.exe': (() => {
    const exe = Buffer.from(OLD['WoW.exe']!);
    exe.write('patched', 600 * KiB);
    return exe;
  })(),
  'Data/common.MPQ': inserted(
    inserted(OLD['Data/common.MPQ']!, 9 * MiB, randomBytes(100)),
    MiB + 17,
    randomBytes(40 * KiB),
  ),
  'Data/model.MPQ': Buffer.concat([
    OLD['Data/model.MPQ']!.subarray(0, MiB),
    OLD['Data/model.MPQ']!.subarray(MiB + 64 * KiB),
  ]),
  'Fonts/font.ttf': OLD['Fonts/font.ttf']!,
  'Data/patch-3.mpq': randomBytes(300 * KiB),
};
const FILES: GameFile[] = Object.entries(NEW).map(([file, content]) => ({
  path: file,
  content,
  chunkLengths: cut(content),
}));
let build: BuiltManifest;
/** Build 1: small, in many chunks (a chunk request each). */
const SMALL: GameFile[] = [
  { path: 'WoW.exe', content: randomBytes(160 * KiB), chunkBytes: 16 * KiB },
  { path: 'Data/common.MPQ', content: randomBytes(96 * KiB), chunkBytes: 16 * KiB },
];
let small: BuiltManifest;

withService(async (service, keys) => {
  s = service;
  pinned = keys;
  small = await publishGame(s, '1.0.0', 1, SMALL);
});

const game = (options: GameOptions = {}) =>
  gameManager(s, pinned, tempDir('adopt-state-'), tempDir('adopt-game-'), options);
const size = (chunks: Iterable<Buffer>) => [...chunks].reduce((n, c) => n + c.length, 0);
const chunkRequests = () => s.proxy.requests('/api/game/chunks/').length;
const expectBuild = (gameDir: string) => {
  for (const [file, content] of Object.entries(NEW)) expect(read(gameDir, file).equals(content), file).toBe(true);
};

/** A server that accepts every connection and reads it, never answering; `asked` counts the requests that came. */
async function silentMirror() {
  const sockets = new Set<net.Socket>();
  let asked = 0;
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('data', (data: Buffer) => (asked += data.toString('latin1').split('GET /').length - 1));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/game-chunks`,
    asked: () => asked,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A loopback port nothing listens on (a mirror that is down: connections refused). */
async function closedPort(): Promise<string> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/game-chunks`;
}

describe('deadlines for mirrors: one that misses one is not asked again in the run', () => {
  it('a mirror that accepts connections and never answers, given first, costs one deadline, not one per chunk; one that refuses connections is given up too', async () => {
    const silent = await silentMirror();
    const down = await closedPort();
    const deadline = 2000;
    const connections = 2;
    try {
      const manager = game({ mirrors: [silent.url, down], connections, deadlines: { timeoutMs: deadline } });
      const before = chunkRequests();
      const started = performance.now();
      const result = await manager.update();
      const took = performance.now() - started;
      // Waiting out the deadline per chunk would take (chunks / connections) deadlines: 8 here.
      expect(small.chunks.size / connections).toBe(8);
      expect(took).toBeLessThan(2 * deadline + 2000);
      expect(result).toMatchObject({ result: 'installed', to: 1 });
      expect(result.downloadedBytes).toBe(size(small.chunks.values()));
      // Each worker asked each mirror at most once: its first request failed and the mirror was given up.
      expect(silent.asked()).toBeGreaterThanOrEqual(1);
      expect(silent.asked()).toBeLessThanOrEqual(connections);
      const [stalled, refused] = result.mirrors;
      expect(stalled).toMatchObject({ url: silent.url, chunks: 0 });
      expect(stalled!.failures).toBeGreaterThanOrEqual(1);
      expect(stalled!.failures).toBeLessThanOrEqual(connections);
      expect(refused).toMatchObject({ url: down, chunks: 0 });
      expect(refused!.failures).toBeGreaterThanOrEqual(1);
      expect(refused!.failures).toBeLessThanOrEqual(connections);
      // Every chunk came from the service, once.
      expect(chunkRequests() - before).toBe(small.chunks.size);
      for (const file of SMALL) expect(read(manager.gameDir, file.path).equals(file.content), file.path).toBe(true);
    } finally {
      await silent.close();
    }
  });
});

describe('a mirror that answers 404 (a partial copy) is asked for every chunk', () => {
  it('it serves the chunks it has; those it lacks come from the service', async () => {
    const names = [...small.chunks.keys()];
    const held = new Set(names.filter((_, i) => i % 2 === 0));
    const server = http.createServer((req, res) => {
      const name = (req.url ?? '').split('/').at(-1) ?? '';
      const bytes = held.has(name) ? small.chunks.get(name) : undefined;
      if (bytes === undefined) res.writeHead(404).end();
      else res.writeHead(200).end(bytes);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/game-chunks`;
      const manager = game({ mirrors: [url], connections: 1 });
      const before = chunkRequests();
      const result = await manager.update();
      expect(result.mirrors).toEqual([{ url, chunks: held.size, failures: names.length - held.size }]);
      expect(chunkRequests() - before).toBe(names.length - held.size);
      for (const file of SMALL) expect(read(manager.gameDir, file.path).equals(file.content), file.path).toBe(true);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('adopting an old copy: a first install reuses every chunk found anywhere in the same-named file', () => {
  beforeAll(async () => {
    build = await publishGame(s, '2.0.0', 2, FILES);
  });
  /** The old copy laid down by hand in a new game folder (no state: a first install). */
  function oldCopy(gameDir: string) {
    for (const [file, content] of Object.entries(OLD)) {
      fs.mkdirSync(path.dirname(path.join(gameDir, file)), { recursive: true });
      fs.writeFileSync(path.join(gameDir, file), content);
    }
  }
  /** The new build's chunks whose bytes are nowhere in the old copy. */
  const notInOld = () => [...build.chunks.values()].filter((c) => !Object.values(OLD).some((old) => old.includes(c)));
  /**
   * The new build's chunks that are not among the old copy's own, each old file cut as the publisher
   * cuts (what adoption finds): a chunk whose bytes are in an old file across two of its cuts (the
   * content-defined cuts after an edit need not meet the new ones at once) is downloaded.
   */
  const notInOldCut = () => {
    const old = new Set(
      Object.values(OLD).flatMap((content) => {
        let at = 0;
        return cut(content).map((length) => sha256(content.subarray(at, (at += length))));
      }),
    );
    return [...build.chunks].filter(([name]) => !old.has(name)).map(([, chunk]) => chunk);
  };
  /** The new build's chunks not at the new manifest's offsets in the same-named old file (what offsets alone reuse). */
  const notAtOffsets = () =>
    [...build.chunks.values()].filter(
      (chunk) =>
        !FILES.some(({ path: file, content }) => {
          const old = OLD[file];
          for (let at = content.indexOf(chunk); old !== undefined && at !== -1; at = content.indexOf(chunk, at + 1)) {
            if (old.subarray(at, at + chunk.length).equals(chunk)) return true;
          }
          return false;
        }),
    );

  it("an old copy with insertions that shift its bytes: only the chunks its files' own cuts lack are downloaded, every file exact", async () => {
    const manager = game();
    oldCopy(manager.gameDir);
    const needed = size(notInOldCut());
    // Near what is nowhere in the old copy at all; reusing chunks only at the manifest's offsets would
    // download several times more: the edits shift them.
    expect(needed).toBeLessThan(size(notInOld()) + 5 * MiB);
    expect(size(notAtOffsets())).toBeGreaterThan(2 * needed);
    const before = chunkRequests();
    const result = await manager.update();
    expect(result).toMatchObject({ result: 'installed', from: null, to: 2 });
    expect(result.downloadedBytes).toBeLessThanOrEqual(needed);
    expect(result.reusedBytes).toBeGreaterThanOrEqual(size(build.chunks.values()) - result.downloadedBytes - 20 * KiB);
    expect(chunkRequests() - before).toBeLessThanOrEqual(notInOldCut().length);
    expectBuild(manager.gameDir);
    expect(await manager.verify({ full: true })).toMatchObject({ ok: true });
  });

  it('an old file changed after it was cut: each chunk is hashed again when read, the changed ones downloaded, every file exact', async () => {
    const manager = game({ connections: 1 });
    oldCopy(manager.gameDir);
    // On the first chunk request (the old copy cut, chunks being gathered), the old common.MPQ is rewritten.
    let done = false;
    s.proxy.rule = (seen) => {
      if (seen.url.startsWith('/api/game/chunks/') && !done) {
        done = true;
        fs.writeFileSync(path.join(manager.gameDir, 'Data/common.MPQ'), randomBytes(16 * MiB));
      }
      return Promise.resolve(undefined);
    };
    const result = await manager.update();
    expect(done).toBe(true);
    expect(result.downloadedBytes).toBeGreaterThan(size(notInOld()));
    expectBuild(manager.gameDir);
  });
});
