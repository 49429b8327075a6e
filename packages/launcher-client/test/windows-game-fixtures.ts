/**
 * The game client's Windows tests' fixtures: builds published on the service of the file, game
 * folders, and `launcher-client game` run under Wine against them.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import { type GameFile, manifestOf, publishBuild, sha256Of } from '../../../test/helpers/game.js';
import { win } from './wine.js';
import { expectOk, windowsSuite } from './wine-suite.js';

const KiB = 1024;
export const WORK = '.patchwell-work';

export interface Build {
  code: number;
  version: string;
  files: GameFile[];
}

/** A game folder and its launcher's state folder. */
export interface Folder {
  game: string;
  state: string;
}

/** The file's service and Wine (`windowsSuite`), and what its game tests do with them. */
export function gameUnderWine() {
  const suite = windowsSuite();
  const { tempDir } = suite;
  let nextCode = 10;

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
    const res = await publishBuild(
      suite.s.t,
      { version, buildCode: code },
      manifestOf({ version, buildCode: code }, files),
    );
    expect(res.statusCode, res.body).toBe(201);
    return { code, version, files };
  }

  const online = (x: Folder) => [
    '--server',
    suite.s.proxy.url,
    '--trust',
    win(suite.keys),
    '--state',
    win(x.state),
    '--game-dir',
    win(x.game),
    '--app',
    'app',
  ];
  const game = (command: string, x: Folder, more: string[] = [], cli?: string) =>
    suite.wine.client(
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

  /** Every file of `build` in `dir`, exact. */
  function expectFiles(dir: string, build: Build) {
    for (const file of build.files) {
      expect(sha256Of(fs.readFileSync(path.join(dir, file.path))), file.path).toBe(sha256Of(file.content));
    }
  }

  const chunkRequests = () => suite.s.proxy.requests('/api/game/chunks/').length;

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

  return { suite, tempDir, publish, game, folder, expectFiles, chunkRequests, installedThenNewer, adoptOldCopy };
}
