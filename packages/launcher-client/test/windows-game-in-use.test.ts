/**
 * The game client on Windows semantics: game-files.md's "On a player's real machine" as issue 53's
 * "Must hold" puts it (files in use, read-only files, case), under Wine with Windows Node 22 against
 * the real service (on Linux, in-process), with stand-ins for a running game and an antivirus
 * (test/wine.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { manifestOf, sha256Of } from '../../../test/helpers/game.js';
import { type Folder, gameUnderWine, WORK } from './windows-game-fixtures.js';
import { type Run, windowsTestsRun } from './wine.js';
import { expectOk } from './wine-suite.js';

describe.runIf(windowsTestsRun())('the game client under Wine (Windows Node 22): files in use, read-only, case', () => {
  const { suite, tempDir, game, expectFiles, chunkRequests, installedThenNewer, adoptOldCopy } = gameUnderWine();

  /** An update while `held(x)` is held: in-use, nothing renamed; after release the rerun only renames. */
  async function updateWhileHeld(held: (x: Folder) => string[], named: RegExp) {
    const x = await installedThenNewer();
    const running = await suite.wine.hold(held(x));
    try {
      const started = Date.now();
      const refused = await game('update', x);
      const ended = Date.now();
      expect(refused.code, refused.stderr).toBe(1);
      expect(refused.failure, refused.stderr).toMatchObject({ kind: 'in-use' });
      expect(JSON.stringify(refused.failure)).toMatch(named);
      // Within 15 s, counted from its first request (Windows Node's start under Wine is not the client's).
      const first = suite.s.proxy.seen.find((seen) => seen.at >= started)!;
      expect(ended - first.at).toBeLessThan(15_000);
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
        (x) => [x.game, path.join(x.game, 'WoW.exe'), path.join(x.game, 'Data'), path.join(x.game, 'Data/common.MPQ')],
        /WoW\.exe|common\.MPQ|Data/,
      ),
    240_000,
  );

  it('a swap cut off with WoW.exe still held: verify and status answer, naming it; update is in-use; after release the update finishes it and says "updated" from the old build', async () => {
    const x = await installedThenNewer();
    const running = await suite.wine.hold([path.join(x.game, 'WoW.exe')]);
    try {
      // Everything downloaded and assembled, nothing renamed (WoW.exe held): the work files kept.
      expect((await game('update', x)).failure).toMatchObject({ kind: 'in-use', paths: ['WoW.exe'] });
      // Then as a run killed after its first renames leaves it (on a machine where the game was
      // started meanwhile): every file but WoW.exe renamed in, the journal saying "renaming".
      const work = path.join(x.game, WORK);
      const { text } = manifestOf({ version: x.next.version, buildCode: x.next.code }, x.next.files);
      fs.writeFileSync(path.join(work, 'manifest.json'), text);
      const renames = x.next.files.map((f) => ({
        // The work file's name (the game manager's `workName`).
        work: sha256Of(`${f.path.toLowerCase()}\n${sha256Of(f.content)}`).slice(0, 32),
        path: f.path,
        kind: 'changed',
      }));
      for (const r of renames.slice(1)) fs.renameSync(path.join(work, 'files', r.work), path.join(x.game, r.path));
      const record = { from: x.old.code, to: x.next.code, phase: 'renaming', renames, deletes: [], left: [] };
      fs.writeFileSync(path.join(x.state, 'game/operation.json'), JSON.stringify(record));

      const verified = await game('verify', x);
      expect(verified.code, verified.stderr).toBe(3);
      expect(verified.last).toMatchObject({
        ok: false,
        buildCode: x.old.code,
        underWay: { from: x.old.code, to: x.next.code, inUse: ['WoW.exe'] },
      });
      expect(expectOk(await game('status', x))).toMatchObject({
        installed: { buildCode: x.old.code },
        underWay: { from: x.old.code, to: x.next.code },
        inUse: ['WoW.exe'],
      });
      const refused = await game('update', x);
      expect(refused.code, refused.stderr).toBe(1);
      expect(refused.failure).toMatchObject({ kind: 'in-use', paths: ['WoW.exe'] });
    } finally {
      await running.release();
    }
    const before = chunkRequests();
    expect(expectOk(await game('update', x))).toMatchObject({ result: 'updated', from: x.old.code, to: x.next.code });
    expect(chunkRequests()).toBe(before);
    expectFiles(x.game, x.next);
    expect(expectOk(await game('status', x))).toMatchObject({ underWay: null, inUse: [] });
  }, 240_000);

  it('game status names the managed files held right now in "inUse"', async () => {
    const x = await installedThenNewer();
    expect(expectOk(await game('status', x))).toMatchObject({ inUse: [] });
    const running = await suite.wine.hold([path.join(x.game, 'WoW.exe'), path.join(x.game, 'Data/common.MPQ')]);
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
      const scanner = await suite.wine.scan(x.game, 1500, share);
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
    await suite.wine.attrib('+r', path.join(x.game, 'WoW.exe'));
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
