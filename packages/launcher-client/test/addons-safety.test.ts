/**
 * The player's safety net (issue 45) against the real service: settings snapshots, addon versions
 * and pins, changelogs, hand-installed addons adopted.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chooseAdoptions } from '../src/addons/scan.js';
import { AddonManager, IntegrityError, UpdateManager } from '../src/index.js';
import { addonZip, gameFolder, publishAddon, tree, zip } from './addons-fixtures.js';
import { type Service, startService } from './helpers.js';
import { admin } from '../../../test/helpers/app.js';

const ROOT = path.resolve(import.meta.dirname, '../../..');
const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');

let s: Service;
let keysFile: string;
beforeAll(async () => {
  s = await startService();
  keysFile = path.join(s.stateDir(), 'keys.json');
  fs.writeFileSync(keysFile, JSON.stringify(await s.keys()));
});
afterEach(() => {
  s.proxy.rule = null;
});
afterAll(() => s.close());

interface Setup {
  state: string;
  game: string;
  addons: string;
  wtf: string;
  manager: AddonManager;
}

async function setup(): Promise<Setup> {
  const state = s.stateDir();
  const game = gameFolder(s.stateDir());
  const updates = new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: await s.keys(),
    stateDir: state,
    retry: { baseDelayMs: 10, retries: 1 },
  });
  return {
    state,
    game,
    addons: path.join(game, 'Interface', 'AddOns'),
    wtf: path.join(game, 'WTF'),
    manager: new AddonManager({ updates, gameDir: game }),
  };
}

interface Run {
  code: number | null;
  stderr: string;
  last: unknown;
  kind: unknown;
}

function cli(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { cwd: ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => {
      const json = (text: string): unknown => {
        try {
          return JSON.parse(text.trim().split('\n').at(-1) ?? '');
        } catch {
          return null;
        }
      };
      resolve({ code, stderr, last: json(stdout), kind: (json(stderr) as { kind?: unknown } | null)?.kind });
    });
  });
}

const online = (x: Setup) => ['--server', s.proxy.url, '--trust', keysFile, '--state', x.state, '--game-dir', x.game];
const offline = (x: Setup) => ['--state', x.state, '--game-dir', x.game];
type Listed = { backups: { id: string; reason: string; label: string | null; files: number; bytes: number }[] };
const backups = async (x: Setup) => ((await cli(['backup', 'list', '--state', x.state])).last as Listed).backups;
const zipOf = (x: Setup, id: string) => path.join(x.state, 'backups', `${id}.zip`);

describe('settings snapshots', () => {
  it('create, list, restore, remove: WTF put back exactly, the current one kept first', async () => {
    const x = await setup();
    fs.writeFileSync(path.join(x.wtf, 'Config.wtf'), 'SET a "1"\n');
    const before = tree(x.wtf);
    const created = await cli(['backup', 'create', ...offline(x), '--label', 'before raid']);
    expect(created.code, created.stderr).toBe(0);
    const backup = (created.last as { backup: { id: string } }).backup;
    expect(backup).toEqual({
      id: expect.any(String),
      createdAt: expect.any(String),
      reason: 'manual',
      label: 'before raid',
      files: 2,
      bytes: 'settings = true\n'.length + 'SET a "1"\n'.length,
      withAddons: false,
    });
    fs.writeFileSync(path.join(x.wtf, 'Config.wtf'), 'SET a "2"\n');
    fs.mkdirSync(path.join(x.wtf, 'New'));
    const changed = tree(x.wtf);
    const restored = await cli(['backup', 'restore', backup.id, ...offline(x)]);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.last).toEqual({ restored: backup.id });
    expect(tree(x.wtf)).toEqual(before);
    expect(fs.readdirSync(x.game).sort()).toEqual(['Interface', 'WTF']);
    expect(fs.existsSync(path.join(x.state, 'backups-restore.json'))).toBe(false);
    // The WTF replaced was kept as an automatic snapshot: restoring it brings the change back.
    const list = await backups(x);
    expect(list.map((b) => b.reason)).toEqual(['restore', 'manual']);
    expect((await cli(['backup', 'restore', list[0]!.id, ...offline(x)])).code).toBe(0);
    expect(tree(x.wtf)).toEqual(changed);

    const removed = await cli(['backup', 'remove', backup.id, '--state', x.state]);
    expect(removed.last).toEqual({ removed: backup.id });
    expect(fs.existsSync(zipOf(x, backup.id))).toBe(false);
    expect((await backups(x)).some((b) => b.id === backup.id)).toBe(false);
  });

  it('addon changes snapshot WTF only when it changed; --keep prunes automatic ones, never manual', async () => {
    await publishAddon(s.t, 'snap-a', '1.0', addonZip(['SnapA'], '1.0'));
    await publishAddon(s.t, 'snap-b', '1.0', addonZip(['SnapB'], '1.0'));
    const x = await setup();
    expect((await cli(['backup', 'create', ...offline(x)])).code).toBe(0);
    expect((await cli(['addons', 'install', 'snap-a', ...online(x)])).code).toBe(0);
    // Unchanged since the manual snapshot: none taken.
    expect((await backups(x)).map((b) => b.reason)).toEqual(['manual']);
    for (const [i, slug] of ['snap-b', 'snap-a'].entries()) {
      fs.writeFileSync(path.join(x.wtf, `edit${i}.lua`), `x = ${i}\n`);
      const args = i === 0 ? ['install', slug, ...online(x)] : ['remove', slug, ...offline(x), '--keep', '1'];
      const run = await cli(['addons', ...args]);
      expect(run.code, run.stderr).toBe(0);
    }
    const list = await backups(x);
    expect(list.map((b) => b.reason)).toEqual(['addons-remove', 'manual']);
    expect(list[0]!.files).toBe(3);
    expect(fs.readdirSync(path.join(x.state, 'backups')).filter((f) => f.endsWith('.zip'))).toHaveLength(2);
    const bad = await cli(['addons', 'remove', 'snap-b', ...offline(x), '--keep', '0']);
    expect([bad.code, bad.kind]).toEqual([1, 'usage']);
  });

  it('--with-addons restores Interface/AddOns and the manifests together', async () => {
    await publishAddon(s.t, 'whole', '1.0', addonZip(['Whole'], '1.0'));
    const x = await setup();
    await x.manager.install(['whole']);
    const addonsBefore = tree(x.addons);
    const manifests = tree(path.join(x.state, 'addons'));
    const created = await cli(['backup', 'create', ...offline(x), '--with-addons']);
    expect(created.code, created.stderr).toBe(0);
    const id = (created.last as { backup: { id: string; withAddons: boolean } }).backup.id;
    await x.manager.remove(['whole']);
    fs.writeFileSync(path.join(x.wtf, 'later.lua'), 'later\n');
    expect((await cli(['backup', 'restore', id, ...offline(x)])).code).toBe(0);
    expect(tree(x.addons)).toEqual(addonsBefore);
    expect(tree(path.join(x.state, 'addons'))).toEqual(manifests);
    expect((await x.manager.list()).map((a) => a.slug)).toEqual(['whole']);
    expect(fs.existsSync(path.join(x.wtf, 'later.lua'))).toBe(false);
  });

  it('a snapshot zip edited by hand is refused: exit 2, kind archive, WTF unchanged', async () => {
    const x = await setup();
    const id = ((await cli(['backup', 'create', ...offline(x)])).last as { backup: { id: string } }).backup.id;
    fs.writeFileSync(path.join(x.wtf, 'now.lua'), 'now\n');
    const now = tree(x.wtf);
    const original = fs.readFileSync(zipOf(x, id));
    const edits = [
      zip([
        { name: 'WTF/Account/SavedVariables.lua', data: 'settings = true\n' },
        { name: 'Other/evil.lua', data: 'x' },
      ]),
      zip([{ name: 'WTF/Account/SavedVariables.lua', data: 'settings = false\n' }]),
      zip([{ name: 'WTF/Account/Other.lua', data: 'x' }]),
      zip([{ name: '../WTF/x.lua', data: 'x' }]),
    ];
    for (const edited of edits) {
      fs.writeFileSync(zipOf(x, id), edited);
      const run = await cli(['backup', 'restore', id, ...offline(x)]);
      expect([run.code, run.kind], run.stderr).toEqual([2, 'archive']);
      expect(tree(x.wtf)).toEqual(now);
      expect(fs.readdirSync(x.game).sort()).toEqual(['Interface', 'WTF']);
    }
    fs.writeFileSync(zipOf(x, id), original);
    expect((await cli(['backup', 'restore', id, ...offline(x)])).code).toBe(0);
    expect(fs.existsSync(path.join(x.wtf, 'now.lua'))).toBe(false);
  });

  it('unknown and malformed ids: exit 1, nothing changed', async () => {
    const x = await setup();
    const before = tree(x.game);
    const unknown = await cli(['backup', 'restore', '20260101T000000000Z-00000000', ...offline(x)]);
    expect([unknown.code, unknown.kind]).toEqual([1, 'not-found']);
    const bad = await cli(['backup', 'restore', '../../etc', ...offline(x)]);
    expect([bad.code, bad.kind]).toEqual([1, 'usage']);
    const removed = await cli(['backup', 'remove', '20260101T000000000Z-00000000', '--state', x.state]);
    expect([removed.code, removed.kind]).toEqual([1, 'not-found']);
    expect(tree(x.game)).toEqual(before);
  });

  it('a restore killed mid-swap is rolled back by the next command', async () => {
    const x = await setup();
    const id = ((await cli(['backup', 'create', ...offline(x)])).last as { backup: { id: string } }).backup.id;
    fs.writeFileSync(path.join(x.wtf, 'current.lua'), 'current\n');
    const current = tree(x.wtf);
    // What a restore killed after moving WTF aside, before moving the snapshot in, leaves.
    const work = path.join(x.game, '.patchwell-restore-deadbeef');
    fs.mkdirSync(path.join(work, 'old'), { recursive: true });
    fs.mkdirSync(path.join(work, 'WTF'));
    fs.writeFileSync(path.join(work, 'WTF', 'staged.lua'), 'staged\n');
    fs.renameSync(x.wtf, path.join(work, 'old', 'WTF'));
    const journal = {
      id,
      game: x.game,
      work,
      phase: 'swapping',
      parts: [{ live: x.wtf, staged: path.join(work, 'WTF'), aside: path.join(work, 'old', 'WTF') }],
    };
    fs.writeFileSync(path.join(x.state, 'backups-restore.json'), JSON.stringify(journal));
    expect((await cli(['backup', 'create', ...offline(x)])).code).toBe(0);
    expect(tree(x.wtf)).toEqual(current);
    expect(fs.readdirSync(x.game).sort()).toEqual(['Interface', 'WTF']);
    expect(fs.existsSync(path.join(x.state, 'backups-restore.json'))).toBe(false);
    // A journal naming folders outside the game is refused, nothing moved.
    fs.writeFileSync(
      path.join(x.state, 'backups-restore.json'),
      JSON.stringify({ ...journal, parts: [{ ...journal.parts[0], live: path.join(x.game, 'Interface') }] }),
    );
    const refused = await cli(['backup', 'create', ...offline(x)]);
    expect([refused.code, refused.kind]).toEqual([1, 'state']);
    expect(tree(x.wtf)).toEqual(current);
  });
});

describe('versions and pins', () => {
  it('install SLUG@VERSION pins; update leaves it and lists it; unpin lets it follow the newest', async () => {
    await publishAddon(s.t, 'pinme', '1.0', addonZip(['PinMe'], '1.0'));
    await publishAddon(s.t, 'pinme', '2.0', addonZip(['PinMe'], '2.0'));
    await publishAddon(s.t, 'free', '1.0', addonZip(['Free'], '1.0'));
    const x = await setup();
    const installed = await cli(['addons', 'install', 'pinme@1.0', 'free', ...online(x)]);
    expect(installed.code, installed.stderr).toBe(0);
    expect(fs.readFileSync(path.join(x.addons, 'PinMe', 'core.lua'), 'utf8')).toBe('-- PinMe 1.0\n');
    const listed = (await cli(['addons', 'list', ...offline(x)])).last as {
      addons: { slug: string; pinned?: true }[];
    };
    expect(listed.addons.map((a) => [a.slug, a.pinned])).toEqual([
      ['free', undefined],
      ['pinme', true],
    ]);
    const update = await cli(['addons', 'update', ...online(x)]);
    expect(update.last).toEqual({ updated: [], upToDate: ['free'], pinned: ['pinme'], failed: [] });
    expect(fs.readFileSync(path.join(x.addons, 'PinMe', 'core.lua'), 'utf8')).toBe('-- PinMe 1.0\n');

    expect((await cli(['addons', 'unpin', 'pinme', ...offline(x)])).last).toEqual({ unpinned: 'pinme' });
    const after = await cli(['addons', 'update', ...online(x)]);
    expect(after.last).toEqual({
      updated: [{ slug: 'pinme', from: '1.0', to: '2.0' }],
      upToDate: ['free'],
      failed: [],
    });
    const pinned = await cli(['addons', 'pin', 'pinme', ...offline(x)]);
    expect(pinned.last).toEqual({ pinned: { slug: 'pinme', version: '2.0', folders: ['PinMe'] } });
    expect((await x.manager.list()).find((a) => a.slug === 'pinme')?.pinned).toBe(true);
  });

  it('a version the catalogue lacks, pin of an addon not installed: exit 1, nothing changed', async () => {
    await publishAddon(s.t, 'only-one', '1.0', addonZip(['OnlyOne'], '1.0'));
    const x = await setup();
    const before = tree(x.game);
    const missing = await cli(['addons', 'install', 'only-one@9.9', ...online(x)]);
    expect([missing.code, missing.kind]).toEqual([1, 'not-found']);
    const pin = await cli(['addons', 'pin', 'only-one', ...offline(x)]);
    expect([pin.code, pin.kind]).toEqual([1, 'not-found']);
    const empty = await cli(['addons', 'install', 'only-one@', ...online(x)]);
    expect([empty.code, empty.kind]).toEqual([1, 'usage']);
    expect(tree(x.game)).toEqual(before);
    expect(fs.readdirSync(x.state).filter((f) => f.startsWith('addon'))).toEqual([]);
  });
});

describe('changelogs', () => {
  it('outdated: every release above the installed one, newest first, in the language asked', async () => {
    for (const v of ['1.0', '1.1', '1.2']) {
      await publishAddon(s.t, 'logged', v, addonZip(['Logged'], v), [], {
        changelogEn: `fixed ${v}`,
        changelogZh: `修复 ${v}`,
      });
    }
    await publishAddon(s.t, 'current', '1.0', addonZip(['Current'], '1.0'));
    const x = await setup();
    await x.manager.install(['logged@1.0', 'current']);
    const from = s.proxy.seen.length;
    const run = await cli(['addons', 'outdated', ...online(x), '--lang', 'en']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.last).toEqual({
      outdated: [
        {
          slug: 'logged',
          from: '1.0',
          to: '1.2',
          changelogs: [
            { version: '1.2', changelog: 'fixed 1.2', createdAt: expect.any(String) },
            { version: '1.1', changelog: 'fixed 1.1', createdAt: expect.any(String) },
          ],
        },
      ],
    });
    // One request for all: the updates answer carries the changelogs (no detail read per addon).
    expect(s.proxy.seen.slice(from).map((r) => `${r.method} ${r.url}`)).toEqual(['POST /api/addons/updates?lang=en']);
    const zh = await cli(['addons', 'outdated', 'logged', ...online(x), '--lang', 'zh']);
    expect(
      (zh.last as { outdated: { changelogs: { changelog: string }[] }[] }).outdated[0]!.changelogs[0]!.changelog,
    ).toBe('修复 1.2');
    const notInstalled = await cli(['addons', 'outdated', 'nope', ...online(x)]);
    expect([notInstalled.code, notInstalled.kind]).toEqual([1, 'not-found']);
  });

  it("outdated: an addon whose changelogs the answer's bounds cut (over 50 releases) reads its detail, only it", async () => {
    await publishAddon(s.t, 'chatty', '1.0', addonZip(['Chatty'], '1.0'));
    await publishAddon(s.t, 'quiet', '1.0', addonZip(['Quiet'], '1.0'));
    const x = await setup();
    await x.manager.install(['chatty', 'quiet']);
    const chatty = (await admin(s.t, 'GET', '/api/admin/addons/chatty')).json<{ id: string }>().id;
    const versions = Array.from({ length: 51 }, (_, i) => `2.${i}`);
    for (const version of versions) {
      await new Promise((resolve) => setTimeout(resolve, 2)); // one creation time each: 2.50 is the newest
      const res = await admin(s.t, 'POST', '/api/releases', {
        addonId: chatty,
        version,
        downloadType: 'url',
        externalUrl: `https://cdn.example.test/chatty-${version}.zip`,
        changelogZh: `第 ${version} 版`,
      });
      expect(res.statusCode, res.body).toBe(201);
    }
    await publishAddon(s.t, 'quiet', '1.1', addonZip(['Quiet'], '1.1'), [], { changelogZh: '小改' });
    const from = s.proxy.seen.length;
    const outdated = await x.manager.outdated();
    expect(outdated.map((o) => [o.slug, o.from, o.to, o.changelogs.length])).toEqual([
      ['chatty', '1.0', '2.50', 51],
      ['quiet', '1.0', '1.1', 1],
    ]);
    expect(outdated[0]!.changelogs.map((c) => c.version)).toEqual([...versions].reverse());
    expect(outdated[0]!.changelogs[0]!.changelog).toBe('第 2.50 版');
    expect(outdated[1]!.changelogs).toEqual([{ version: '1.1', changelog: '小改', createdAt: expect.any(String) }]);
    expect(s.proxy.seen.slice(from).map((r) => `${r.method} ${r.url.split('?')[0]}`)).toEqual([
      'POST /api/addons/updates',
      'GET /api/addons/chatty',
    ]);
  });
});

describe('hand-installed addons adopted', () => {
  it('scan adopts folders matching a release, writes manifests, downloads and changes nothing', async () => {
    await publishAddon(s.t, 'byhand', '1.0', addonZip(['ByHand', 'ByHand_Config'], '1.0'));
    await publishAddon(s.t, 'byhand', '1.1', addonZip(['ByHand', 'ByHand_Config'], '1.1'));
    const x = await setup();
    for (const folder of ['ByHand', 'ByHand_Config']) {
      fs.mkdirSync(path.join(x.addons, folder));
      fs.writeFileSync(path.join(x.addons, folder, `${folder}.toc`), `## Title: ${folder}\n## Version: 1.0\n`);
      fs.writeFileSync(path.join(x.addons, folder, 'core.lua'), `-- ${folder} 1.0\n`);
    }
    const before = tree(x.game);
    const from = s.proxy.seen.length;
    const run = await cli(['addons', 'scan', ...online(x)]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.last).toEqual({
      adopted: [{ slug: 'byhand', version: '1.0', folders: ['ByHand', 'ByHand_Config'] }],
      unknown: ['MyOwnAddon'],
    });
    expect(tree(x.game)).toEqual(before);
    const seen = s.proxy.seen.slice(from).map((r) => r.url);
    expect(seen.filter((u) => u.startsWith('/api/download/'))).toEqual([]);
    expect(seen.filter((u) => u.startsWith('/api/addons/fingerprints'))).toHaveLength(1);
    // Adopted: managed from now on (listed, updated as any other).
    expect((await x.manager.list()).map((a) => [a.slug, a.version, a.folders])).toEqual([
      ['byhand', '1.0', ['ByHand', 'ByHand_Config']],
    ]);
    expect((await x.manager.update()).updated).toEqual([{ slug: 'byhand', from: '1.0', to: '1.1' }]);
    // A second scan asks only about the folders still unknown.
    expect((await cli(['addons', 'scan', ...online(x)])).last).toEqual({ adopted: [], unknown: ['MyOwnAddon'] });
  });

  it('an answer naming a folder the client did not ask about is refused; a release is adopted only whole', () => {
    const found = [{ folder: 'Mine', fingerprint: 'a'.repeat(64), files: ['x.lua'] }];
    const match = (fingerprint: string, folder: string, folders = ['Mine']) => ({
      fingerprint,
      folder,
      addon: { id: 'a1', slug: 'someone' },
      release: { id: 'r1', version: '1.0', folders },
    });
    expect(() => chooseAdoptions(found, [match('b'.repeat(64), 'Other')])).toThrow(IntegrityError);
    expect(chooseAdoptions(found, [match('a'.repeat(64), 'Renamed')])).toEqual({ adoptions: [], unknown: ['Mine'] });
    // The release has a second folder that is not on disk: not adopted.
    expect(chooseAdoptions(found, [match('a'.repeat(64), 'Mine', ['Mine', 'Mine_Options'])])).toEqual({
      adoptions: [],
      unknown: ['Mine'],
    });
    expect(chooseAdoptions(found, [match('a'.repeat(64), 'Mine')]).adoptions).toEqual([
      { slug: 'someone', releaseId: 'r1', version: '1.0', folders: ['Mine'] },
    ]);
  });
});
