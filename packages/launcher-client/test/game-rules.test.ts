import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type BuiltManifest,
  type GameFile,
  manifestOf,
  publishBuild,
  RULE_BREAKS,
  sha256Of,
  SPEC_EXAMPLE,
  SPEC_REMOVE,
} from '../../../test/helpers/game.js';
import { GameManager, ManifestError, RollbackError, type TrustedKey, UpdateManager } from '../src/index.js';
import { rogueKey, runCli, type Service, signLikeTheService, startService } from './helpers.js';

/**
 * Issue 51 at the launcher: a manifest that would take what is the player's (game-files.md as amended
 * 2026-12-05) is refused even when it comes correctly signed (a service or mirror gone wrong: the
 * proxy replaces a stored build's manifest in transit and a trusted key re-signs it, check-update's
 * manifestSha256 and manifestSize included): kind `manifest`, exit 2, nothing written in the game
 * folder, the player's files byte for byte unchanged. The spec's own example installs, and a later
 * build's `remove` deletes only the match it does not list.
 */

let s: Service;
/** The service's keys, which the launcher trusts. */
let pinned: TrustedKey[];
/** A key also trusted that re-signs what the proxy changes. */
const rogue = rogueKey();
const withRogue = () => [...pinned, rogue.trusted];

/** The launcher's state folder and the game folder, removed with the service. */
let stateDir: string;
let gameDir: string;

beforeAll(async () => {
  s = await startService();
  pinned = await s.keys();
  stateDir = s.stateDir();
  gameDir = s.stateDir();
});
afterEach(() => {
  s.proxy.rule = null;
});
afterAll(() => s.close());

/** Every folder and file under `root` (the game folder whole, the launcher's work folder included), files by SHA-256. */
function treeOf(root: string): Record<string, string> {
  const tree: Record<string, string> = {};
  for (const entry of fs.readdirSync(root, { recursive: true, withFileTypes: true })) {
    const rel = path.relative(root, path.join(entry.parentPath, entry.name));
    tree[rel] = entry.isDirectory()
      ? 'folder'
      : createHash('sha256')
          .update(fs.readFileSync(path.join(root, rel)))
          .digest('hex');
  }
  return tree;
}

/** What the player and the game wrote in the game folder: settings, addons, pictures, logs, caches, own files. */
const PLAYER_FILES: Record<string, string> = {
  'WTF/Config.wtf': 'SET realmlist "my.own.realm"\nSET gxResolution "2560x1440"\n',
  'WTF/Account/PLAYER/SavedVariables/Foo.lua': 'Foo = { enabled = true }\n',
  'Interface/AddOns/Foo/Foo.toc': '## Title: Foo\n',
  'Interface/AddOns/Foo/Foo.lua': 'print("mine")\n',
  'Screenshots/WoWScrnShot_120526.jpg': 'a picture',
  'Logs/Chat.log': 'a log',
  'Errors/crash.txt': 'a crash',
  'WDB/creaturecache.wdb': 'a cache',
  'Cache/x.bin': 'a cache',
  'notes.txt': 'my own notes',
  'Data/my-own.mpq': 'mine, not matched by any pattern',
};
const playerTree = (gameDir: string) =>
  Object.fromEntries(
    Object.keys(PLAYER_FILES).map((file) => [file, sha256Of(fs.readFileSync(path.join(gameDir, file)))]),
  );

const SPEC_BUILD = { version: '1.18.3', buildCode: 1183 };
/** A later build: the same listed patch, a new one, and the same pattern. */
const LATER_BUILD = { version: '1.20.0', buildCode: 2000 };
const LATER_FILES: GameFile[] = [
  { path: 'WoW.exe', content: Buffer.from('MZ the game, build 2000'), extra: { executable: true } },
  SPEC_EXAMPLE[1]!,
  { path: 'Data/patch-4.mpq', content: Buffer.from('MPQ patch 4') },
  SPEC_EXAMPLE[2]!,
];
let later: BuiltManifest;

function game(trustedKeys: TrustedKey[] = pinned) {
  const updates = new UpdateManager({ serverUrl: s.proxy.url, trustedKeys, stateDir, retry: { baseDelayMs: 10 } });
  return new GameManager({ updates, gameDir, app: 'app' });
}

/** `launcher-client game update` on the same folders, trusting `keys`. */
function cliUpdate(keys: TrustedKey[]) {
  const trust = path.join(s.stateDir(), 'keys.json');
  fs.writeFileSync(trust, JSON.stringify(keys));
  return runCli([
    'game',
    'update',
    '--server',
    s.proxy.url,
    '--trust',
    trust,
    '--state',
    stateDir,
    '--game-dir',
    gameDir,
    '--app',
    'app',
  ]);
}

/**
 * The proxy answers check-update with `latest` changed to `build` and the manifest's SHA-256 and size
 * of `text`, and the manifest's route with `text`: every answer re-signed by the rogue (trusted) key.
 */
