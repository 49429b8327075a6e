/**
 * The game client on Windows semantics: Windows Node 22 under Wine against the real service (on
 * Linux, in-process), with stand-ins for a running game and an antivirus (test/wine.ts). The rules
 * are game-files.md's "On a player's real machine".
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GameFile, manifestOf, publishBuild, sha256Of } from '../../../test/helpers/game.js';
import { type Service, startService } from './helpers.js';
import { type Run, win, Wine, windowsTestsRun } from './wine.js';

const KiB = 1024;
const WORK = '.patchwell-work';

interface Build {
  code: number;
  version: string;
  files: GameFile[];
}

/** A game folder and its launcher's state folder. */
interface Folder {
  game: string;
  state: string;
}

describe.runIf(windowsTestsRun())('the game client under Wine (Windows Node 22)', () => {
  let s: Service;
  let wine: Wine;
  let keys: string;
  let nextCode = 10;
  const dirs: string[] = [];

  beforeAll(async () => {
    [s, wine] = await Promise.all([startService(), Wine.prepare()]);
    keys = path.join(tempDir('lc-win-keys-'), 'keys.json');
    fs.writeFileSync(keys, JSON.stringify(await s.keys()));
  }, 300_000);
  afterAll(async () => {
    await wine?.close();
    await s?.close();
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  });

  function tempDir(prefix: string): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  }

  /** A new latest build: every file's content its own. */
  async function publish(): Promise<Build> {
    const code = nextCode++;
    const version = `1.${code}`;
    const files: GameFile[] = [
      { path: 'WoW.exe', content: randomBytes(256 * KiB), chunkBytes: 64 * KiB, extra: { executable: true } },
      { path: 'Data/common.MPQ', content: randomBytes(512 * KiB), chunkBytes: 128 * KiB },
      { path: 'Data/patch.MPQ', content: randomBytes(64 * KiB) },
      { path: 'fmod.dll', content: randomBytes(16 * KiB) },
    ];
    const res = await publishBuild(s.t, { version, buildCode: code }, manifestOf({ version, buildCode: code }, files));
    expect(res.statusCode, res.body).toBe(201);
    return { code, version, files };
  }

  const online = (x: Folder) => [
    '--server',
    s.proxy.url,
    '--trust',
    win(keys),
    '--state',
    win(x.state),
    '--game-dir',
    win(x.game),
    '--app',
    'app',
  ];
  const game = (command: string, x: Folder, more: string[] = [], cli?: string) =>
    wine.client(
      [
        'game',
        command,
        ...(command === 'status' ? ['--state', win(x.state), '--game-dir', win(x.game)] : online(x)),
        ...more,
      ],
      { cli },
    );

  /** `game` under a fresh `root` (made here), with a fresh state folder. */
  function folder(...under: string[]): Folder {
    const gameDir = path.join(tempDir('lc-win-game-'), ...under);
    fs.mkdirSync(gameDir, { recursive: true });
    return { game: gameDir, state: tempDir('lc-win-state-') };
  }

  function expectOk(run: Run): Record<string, unknown> {
    expect(run.code, `exit ${run.code}: ${run.stderr}`).toBe(0);
    return run.last!;
  }

  /** Every file of `build` in `dir`, exact. */
  function expectFiles(dir: string, build: Build) {
    for (const file of build.files) {
      expect(sha256Of(fs.readFileSync(path.join(dir, file.path))), file.path).toBe(sha256Of(file.content));
    }
  }

  const chunkRequests = () => s.proxy.requests('/api/game/chunks/').length;

  /** A folder with `old` installed by the client, and `next` published after it. */
  async function installedThenNewer(): Promise<Folder & { old: Build; next: Build }> {
    const old = await publish();
    const x = folder('Acme Game');
    expect(expectOk(await game('update', x))).toMatchObject({ result: 'installed', to: old.code });
    return { ...x, old, next: await publish() };
  }

  /**
   * A first install into a folder holding an old copy's `wow.exe` and `data/COMMON.mpq` (the
   * manifest's `WoW.exe` and `Data/common.MPQ`, other case, the build's content): both reused.
   */
  async function adoptOldCopy(): Promise<Folder> {
    const build = await publish();
    const x = folder('Acme Game');
    fs.mkdirSync(path.join(x.game, 'data'));
    fs.writeFileSync(path.join(x.game, 'wow.exe'), build.files[0]!.content);
    fs.writeFileSync(path.join(x.game, 'data/COMMON.mpq'), build.files[1]!.content);
    const before = chunkRequests();
    const result = expectOk(await game('update', x));
    expect(result).toMatchObject({ result: 'installed', to: build.code, files: { added: 2, unchanged: 2 } });
    expect(result.downloadedBytes).toBe(build.files.slice(2).reduce((n, f) => n + f.content.length, 0));
    expect(chunkRequests() - before).toBe(2);
    return x;
  }

  describe('what works today', () => {
    it('the packed client: a fresh install into Program Files (x86)\\Acme Game, updated, verified, repaired', async () => {
      const cli = await wine.packedClient();
      const first = await publish();
      const x = folder('Program Files (x86)', 'Acme Game');
      const installed = expectOk(await game('update', x, [], cli));
      expect(installed).toMatchObject({ result: 'installed', from: null, to: first.code, files: { added: 4 } });
      expectFiles(x.game, first);
      expect(expectOk(await game('status', x, [], cli))).toMatchObject({
        installed: { version: first.version, buildCode: first.code },
        underWay: null,
      });

      const second = await publish();
      expect(expectOk(await game('update', x, [], cli))).toMatchObject({
        result: 'updated',
        from: first.code,
        to: second.code,
        files: { changed: 4 },
      });
      expectFiles(x.game, second);
      expect(fs.existsSync(path.join(x.game, WORK))).toBe(false);

      fs.appendFileSync(path.join(x.game, 'Data/common.MPQ'), 'damage');
      fs.rmSync(path.join(x.game, 'fmod.dll'));
      const verified = await game('verify', x, ['--full'], cli);
      expect(verified.code).toBe(3);
      expect(verified.last).toMatchObject({ ok: false, missing: ['fmod.dll'], damaged: ['Data/common.MPQ'] });
      const repaired = expectOk(await game('repair', x, [], cli));
      expect((repaired.repaired as string[]).sort()).toEqual(['Data/common.MPQ', 'fmod.dll']);
      expectFiles(x.game, second);
      expect(expectOk(await game('verify', x, ['--full'], cli))).toMatchObject({ ok: true, buildCode: second.code });
    }, 300_000);

    it('a fresh install into a CJK folder with spaces', async () => {
      const build = await publish();
      const x = folder('我的 游戏', '艾泽拉斯 客户端');
      expect(expectOk(await game('update', x))).toMatchObject({ result: 'installed', to: build.code });
      expectFiles(x.game, build);
      expect(expectOk(await game('verify', x, ['--full']))).toMatchObject({ ok: true });
    }, 120_000);

    it('a game folder whose managed paths pass 260 characters (297)', async () => {
      const x = folder();
      // Folders of at most 100 characters each, until Data\common.MPQ's full path is 297 long.
      const tail = '/Data/common.MPQ';
      for (let left = 297 - win(x.game + tail).length; left > 0;) {
        // A separator and a name each time; never one character left over (a name needs one).
        const length = left <= 101 ? left - 1 : left === 102 ? 99 : 100;
        x.game = path.join(x.game, 'Acme Game folder '.padEnd(length, 'x').slice(0, length));
        left -= length + 1;
      }
      fs.mkdirSync(x.game, { recursive: true });
      expect(win(x.game + tail)).toHaveLength(297);
      const build = await publish();
      expect(expectOk(await game('update', x))).toMatchObject({ result: 'installed', to: build.code });
      expectFiles(x.game, build);
      expect(expectOk(await game('verify', x, ['--full']))).toMatchObject({ ok: true });
    }, 120_000);

    it('read-only files (attrib +r) are updated and repaired', async () => {
      const x = await installedThenNewer();
      for (const file of x.old.files) await wine.attrib('+r', path.join(x.game, file.path));
      expect(fs.statSync(path.join(x.game, 'WoW.exe')).mode & 0o222).toBe(0);
      expect(expectOk(await game('update', x))).toMatchObject({ result: 'updated', from: x.old.code, to: x.next.code });
      expectFiles(x.game, x.next);

      const damaged = path.join(x.game, 'Data/patch.MPQ');
      fs.appendFileSync(damaged, 'damage');
      await wine.attrib('+r', damaged);
      expect(expectOk(await game('repair', x))).toMatchObject({ repaired: ['Data/patch.MPQ'] });
      expectFiles(x.game, x.next);
    }, 180_000);

    it("an old copy's wow.exe and data/COMMON.mpq are adopted: reused, never duplicated", async () => {
      const x = await adoptOldCopy();
      // Each managed file once, whatever its spelling.
      const listed = fs.readdirSync(x.game, { recursive: true, encoding: 'utf8' }).map((f) => f.toLowerCase());
      expect(listed.sort()).toEqual(['data', 'data/common.mpq', 'data/patch.mpq', 'fmod.dll', 'wow.exe']);
      expect(expectOk(await game('verify', x, ['--full']))).toMatchObject({ ok: true, extra: [] });
    }, 120_000);
  });

  /**
   * game-files.md's "On a player's real machine" as issue 53's "Must hold" puts it: files in use,
   * read-only files, case.
   */
  describe('files in use, read-only files, case (game-files.md, "On a player\'s real machine")', () => {
    /** An update while `held(x)` is held: in-use, nothing renamed; after release the rerun only renames. */
    async function updateWhileHeld(held: (x: Folder) => string[], named: RegExp) {
      const x = await installedThenNewer();
      const running = await wine.hold(held(x));
      try {
        const refused = await game('update', x);
        expect(refused.code, refused.stderr).toBe(1);
        expect(refused.failure, refused.stderr).toMatchObject({ kind: 'in-use' });
        expect(JSON.stringify(refused.failure)).toMatch(named);
        expect(refused.ms).toBeLessThan(15_000);
        expectFiles(x.game, x.old);
        // The work files are kept for the rerun.
        expect(fs.existsSync(path.join(x.game, WORK))).toBe(true);
        expect(expectOk(await game('status', x))).toMatchObject({
          installed: { buildCode: x.old.code },
          underWay: null,
        });
        expect(expectOk(await game('verify', x))).toMatchObject({ ok: true, buildCode: x.old.code });
      } finally {
        await running.release();
      }
      const before = chunkRequests();
      const rerun = expectOk(await game('update', x));
      expect(rerun).toMatchObject({ result: 'updated', from: x.old.code, to: x.next.code });
      // Everything was downloaded and assembled before: the rerun renames at once.
      expect(chunkRequests()).toBe(before);
      expectFiles(x.game, x.next);
      expect(fs.existsSync(path.join(x.game, WORK))).toBe(false);
      expect(expectOk(await game('verify', x, ['--full']))).toMatchObject({ ok: true, buildCode: x.next.code });
    }

    it(
      'an update while WoW.exe alone is held: in-use within 15 s naming it, every file the old build\'s, underWay null, verify ok; after release the rerun says "updated" from the old build',
      () => updateWhileHeld((x) => [path.join(x.game, 'WoW.exe')], /WoW\.exe/),
      240_000,
    );

    it(
      'an update while WoW.exe, Data/common.MPQ and their folders are held: the same',
      () =>
        updateWhileHeld(
          (x) => [
            x.game,
            path.join(x.game, 'WoW.exe'),
            path.join(x.game, 'Data'),
            path.join(x.game, 'Data/common.MPQ'),
          ],
          /WoW\.exe|common\.MPQ|Data/,
        ),
      240_000,
    );

    it('game status names the managed files held right now in "inUse"', async () => {
      const x = await installedThenNewer();
      expect(expectOk(await game('status', x))).toMatchObject({ inUse: [] });
      const running = await wine.hold([path.join(x.game, 'WoW.exe'), path.join(x.game, 'Data/common.MPQ')]);
      try {
        const status = expectOk(await game('status', x));
        expect((status.inUse as string[]).sort()).toEqual(['Data/common.MPQ', 'WoW.exe']);
      } finally {
        await running.release();
      }
      expect(expectOk(await game('status', x))).toMatchObject({ inUse: [] });
    }, 180_000);

    it.each([
      ['read and delete', 'rd'],
      ['read, write and delete', 'rwd'],
    ] as const)(
      'an antivirus holding each new file 1.5 s (shared for %s): the update succeeds; a work folder it keeps is no failure',
      async (_, share) => {
        const x = await installedThenNewer();
        const scanner = await wine.scan(x.game, 1500, share);
        let updated: Run;
        try {
          updated = await game('update', x);
          // It did hold the new work files.
          expect(scanner.held().filter((file) => file.startsWith(`${WORK}\\`)).length).toBeGreaterThan(0);
        } finally {
          await scanner.stop();
        }
        expect(expectOk(updated)).toMatchObject({ result: 'updated', from: x.old.code, to: x.next.code });
        expectFiles(x.game, x.next);
        // A work folder left behind is removed by the next command.
        expect(expectOk(await game('update', x))).toMatchObject({ result: 'up-to-date' });
        expect(fs.existsSync(path.join(x.game, WORK))).toBe(false);
      },
      240_000,
    );

    it('a read-only managed file is made writable before it is replaced (seen through a hard link to the old file)', async () => {
      // Wine lets a rename replace a read-only file (NTFS refuses): the rule is checked on the old
      // file itself, which a hard link outside the folder keeps after the rename.
      const x = await installedThenNewer();
      const witness = path.join(tempDir('lc-win-witness-'), 'old-WoW.exe');
      fs.linkSync(path.join(x.game, 'WoW.exe'), witness);
      await wine.attrib('+r', path.join(x.game, 'WoW.exe'));
      expect(fs.statSync(witness).mode & 0o222).toBe(0);
      expect(expectOk(await game('update', x))).toMatchObject({ result: 'updated', to: x.next.code });
      expectFiles(x.game, x.next);
      expect(fs.readFileSync(witness).equals(x.old.files[0]!.content)).toBe(true);
      expect(fs.statSync(witness).mode & 0o200).not.toBe(0);
    }, 180_000);

    it("an old copy's wow.exe and data/COMMON.mpq, adopted, are renamed to the manifest's spelling", async () => {
      const x = await adoptOldCopy();
      // The files' names are the manifest's (the folder's spelling is left free: Windows keeps a
      // folder's when a file is renamed into it).
      const listed = fs.readdirSync(x.game, { recursive: true, encoding: 'utf8' });
      expect(listed.map((f) => f.replace(/^data(?=\/|$)/, 'Data')).sort()).toEqual([
        'Data',
        'Data/common.MPQ',
        'Data/patch.MPQ',
        'WoW.exe',
        'fmod.dll',
      ]);
    }, 120_000);
  });
});
