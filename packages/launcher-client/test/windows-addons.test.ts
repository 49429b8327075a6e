/**
 * The addon manager and settings snapshots on Windows semantics: Windows Node 22 under Wine against
 * the real service (on Linux, in-process), with a stand-in for a running game that holds files
 * (test/wine.ts). The rules are game-files.md's "On a player's real machine" and issue 53's.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { addonZip, gameFolder, publishAddon, tree } from './addons-fixtures.js';
import { win, windowsTestsRun } from './wine.js';
import { expectOk, windowsSuite } from './wine-suite.js';

/** A game folder (the player's WTF and an addon of their own) and its launcher's state folder. */
interface Folder {
  game: string;
  state: string;
  addons: string;
  wtf: string;
}

describe.runIf(windowsTestsRun())('addons and settings snapshots under Wine (Windows Node 22)', () => {
  const suite = windowsSuite();
  const { tempDir } = suite;

  function folder(): Folder {
    const game = gameFolder(path.join(tempDir('lc-win-game-'), 'Program Files (x86)', 'Acme Game'));
    return {
      game,
      state: tempDir('lc-win-state-'),
      addons: path.join(game, 'Interface/AddOns'),
      wtf: path.join(game, 'WTF'),
    };
  }

  const offline = (x: Folder) => ['--state', win(x.state), '--game-dir', win(x.game)];
  const online = (x: Folder) => ['--server', suite.s.proxy.url, '--trust', win(suite.keys), ...offline(x)];
  /** `launcher-client addons COMMAND ...`; the commands that ask the catalogue get the server. */
  const addons = (command: string, x: Folder, more: string[] = [], cli?: string) =>
    suite.wine.client(
      ['addons', command, ...more, ...(['install', 'update'].includes(command) ? online(x) : offline(x))],
      {
        cli,
      },
    );
  const backup = (command: string, x: Folder, more: string[] = [], cli?: string) =>
    suite.wine.client(['backup', command, ...more, ...(command === 'list' ? ['--state', win(x.state)] : offline(x))], {
      cli,
    });

  /** The `.patchwell-restore-*` folders left in the game folder. */
  const restoreLeftovers = (x: Folder) => fs.readdirSync(x.game).filter((f) => f.startsWith('.patchwell-restore-'));

  describe('what works today', () => {
    it('the packed client: addons install, update, list, remove; every other folder untouched', async () => {
      const cli = await suite.wine.packedClient();
      await publishAddon(suite.s.t, 'win-basic', '1.0', addonZip(['WinBasic', 'WinBasic_Options'], '1.0'));
      const x = folder();
      const own = tree(path.join(x.addons, 'MyOwnAddon'));
      const wtf = tree(x.wtf);
      expect(expectOk(await addons('install', x, ['win-basic'], cli))).toEqual({
        installed: [{ slug: 'win-basic', version: '1.0', folders: ['WinBasic', 'WinBasic_Options'] }],
      });
      expect(tree(path.join(x.addons, 'WinBasic'))).toEqual({
        'WinBasic.toc': '## Title: WinBasic\n## Version: 1.0\n',
        'core.lua': '-- WinBasic 1.0\n',
      });

      await publishAddon(suite.s.t, 'win-basic', '1.1', addonZip(['WinBasic', 'WinBasic_Options'], '1.1'));
      expect(expectOk(await addons('update', x, [], cli))).toMatchObject({
        updated: [{ slug: 'win-basic', from: '1.0', to: '1.1' }],
        failed: [],
      });
      expect(tree(path.join(x.addons, 'WinBasic_Options'))['core.lua']).toBe('-- WinBasic_Options 1.1\n');
      expect(expectOk(await addons('list', x, [], cli))).toMatchObject({
        addons: [{ slug: 'win-basic', version: '1.1', folders: ['WinBasic', 'WinBasic_Options'] }],
      });

      expect(expectOk(await addons('remove', x, ['win-basic'], cli))).toEqual({ removed: ['win-basic'] });
      expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
      expect(tree(path.join(x.addons, 'MyOwnAddon'))).toEqual(own);
      expect(tree(x.wtf)).toEqual(wtf);
    }, 300_000);

    it('the packed client: backup create and restore put WTF back exactly', async () => {
      const cli = await suite.wine.packedClient();
      const x = folder();
      fs.writeFileSync(path.join(x.wtf, 'Config.wtf'), 'SET realmlist "a"\n');
      const before = tree(x.wtf);
      const created = expectOk(await backup('create', x, ['--label', 'before raid'], cli));
      const id = (created.backup as { id: string }).id;
      fs.writeFileSync(path.join(x.wtf, 'Config.wtf'), 'SET realmlist "b"\n');
      fs.mkdirSync(path.join(x.wtf, 'New'));
      expect(expectOk(await backup('restore', x, [id], cli))).toEqual({ restored: id });
      expect(tree(x.wtf)).toEqual(before);
      expect(restoreLeftovers(x)).toEqual([]);
      const listed = expectOk(await backup('list', x, [], cli)).backups as { reason: string }[];
      expect(listed.map((b) => b.reason)).toEqual(['restore', 'manual']);
    }, 300_000);
  });

  /** Issue 53's "Must hold": the addon manager and snapshots check their targets before any swap. */
  describe('files in use (game-files.md, "On a player\'s real machine")', () => {
    it.each(['install', 'update'])(
      'a held addon file and its folder during addons %s: in-use naming it, the installed version intact, addons list answering',
      async (command) => {
        const slug = `win-held-${command}`;
        await publishAddon(suite.s.t, slug, '1.0', addonZip(['WinHeld'], '1.0'));
        const x = folder();
        expectOk(await addons('install', x, [slug]));
        await publishAddon(suite.s.t, slug, '1.1', addonZip(['WinHeld'], '1.1'));
        const held = path.join(x.addons, 'WinHeld');
        const before = tree(held);
        const running = await suite.wine.hold([held, path.join(held, 'core.lua')]);
        try {
          const refused = await addons(command, x, [slug]);
          expect(refused.code, refused.stderr).toBe(1);
          // install fails whole; update reports each addon it could not update.
          const failure =
            command === 'install' ? refused.failure : (refused.last?.failed as unknown[] | undefined)?.[0];
          expect(failure, refused.stderr || JSON.stringify(refused.last)).toMatchObject({ kind: 'in-use' });
          expect(JSON.stringify(failure)).toMatch(/WinHeld/);
          expect(tree(held)).toEqual(before);
          expect(expectOk(await addons('list', x))).toMatchObject({ addons: [{ slug, version: '1.0' }] });
        } finally {
          await running.release();
        }
        expect(tree(held)).toEqual(before);
        expectOk(await addons(command, x, [slug]));
        expect(tree(held)['core.lua']).toBe('-- WinHeld 1.1\n');
        expect(expectOk(await addons('list', x))).toMatchObject({ addons: [{ slug, version: '1.1' }] });
      },
      240_000,
    );

    it('a swap cut off with the folder moved aside still held: addons list answers naming it, a change is in-use; after release the next command undoes it', async () => {
      const slug = 'win-cut';
      await publishAddon(suite.s.t, slug, '1.0', addonZip(['WinCut'], '1.0'));
      const x = folder();
      expectOk(await addons('install', x, [slug]));
      const live = path.join(x.addons, 'WinCut');
      const before = tree(live);
      // As a process killed midway leaves it: the installed folder moved aside, nothing moved in.
      const work = path.join(x.game, 'Interface/.patchwell-work/cut');
      const aside = path.join(work, 'old/WinCut');
      fs.mkdirSync(path.join(work, 'new'), { recursive: true });
      fs.mkdirSync(path.dirname(aside));
      fs.renameSync(live, aside);
      const manifest = JSON.parse(fs.readFileSync(path.join(x.state, `addons/${slug}.json`), 'utf8')) as unknown;
      const record = {
        slug,
        work: win(work),
        phase: 'swapping',
        moveAside: ['WinCut'],
        moveIn: [],
        before: manifest,
        after: null,
      };
      fs.writeFileSync(path.join(x.state, 'addons-operation.json'), JSON.stringify(record));
      const running = await suite.wine.hold([aside, path.join(aside, 'core.lua')]);
      try {
        expect(expectOk(await addons('list', x))).toMatchObject({
          addons: [{ slug, version: '1.0' }],
          underWay: { slug, phase: 'swapping' },
        });
        const refused = await addons('remove', x, [slug]);
        expect(refused.code, refused.stderr).toBe(1);
        expect(refused.failure, refused.stderr).toMatchObject({ kind: 'in-use' });
        expect(JSON.stringify(refused.failure)).toMatch(/WinCut/);
      } finally {
        await running.release();
      }
      const listed = expectOk(await addons('list', x));
      expect(listed).toMatchObject({ addons: [{ slug, version: '1.0' }] });
      expect(listed.underWay).toBeUndefined();
      expect(tree(live)).toEqual(before);
      expect(fs.existsSync(path.join(x.game, 'Interface/.patchwell-work'))).toBe(false);
    }, 240_000);

    it('a work folder left behind that cannot be removed (a file in it held) is a warning, not a failure; the next command removes it', async () => {
      const x = folder();
      const left = path.join(x.game, 'Interface/.patchwell-work/left');
      fs.mkdirSync(left, { recursive: true });
      fs.writeFileSync(path.join(left, 'core.lua'), '-- left behind\n');
      const running = await suite.wine.hold([path.join(left, 'core.lua')]);
      try {
        const listed = await addons('list', x);
        expect(expectOk(listed)).toEqual({ addons: [] });
        const warnings = listed.stderr
          .split('\n')
          .filter((line) => line.startsWith('{'))
          .map((line) => JSON.parse(line) as Record<string, unknown>);
        expect(warnings).toContainEqual(
          expect.objectContaining({
            warning: expect.stringMatching(/removed next time/),
            kind: 'in-use',
            path: 'Interface/.patchwell-work/left',
          }),
        );
        expect(fs.existsSync(left)).toBe(true);
      } finally {
        await running.release();
      }
      const again = await addons('list', x);
      expect(expectOk(again)).toEqual({ addons: [] });
      expect(again.stderr).toBe('');
      expect(fs.existsSync(path.join(x.game, 'Interface/.patchwell-work'))).toBe(false);
    }, 240_000);

    it('backup restore while WTF/Config.wtf (and WTF) is held: in-use, WTF unchanged, no .patchwell-restore-* left', async () => {
      const x = folder();
      fs.writeFileSync(path.join(x.wtf, 'Config.wtf'), 'SET realmlist "a"\n');
      const snapshot = tree(x.wtf);
      const id = (expectOk(await backup('create', x)).backup as { id: string }).id;
      fs.writeFileSync(path.join(x.wtf, 'Config.wtf'), 'SET realmlist "b"\n');
      const current = tree(x.wtf);
      const running = await suite.wine.hold([x.wtf, path.join(x.wtf, 'Config.wtf')]);
      try {
        const refused = await backup('restore', x, [id]);
        expect(refused.code, refused.stderr).toBe(1);
        expect(refused.failure, refused.stderr).toMatchObject({ kind: 'in-use' });
        expect(JSON.stringify(refused.failure)).toMatch(/WTF/);
        expect(tree(x.wtf)).toEqual(current);
        expect(restoreLeftovers(x)).toEqual([]);
      } finally {
        await running.release();
      }
      expect(tree(x.wtf)).toEqual(current);
      expect(expectOk(await backup('restore', x, [id]))).toEqual({ restored: id });
      expect(tree(x.wtf)).toEqual(snapshot);
      expect(restoreLeftovers(x)).toEqual([]);
    }, 240_000);
  });
});