function serve(text: string, build: { version: string; buildCode: number }, answer: Record<string, unknown> = {}) {
  const bytes = Buffer.from(text);
  s.proxy.rule = async (seen, upstream) => {
    const url = new URL(seen.url, 'http://x');
    const manifestRoute = url.pathname.startsWith('/api/game/builds/');
    if (url.pathname !== '/api/game/check-update' && !manifestRoute) return undefined;
    const base = await upstream(manifestRoute ? `/api/game/builds/${LATER_BUILD.buildCode}/manifest` : seen.url);
    let body = bytes;
    if (!manifestRoute) {
      const parsed = JSON.parse(base.body.toString()) as { latest: Record<string, unknown> };
      body = Buffer.from(
        JSON.stringify({
          ...parsed,
          ...answer,
          latest: {
            ...parsed.latest,
            ...build,
            manifestSha256: sha256Of(bytes),
            manifestSize: bytes.length,
            manifestUrl: `${s.proxy.url}/api/game/builds/${build.buildCode}/manifest`,
          },
        }),
      );
    }
    return {
      ...base,
      status: 200,
      body,
      headers: { ...base.headers, ...signLikeTheService(body, rogue.privateKey, rogue.keyId, seen.url) },
    };
  };
}

describe("the launcher and the manifest rules: nothing of the player's is ever lost", () => {
  it("installs the spec's example (Data/patch-3.mpq listed with remove Data/patch-*.mpq) beside the player's files", async () => {
    const example = manifestOf(SPEC_BUILD, SPEC_EXAMPLE, SPEC_REMOVE);
    expect((await publishBuild(s.t, SPEC_BUILD, example)).statusCode).toBe(201);
    for (const [file, content] of Object.entries(PLAYER_FILES)) {
      fs.mkdirSync(path.dirname(path.join(gameDir, file)), { recursive: true });
      fs.writeFileSync(path.join(gameDir, file), content);
    }
    const result = await game().update();
    expect(result).toMatchObject({ result: 'installed', to: 1183, files: { added: 2, removed: 0 } });
    for (const file of SPEC_EXAMPLE.slice(0, 2))
      expect(fs.readFileSync(path.join(gameDir, file.path))).toEqual(file.content);
    // The player's settings are theirs: the build's default is written only where none is.
    expect(fs.readFileSync(path.join(gameDir, 'WTF/Config.wtf'), 'utf8')).toBe(PLAYER_FILES['WTF/Config.wtf']);
    expect(playerTree(gameDir)).toEqual(
      Object.fromEntries(Object.entries(PLAYER_FILES).map(([file, content]) => [file, sha256Of(content)])),
    );
    // A later build, stored through the service; the tests below replace it in transit.
    later = manifestOf(LATER_BUILD, LATER_FILES, SPEC_REMOVE);
    expect((await publishBuild(s.t, LATER_BUILD, later)).statusCode).toBe(201);
  });

  for (const row of RULE_BREAKS) {
    it(`a correctly signed manifest with ${row.name}: kind manifest, exit 2, nothing written, the player's files unchanged`, async () => {
      const hostile = manifestOf(LATER_BUILD, row.files, row.extra);
      serve(hostile.text, LATER_BUILD);
      const before = treeOf(gameDir);
      const chunks = s.proxy.requests('/api/game/chunks/').length;

      const failure = await game(withRogue())
        .update()
        .catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(ManifestError);
      const { message } = failure as ManifestError;
      expect(message.startsWith(`the manifest breaks the rules: ${row.rule}`), message).toBe(true);
      expect(treeOf(gameDir)).toEqual(before);

      const run = await cliUpdate(withRogue());
      expect(run.code, run.stderr).toBe(2);
      expect(run.failure).toMatchObject({ kind: 'manifest' });
      expect(run.failure?.error).toContain(row.rule);
      expect(treeOf(gameDir)).toEqual(before);
      expect(s.proxy.requests('/api/game/chunks/').length).toBe(chunks);
      expect(await game().status()).toEqual({ installed: SPEC_BUILD, underWay: null, inUse: [] });
    });
  }

  it("a later build's remove deletes only the match it does not list (Data/patch-2.mpq), never the listed Data/patch-3.mpq", async () => {
    // An old patch a previous copy of the client left.
    fs.writeFileSync(path.join(gameDir, 'Data/patch-2.mpq'), 'MPQ patch 2');
    const result = await game().update();
    expect(result).toMatchObject({
      result: 'updated',
      from: 1183,
      to: 2000,
      files: { added: 1, changed: 1, removed: 1 },
    });
    expect(fs.existsSync(path.join(gameDir, 'Data/patch-2.mpq'))).toBe(false);
    for (const file of LATER_FILES.slice(0, 3))
      expect(fs.readFileSync(path.join(gameDir, file.path))).toEqual(file.content);
    expect(playerTree(gameDir)).toEqual(
      Object.fromEntries(Object.entries(PLAYER_FILES).map(([file, content]) => [file, sha256Of(content)])),
    );
  });

  it('a correctly signed offer of a lower build without downgrade (1183 after 2000) is a rollback: exit 2, nothing written', async () => {
    serve(manifestOf(SPEC_BUILD, SPEC_EXAMPLE, SPEC_REMOVE).text, SPEC_BUILD, { downgrade: false });
    const before = treeOf(gameDir);
    await expect(game(withRogue()).update()).rejects.toBeInstanceOf(RollbackError);
    const run = await cliUpdate(withRogue());
    expect(run.code).toBe(2);
    expect(run.failure).toMatchObject({ kind: 'rollback' });
    expect(treeOf(gameDir)).toEqual(before);
    expect(await game().status()).toEqual({ installed: LATER_BUILD, underWay: null, inUse: [] });
  });
});
