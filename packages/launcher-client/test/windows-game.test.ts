/**
 * The game client on Windows semantics, what works today: Windows Node 22 under Wine against the
 * real service (on Linux, in-process; test/wine.ts). windows-game-in-use.test.ts has the rules of
 * game-files.md's "On a player's real machine" that need more.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { gameUnderWine, WORK } from './windows-game-fixtures.js';
import { win, windowsTestsRun } from './wine.js';
import { expectOk } from './wine-suite.js';

describe.runIf(windowsTestsRun())('the game client under Wine (Windows Node 22): what works today', () => {
  const { suite, publish, game, folder, expectFiles, installedThenNewer, adoptOldCopy } = gameUnderWine();

  it('the packed client: a fresh install into Program Files (x86)\\Acme Game, updated, verified, repaired', async () => {
    const cli = await suite.wine.packedClient();
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
    for (const file of x.old.files) await suite.wine.attrib('+r', path.join(x.game, file.path));
    expect(fs.statSync(path.join(x.game, 'WoW.exe')).mode & 0o222).toBe(0);
    expect(expectOk(await game('update', x))).toMatchObject({ result: 'updated', from: x.old.code, to: x.next.code });
    expectFiles(x.game, x.next);

    const damaged = path.join(x.game, 'Data/patch.MPQ');
    fs.appendFileSync(damaged, 'damage');
    await suite.wine.attrib('+r', damaged);
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
