import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair, parseSecretKey, signPrehash } from '../../publish/src/minisign.js';
import { prehash, releaseTrustedComment } from '../src/trust/minisign.js';
import {
  AbortedError,
  AddonManager,
  ArchiveError,
  ConflictError,
  IntegrityError,
  NotFoundError,
  PublisherSignatureError,
  type ArchiveLimits,
  UpdateManager,
} from '../src/index.js';
import { addonZip, downloadCount, gameFolder, publishAddon, type RawEntry, tree, zip } from './addons-fixtures.js';
import { admin, type Service, startService } from './helpers.js';

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
  manager: AddonManager;
}

async function setup(limits: Partial<ArchiveLimits> = {}, publisherKeys: string[] = []): Promise<Setup> {
  const state = s.stateDir();
  const game = gameFolder(s.stateDir());
  const updates = new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: await s.keys(),
    stateDir: state,
    retry: { baseDelayMs: 10, retries: 1 },
    publisherKeys,
  });
  return {
    state,
    game,
    addons: path.join(game, 'Interface', 'AddOns'),
    manager: new AddonManager({ updates, gameDir: game, limits }),
  };
}

function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string; last: unknown }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'addons', ...args], { cwd: ROOT });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => {
      let last: unknown = null;
      try {
        last = JSON.parse(stdout.trim().split('\n').at(-1) ?? '');
      } catch {
        // not JSON: the assertions say so
      }
      resolve({ code, stdout, stderr, last });
    });
  });
}

const online = (x: Setup) => ['--server', s.proxy.url, '--trust', keysFile, '--state', x.state, '--game-dir', x.game];
const offline = (x: Setup) => ['--state', x.state, '--game-dir', x.game];
const workRoot = (x: Setup) => path.join(x.game, 'Interface', '.patchwell-work');
const leftovers = (x: Setup) => (fs.existsSync(workRoot(x)) ? fs.readdirSync(workRoot(x)) : []);

describe('install, list, remove', () => {
  it('installs into Interface/AddOns, keeps a manifest, counts one download, touches nothing else', async () => {
    const id = await publishAddon(s.t, 'basic', '1.0', addonZip(['Basic', 'Basic_Options'], '1.0'));
    const x = await setup();
    const wtf = tree(path.join(x.game, 'WTF'));
    const result = await cli(['install', 'basic', ...online(x)]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.last).toEqual({
      installed: [{ slug: 'basic', version: '1.0', folders: ['Basic', 'Basic_Options'] }],
    });
    expect(fs.readFileSync(path.join(x.addons, 'Basic', 'core.lua'), 'utf8')).toBe('-- Basic 1.0\n');
    expect(fs.readdirSync(x.addons).sort()).toEqual(['Basic', 'Basic_Options', 'MyOwnAddon']);
    expect(tree(path.join(x.game, 'WTF'))).toEqual(wtf);
    expect(leftovers(x)).toEqual([]);
    await expect.poll(() => downloadCount(s.t, 'basic', id)).toBe(1);

    const listed = await cli(['list', ...offline(x)]);
    expect(listed.code).toBe(0);
    expect(listed.last).toEqual({
      addons: [
        {
          slug: 'basic',
          version: '1.0',
          folders: ['Basic', 'Basic_Options'],
          sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
        },
      ],
    });
    // Installing again: already there, nothing downloaded.
    const from = s.proxy.seen.length;
    expect((await cli(['install', 'basic', ...online(x)])).code).toBe(0);
    expect(s.proxy.seen.slice(from).filter((r) => r.url.startsWith('/api/download/'))).toEqual([]);

    const removed = await cli(['remove', 'basic', ...offline(x)]);
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.last).toEqual({ removed: ['basic'] });
    expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
    expect(tree(path.join(x.game, 'WTF'))).toEqual(wtf);
    expect((await cli(['list', ...offline(x)])).last).toEqual({ addons: [] });
  });

  it('an install replaces an unmanaged folder of the same name; two addons never share a folder', async () => {
    await publishAddon(s.t, 'owner-a', '1.0', addonZip(['Shared'], 'a'));
    await publishAddon(s.t, 'owner-b', '1.0', addonZip(['Shared', 'OnlyB'], 'b'));
    const x = await setup();
    fs.mkdirSync(path.join(x.addons, 'shared'));
    fs.writeFileSync(path.join(x.addons, 'shared', 'old.lua'), 'old');
    await x.manager.install(['owner-a']);
    expect(tree(path.join(x.addons, 'Shared'))).toEqual({
      'Shared.toc': expect.any(String),
      'core.lua': '-- Shared a\n',
    });
    expect(fs.existsSync(path.join(x.addons, 'shared', 'old.lua'))).toBe(false);
    const before = tree(x.addons);
    const err = await x.manager.install(['owner-b']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as Error).message).toMatch(/owner-b and owner-a both claim the folder Interface\/AddOns\/Shared/);
    expect(tree(x.addons)).toEqual(before);
    // Refused: its archive is not kept in the downloads.
    expect(fs.readdirSync(path.join(x.state, 'downloads'))).toEqual([]);
    const cliConflict = await cli(['install', 'owner-b', ...online(x)]);
    expect(cliConflict.code).toBe(1);
    expect(JSON.parse(cliConflict.stderr.trim())).toMatchObject({ kind: 'conflict' });
  });

  it('a manifest naming a folder outside Interface/AddOns is refused, nothing deleted', async () => {
    await publishAddon(s.t, 'edited', '1.0', addonZip(['Edited'], '1.0'));
    const x = await setup();
    await x.manager.install(['edited']);
    const file = path.join(x.state, 'addons', 'edited.json');
    const manifest = JSON.parse(fs.readFileSync(file, 'utf8')) as { folders: string[] };
    fs.writeFileSync(file, JSON.stringify({ ...manifest, folders: ['Edited', '../../WTF'] }));
    const before = tree(x.game);
    const result = await cli(['remove', 'edited', ...offline(x)]);
    expect(result.code).toBe(1);
    expect(JSON.parse(result.stderr.trim())).toMatchObject({ kind: 'state' });
    expect(tree(x.game)).toEqual(before);
  });

  it('a release without a SHA-256 is refused: exit 2, kind integrity', async () => {
    const created = await s.t.inject({
      method: 'POST',
      url: '/api/addons',
      headers: { cookie: s.t.cookie },
      payload: { slug: 'unhashed', name: 'unhashed', summary: 'x' },
    });
    await s.t.inject({
      method: 'POST',
      url: '/api/releases',
      headers: { cookie: s.t.cookie },
      payload: {
        addonId: created.json<{ id: string }>().id,
        version: '1.0',
        downloadType: 'url',
        externalUrl: 'https://cdn.example.test/u.zip',
      },
    });
    const x = await setup();
    await expect(x.manager.install(['unhashed'])).rejects.toBeInstanceOf(IntegrityError);
    const result = await cli(['install', 'unhashed', ...online(x)]);
    expect(result.code).toBe(2);
    expect(JSON.parse(result.stderr.trim())).toMatchObject({ kind: 'integrity' });
    expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
  });

  it('a file changed on the way is refused and nothing is installed', async () => {
    await publishAddon(s.t, 'tampered', '1.0', addonZip(['Tampered'], '1.0'));
    const x = await setup();
    s.proxy.rule = async (seen, upstream) => {
      if (!seen.url.startsWith('/api/download/')) return undefined;
      const answer = await upstream();
      const body = Buffer.from(answer.body);
      body.writeUInt8(body.readUInt8(body.length - 30) ^ 1, body.length - 30);
      return { ...answer, body };
    };
    await expect(x.manager.install(['tampered'])).rejects.toBeInstanceOf(IntegrityError);
    expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
    expect(fs.readdirSync(path.join(x.state, 'downloads')).filter((n) => !n.endsWith('.json'))).toEqual([]);
  });

  it('usage: unknown subcommand, missing options, bad slugs, not installed', async () => {
    const x = await setup();
    expect((await cli(['frobnicate', ...offline(x)])).code).toBe(1);
    expect(JSON.parse((await cli(['install', 'x', ...offline(x)])).stderr.trim())).toMatchObject({ kind: 'usage' });
    expect(JSON.parse((await cli(['remove', '../etc', ...offline(x)])).stderr.trim())).toMatchObject({ kind: 'usage' });
    const missing = await cli(['remove', 'nothing-here', ...offline(x)]);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr.trim())).toMatchObject({ kind: 'not-found' });
    const unknown = await cli(['install', 'no-such-addon', ...online(x)]);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stderr.trim())).toMatchObject({ kind: 'not-found' });
  });
});

describe('publisher keys pinned', () => {
  it('installs only releases the publisher signed for exactly this addon, version and file', async () => {
    const pair = await generateKeyPair('');
    const publisher = await parseSecretKey(pair.secretKeyFile, '');
    const pubFile = path.join(s.stateDir(), 'publisher.pub');
    fs.writeFileSync(pubFile, pair.publicKeyFile);
    const signed = async (slug: string, version: string, archive: Buffer, signedAs = { slug, version }) => {
      const sha256 = createHash('sha256').update(archive).digest('hex');
      const fileSignature = await signPrehash(
        publisher,
        await prehash([archive]),
        releaseTrustedComment({ ...signedAs, sha256 }),
      );
      return publishAddon(s.t, slug, version, archive, [], { fileSignature });
    };
    await signed('pub-good', '1.0', addonZip(['PubGood'], '1.0'));
    // Signed by the publisher, but for another addon: a catalogue that swaps files is caught.
    await signed('pub-swapped', '1.0', addonZip(['PubSwapped'], '1.0'), { slug: 'pub-good', version: '1.0' });
    await publishAddon(s.t, 'pub-unsigned', '1.0', addonZip(['PubUnsigned'], '1.0'));
    const x = await setup();
    const args = [...online(x), '--publisher-key', pubFile];
    const good = await cli(['install', 'pub-good', ...args]);
    expect(good.code, good.stderr).toBe(0);
    for (const slug of ['pub-swapped', 'pub-unsigned']) {
      const refused = await cli(['install', slug, ...args]);
      expect(refused.code).toBe(2);
      expect(JSON.parse(refused.stderr.trim())).toMatchObject({ kind: 'publisher-signature' });
    }
    expect(fs.readdirSync(x.addons).sort()).toEqual(['MyOwnAddon', 'PubGood']);
    const pinned = await setup({}, [pair.publicKeyFile]);
    await expect(pinned.manager.install(['pub-swapped'])).rejects.toBeInstanceOf(PublisherSignatureError);
    // Without the key pinned, the signature is not asked for.
    expect(await x.manager.install(['pub-unsigned'])).toEqual([
      { slug: 'pub-unsigned', version: '1.0', folders: ['PubUnsigned'] },
    ]);
  });
});

describe('dependencies', () => {
  it('installs required dependencies first (at least minVersion), not optional ones; remove refuses a needed one', async () => {
    await publishAddon(s.t, 'dep-lib', '0.9', addonZip(['DepLib'], '0.9'));
    await publishAddon(s.t, 'dep-lib', '1.2', addonZip(['DepLib'], '1.2'));
    await publishAddon(s.t, 'dep-optional', '1.0', addonZip(['DepOptional'], '1.0'));
    await publishAddon(s.t, 'dep-app', '2.0', addonZip(['DepApp'], '2.0'), [
      { slug: 'dep-lib', minVersion: '1.0' },
      { slug: 'dep-optional', optional: true },
    ]);
    const x = await setup();
    const result = await cli(['install', 'dep-app', ...online(x)]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.last).toEqual({
      installed: [
        { slug: 'dep-lib', version: '1.2', folders: ['DepLib'] },
        { slug: 'dep-app', version: '2.0', folders: ['DepApp'] },
      ],
    });
    expect(fs.existsSync(path.join(x.addons, 'DepOptional'))).toBe(false);

    const refused = await cli(['remove', 'dep-lib', ...offline(x)]);
    expect(refused.code).toBe(1);
    expect(JSON.parse(refused.stderr.trim())).toMatchObject({
      kind: 'conflict',
      error: expect.stringContaining('dep-app needs dep-lib'),
    });
    expect(fs.existsSync(path.join(x.addons, 'DepLib'))).toBe(true);
    const forced = await cli(['remove', 'dep-lib', '--force', ...offline(x)]);
    expect(forced.code).toBe(0);
    expect(fs.readdirSync(x.addons).sort()).toEqual(['DepApp', 'MyOwnAddon']);
  });

  it('a cycle, a missing dependency and one too old in the catalogue are errors naming it', async () => {
    // The service refuses a dependency on an addon it lacks: the cycle is made in two steps, and the
    // missing one is an addon deleted from the catalogue after it was named.
    await publishAddon(s.t, 'cyc-a', '1.0', addonZip(['CycA'], '1'));
    await publishAddon(s.t, 'cyc-b', '1.0', addonZip(['CycB'], '1'), [{ slug: 'cyc-a' }]);
    await publishAddon(s.t, 'cyc-a', '1.1', addonZip(['CycA'], '1.1'), [{ slug: 'cyc-b' }]);
    await publishAddon(s.t, 'ghost-lib', '1.0', addonZip(['GhostLib'], '1'));
    await publishAddon(s.t, 'needs-ghost', '1.0', addonZip(['NeedsGhost'], '1'), [{ slug: 'ghost-lib' }]);
    const ghostLib = (await admin(s.t, 'GET', '/api/admin/addons/ghost-lib')).json<{ id: string }>();
    expect((await admin(s.t, 'DELETE', `/api/addons/${ghostLib.id}`)).statusCode).toBeLessThan(300);
    await publishAddon(s.t, 'old-lib', '1.0', addonZip(['OldLib'], '1'));
    await publishAddon(s.t, 'needs-new-lib', '1.0', addonZip(['NeedsNewLib'], '1'), [
      { slug: 'old-lib', minVersion: '3.0' },
    ]);
    const x = await setup();
    await expect(x.manager.install(['cyc-a'])).rejects.toThrow(
      new ConflictError('dependency cycle: cyc-a → cyc-b → cyc-a'),
    );
    const ghost = await x.manager.install(['needs-ghost']).catch((e: unknown) => e);
    expect(ghost).toBeInstanceOf(NotFoundError);
    expect((ghost as Error).message).toBe('needs-ghost needs ghost-lib: the catalogue has no addon ghost-lib');
    await expect(x.manager.install(['needs-new-lib'])).rejects.toThrow(/needs-new-lib needs old-lib 3.0 or later/);
    const cycle = await cli(['install', 'cyc-b', ...online(x)]);
    expect(cycle.code).toBe(1);
    expect(JSON.parse(cycle.stderr.trim())).toMatchObject({
      kind: 'conflict',
      error: 'dependency cycle: cyc-b → cyc-a → cyc-b',
    });
    expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
  });
});

describe('safe extraction: a hostile archive is refused, Interface/AddOns exactly as it was', () => {
  const ok: RawEntry = { name: 'Fine/fine.lua', data: 'fine' };
  const ok2: RawEntry = { name: 'Fine/fine2.lua', data: 'fine' };
  const withGapBeforeEnd = (archive: Buffer) =>
    Buffer.concat([archive.subarray(0, -22), Buffer.alloc(46), archive.subarray(-22)]);
  const cases: [string, RawEntry[] | Buffer, Partial<ArchiveLimits>?][] = [
    ['a .. segment', [ok, { name: 'Fine/../../evil.lua', data: 'x' }]],
    ['an absolute path', [ok, { name: '/tmp/evil.lua', data: 'x' }]],
    ['a drive letter', [ok, { name: 'C:/evil.lua', data: 'x' }]],
    ['a backslash', [ok, { name: 'Fine\\..\\..\\evil.lua', data: 'x' }]],
    ['a colon (NTFS stream)', [ok, { name: 'Fine/a.lua:hidden', data: 'x' }]],
    ['a Windows device name', [ok, { name: 'Fine/CON.lua', data: 'x' }]],
    ['a symbolic link', [ok, { name: 'Fine/link', data: '../../../WTF', unixMode: 0o120777 }]],
    ['a FIFO', [ok, { name: 'Fine/pipe', unixMode: 0o010644 }]],
    ['an entry at the root', [ok, { name: 'evil.lua', data: 'x' }]],
    ['two entries differing only by case', [ok, { name: 'fine/FINE.lua', data: 'x' }]],
    [
      'two folders differing only by case',
      [ok, { name: 'Hostile/a.lua', data: 'x' }, { name: 'hostile/b.lua', data: 'x' }],
    ],
    [
      'two names one by Unicode case folding (ſ, s)',
      [ok, { name: 'Fine/ſ.lua', data: 'x' }, { name: 'Fine/s.lua', data: 'x' }],
    ],
    [
      'two names one by case folding (ß, SS)',
      [ok, { name: 'Fine/ß.lua', data: 'x' }, { name: 'Fine/SS.lua', data: 'x' }],
    ],
    [
      'two folders one after NFC (é, e + U+0301)',
      [ok, { name: 'Caf\u00e9/a.lua', data: 'x' }, { name: 'Cafe\u0301/b.lua', data: 'x' }],
    ],
    ['a file where a folder entry is', [ok, { name: 'Fine/sub/' }, { name: 'Fine/SUB', data: 'x' }]],
    ['a 300-character name', [ok, { name: `Fine/${'n'.repeat(296)}.lua`, data: 'x' }]],
    ['a 2,100-level path', [ok, { name: `${'Fine/'.repeat(2100)}deep.lua`, data: 'x' }]],
    [
      'overlapping entries (one inside the data of another)',
      [ok, { name: 'Fine/outer.lua', data: 'x', method: 0 }, { name: 'Fine/inner.lua', data: 'y', inside: true }],
    ],
    ['a local header naming another file', [ok, { name: 'Fine/a.lua', localName: 'Fine/../../evil.lua', data: 'x' }]],
    [
      'an entry running into the central directory',
      [ok, { name: 'Fine/long.lua', data: 'long', method: 0, declaredSize: 40, storedSize: 40 }],
    ],
    ['an end record hiding an entry', zip([ok, { name: 'Fine/hidden.lua', data: 'x' }], { endCount: 1 })],
    ['an end record whose two counts disagree', zip([ok, ok2], { endDiskCount: 1 })],
    ['an end record and a ZIP64 end record that disagree', zip([ok, ok2], { zip64End: true, endCount: 1 })],
    ['bytes between the central directory and the end record', withGapBeforeEnd(zip([ok, ok2]))],
    [
      'a local entry the central directory does not list',
      [ok, { name: 'Fine/unlisted.lua', data: 'x', unlisted: true }],
    ],
    ['a data descriptor that is not there', [ok, { name: 'Fine/a.lua', data: 'x', descriptor: 'missing' }, ok2]],
    ['a wrong CRC-32', [ok, { name: 'Fine/a.lua', data: 'x', crc: 0x12345678 }]],
    ['a wrong CRC-32 of a stored entry', [ok, { name: 'Fine/a.lua', data: 'abc', method: 0, crc: 0x12345678 }]],
    ['a file where a folder is needed', [ok, { name: 'Fine/fine.lua/x.lua', data: 'x' }]],
    [
      'more entries than the bound',
      [ok, ...[1, 2, 3, 4, 5].map((n) => ({ name: `Fine/${n}.lua`, data: 'x' }))],
      { maxEntries: 5 },
    ],
    ['more bytes than the bound', [ok, { name: 'Fine/big.lua', data: Buffer.alloc(4096) }], { maxTotalBytes: 4096 }],
    ['a declared size over the 2 GiB default', [ok, { name: 'Fine/huge.lua', data: 'x', declaredSize: 2 ** 31 + 1 }]],
    [
      'an entry inflating past its declared size',
      [ok, { name: 'Fine/bomb.lua', data: Buffer.alloc(1 << 20), declaredSize: 100 }],
    ],
    ['a stored entry whose sizes disagree', [ok, { name: 'Fine/odd.lua', data: 'abcdef', method: 0, declaredSize: 3 }]],
  ];
  it.each(cases.map(([why, entries, limits], i) => ({ why, entries, limits: limits ?? {}, slug: `hostile-${i}` })))(
    '$why',
    async ({ entries, limits, slug }) => {
      await publishAddon(s.t, slug, '1.0', Buffer.isBuffer(entries) ? entries : zip(entries));
      const x = await setup(limits);
      const before = tree(x.game);
      const err = await x.manager.install([slug]).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ArchiveError);
      expect((err as ArchiveError).kind).toBe('archive');
      expect(tree(x.game)).toEqual(before);
      expect(fs.existsSync(path.join(x.state, 'addons-operation.json'))).toBe(false);
      expect(fs.readdirSync(path.join(x.state, 'downloads'))).toEqual([]);
      expect(await x.manager.list()).toEqual([]);
    },
  );

  it('genuine layouts are installed: data descriptors, a ZIP64 end record, names that only look alike, long names within the bounds', async () => {
    const long = `${'n'.repeat(251)}.lua`;
    const deep = `${'Deep/'.repeat(100)}d.lua`;
    await publishAddon(
      s.t,
      'layouts',
      '1.0',
      zip(
        [
          { name: 'Layouts/' },
          { name: 'Layouts/signed.lua', data: 'signed', descriptor: 'signed' },
          { name: 'Layouts/unsigned.lua', data: 'unsigned', descriptor: 'unsigned', method: 0 },
          { name: 'Layouts/e.lua', data: 'e' },
          { name: 'Layouts/\u00e9.lua', data: 'é' },
          { name: `Layouts/${long}`, data: 'long' },
          { name: deep, data: 'deep' },
        ],
        { zip64End: true },
      ),
    );
    const x = await setup();
    expect(await x.manager.install(['layouts'])).toEqual([
      { slug: 'layouts', version: '1.0', folders: ['Deep', 'Layouts'] },
    ]);
    expect(tree(path.join(x.addons, 'Layouts'))).toEqual({
      'e.lua': 'e',
      'signed.lua': 'signed',
      'unsigned.lua': 'unsigned',
      '\u00e9.lua': 'é',
      [long]: 'long',
    });
    expect(fs.readFileSync(path.join(x.addons, ...deep.split('/')), 'utf8')).toBe('deep');
  });

  it('the command exits 2 with kind archive', async () => {
    await publishAddon(s.t, 'hostile-cli', '1.0', zip([{ name: 'Fine/../../../evil.lua', data: 'x' }]));
    const x = await setup();
    const result = await cli(['install', 'hostile-cli', ...online(x)]);
    expect(result.code).toBe(2);
    expect(JSON.parse(result.stderr.trim())).toMatchObject({ kind: 'archive' });
    expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
  });

  it('a zip bomb (64 MiB of zeros declared as 100 bytes) is stopped early, memory flat', async () => {
    await publishAddon(
      s.t,
      'bomb',
      '1.0',
      zip([ok, { name: 'Fine/zeros.bin', data: Buffer.alloc(64 << 20), declaredSize: 100 }]),
    );
    const x = await setup();
    const rss = process.memoryUsage().rss;
    await expect(x.manager.install(['bomb'])).rejects.toBeInstanceOf(ArchiveError);
    expect(process.memoryUsage().rss - rss).toBeLessThan(48 << 20);
    expect(fs.readdirSync(x.addons)).toEqual(['MyOwnAddon']);
  });
});

describe('atomic changes', () => {
  it('an update whose second folder fails to extract leaves the previous version in place', async () => {
    await publishAddon(s.t, 'two-folders', '1.0', addonZip(['TwoA', 'TwoB'], '1.0'));
    const x = await setup();
    await x.manager.install(['two-folders']);
    const before = tree(x.game);
    await publishAddon(
      s.t,
      'two-folders',
      '2.0',
      zip([
        { name: 'TwoA/core.lua', data: '-- TwoA 2.0\n' },
        { name: 'TwoB/core.lua', data: '-- TwoB 2.0\n' },
        { name: 'TwoB/broken.lua', data: Buffer.alloc(100_000, 'x'), declaredSize: 1000 },
      ]),
    );
    const report = await x.manager.update();
    expect(report).toEqual({
      updated: [],
      upToDate: [],
      failed: [{ slug: 'two-folders', kind: 'archive', error: expect.any(String) }],
    });
    expect(tree(x.game)).toEqual(before);
    expect((await x.manager.list())[0]).toMatchObject({ version: '1.0' });
  });

  it('a failure while swapping the second folder renames everything back', async () => {
    await publishAddon(s.t, 'swap-fail', '1.0', addonZip(['SwapA', 'SwapB'], '1.0'));
    const x = await setup();
    await x.manager.install(['swap-fail']);
    const before = tree(x.game);
    await publishAddon(s.t, 'swap-fail', '2.0', addonZip(['SwapA', 'SwapB', 'SwapC'], '2.0'));
    const controller = new AbortController();
    const swapped: string[] = [];
    const err = await x.manager
      .update(['swap-fail'], {
        signal: controller.signal,
        onProgress: (p) => {
          if (p.phase !== 'swap') return;
          swapped.push(p.folder);
          // The old folders are aside, the first new one is in: the second fails.
          if (swapped.length === 4) controller.abort();
        },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AbortedError);
    expect(swapped).toEqual(['SwapA', 'SwapB', 'SwapA', 'SwapB']);
    expect(tree(x.game)).toEqual(before);
    expect(leftovers(x)).toEqual([]);
    expect((await x.manager.list())[0]).toMatchObject({ version: '1.0' });
    // And then it goes through.
    expect(await x.manager.update(['swap-fail'])).toMatchObject({
      updated: [{ slug: 'swap-fail', from: '1.0', to: '2.0' }],
    });
    expect(fs.readdirSync(x.addons).sort()).toEqual(['MyOwnAddon', 'SwapA', 'SwapB', 'SwapC']);
  });

  it('the downloads pruned (a confirmed launcher install elsewhere) after the download: the install goes on', async () => {
    await publishAddon(s.t, 'pruned-under', '1.0', addonZip(['PrunedUnder'], '1.0'));
    const x = await setup();
    const downloads = path.join(x.state, 'downloads');
    let pruned: string[] = [];
    const result = await x.manager.install(['pruned-under'], {
      onProgress: (p) => {
        if (p.phase !== 'extract') return;
        pruned = fs.readdirSync(downloads);
        for (const name of pruned) fs.rmSync(path.join(downloads, name), { recursive: true });
      },
    });
    expect(pruned).toHaveLength(1);
    expect(result).toEqual([{ slug: 'pruned-under', version: '1.0', folders: ['PrunedUnder'] }]);
    expect(fs.readFileSync(path.join(x.addons, 'PrunedUnder', 'core.lua'), 'utf8')).toBe('-- PrunedUnder 1.0\n');
    expect(leftovers(x)).toEqual([]);
  });

  it('a process killed in the middle of a swap: the next run puts the previous version back', async () => {
    await publishAddon(s.t, 'swap-kill', '1.0', addonZip(['KillA', 'KillB'], '1.0'));
    const x = await setup();
    await x.manager.install(['swap-kill']);
    const before = tree(x.game);
    await publishAddon(s.t, 'swap-kill', '2.0', addonZip(['KillA', 'KillB'], '2.0'));
    // The library in a process of its own that kills itself as it is about to move the second new folder in.
    const script = [
      'import fs from "node:fs";',
      `import { AddonManager, UpdateManager } from ${JSON.stringify(path.resolve(import.meta.dirname, '../src/index.ts'))};`,
      'const [serverUrl, keys, stateDir, gameDir] = process.argv.slice(1);',
      'const trustedKeys = JSON.parse(fs.readFileSync(keys, "utf8"));',
      'const addons = new AddonManager({ updates: new UpdateManager({ serverUrl, trustedKeys, stateDir }), gameDir });',
      'let swaps = 0;',
      'await addons.update(undefined, { onProgress: (p) => { if (p.phase === "swap" && ++swaps === 4) process.kill(process.pid, "SIGKILL"); } });',
    ].join('\n');
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script, s.proxy.url, keysFile, x.state, x.game],
      { cwd: ROOT },
    );
    const signal = await new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_, sig) => resolve(sig)));
    expect(signal).toBe('SIGKILL');
    // Killed halfway: the new KillA is in, the old KillB is aside.
    expect(fs.readFileSync(path.join(x.addons, 'KillA', 'core.lua'), 'utf8')).toBe('-- KillA 2.0\n');
    expect(fs.existsSync(path.join(x.addons, 'KillB'))).toBe(false);

    const listed = await cli(['list', ...offline(x)]);
    expect(listed.last).toMatchObject({ addons: [{ slug: 'swap-kill', version: '1.0', folders: ['KillA', 'KillB'] }] });
    expect(tree(x.game)).toEqual(before);
    expect(fs.existsSync(path.join(x.state, 'addons-operation.json'))).toBe(false);
    const again = await cli(['update', 'swap-kill', ...online(x)]);
    expect(again.last).toEqual({ updated: [{ slug: 'swap-kill', from: '1.0', to: '2.0' }], upToDate: [], failed: [] });
  }, 60_000);

  it('a process killed while extracting: the next run rolls back, a rerun installs, one download counted', async () => {
    const big = Array.from({ length: 48 }, (_, i) => ({
      name: `Big/part${i}.bin`,
      data: Buffer.alloc(1 << 20, i),
    }));
    const id = await publishAddon(s.t, 'big-addon', '1.0', zip([{ name: 'Big/' }, ...big]));
    const x = await setup();
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'addons', 'install', 'big-addon', ...online(x)], {
      cwd: ROOT,
    });
    const killed = new Promise<void>((resolve) => child.on('exit', () => resolve()));
    const staged = () => {
      const works = leftovers(x);
      const dir = works[0] === undefined ? null : path.join(workRoot(x), works[0], 'new', 'Big');
      return dir !== null && fs.existsSync(dir) && fs.readdirSync(dir).length > 0;
    };
    const deadline = Date.now() + 30_000;
    while (!staged() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    child.kill('SIGKILL');
    await killed;
    expect(staged()).toBe(true);
    expect(fs.existsSync(path.join(x.state, 'addons-operation.json'))).toBe(true);
    expect(fs.existsSync(path.join(x.addons, 'Big'))).toBe(false);

    const listed = await cli(['list', ...offline(x)]);
    expect(listed.last).toEqual({ addons: [] });
    expect(leftovers(x)).toEqual([]);
    expect(fs.existsSync(path.join(x.state, 'addons-operation.json'))).toBe(false);

    const rerun = await cli(['install', 'big-addon', ...online(x)]);
    expect(rerun.code, rerun.stderr).toBe(0);
    expect(fs.readdirSync(path.join(x.addons, 'Big'))).toHaveLength(48);
    await expect.poll(() => downloadCount(s.t, 'big-addon', id)).toBe(1);
    expect(s.proxy.requests(`/api/download/${id}`)).toHaveLength(1);
  }, 60_000);
});

describe('update', () => {
  it('100 addons in one POST /api/addons/updates; each failure isolated; exit 2 when one was refused', async () => {
    const slugs = Array.from({ length: 100 }, (_, i) => `bulk-${String(i).padStart(3, '0')}`);
    for (const slug of slugs) await publishAddon(s.t, slug, '1.0', addonZip([`Bulk${slug.slice(5)}`], '1.0'));
    const x = await setup();
    await x.manager.install(slugs);
    for (const slug of slugs.slice(0, 98))
      await publishAddon(s.t, slug, '2.0', addonZip([`Bulk${slug.slice(5)}`], '2.0'));
    // One refused by its archive, one whose download is refused on the way.
    await publishAddon(s.t, 'bulk-098', '2.0', zip([{ name: 'evil.lua', data: 'x' }]));
    const tamperedId = await publishAddon(s.t, 'bulk-099', '2.0', addonZip(['Bulk099'], '2.0'));
    s.proxy.rule = async (seen, upstream) => {
      if (seen.url !== `/api/download/${tamperedId}`) return undefined;
      const answer = await upstream();
      return { ...answer, body: Buffer.concat([answer.body.subarray(0, -1), Buffer.from('!')]) };
    };
    const from = s.proxy.seen.length;
    const result = await cli(['update', ...online(x)]);
    const seen = s.proxy.seen.slice(from);
    expect(seen.filter((r) => r.url.startsWith('/api/addons/updates'))).toHaveLength(1);
    expect(result.code).toBe(2);
    const report = result.last as {
      updated: { slug: string }[];
      upToDate: string[];
      failed: { slug: string; kind: string }[];
    };
    expect(report.updated).toHaveLength(98);
    expect(report.updated[0]).toEqual({ slug: 'bulk-000', from: '1.0', to: '2.0' });
    expect(report.failed).toEqual([
      { slug: 'bulk-098', kind: 'archive', error: expect.any(String) },
      { slug: 'bulk-099', kind: 'integrity', error: expect.any(String) },
    ]);
    expect(fs.readFileSync(path.join(x.addons, 'Bulk000', 'core.lua'), 'utf8')).toBe('-- Bulk000 2.0\n');
    expect(fs.readFileSync(path.join(x.addons, 'Bulk098', 'core.lua'), 'utf8')).toBe('-- Bulk098 1.0\n');
    expect(fs.readFileSync(path.join(x.addons, 'Bulk099', 'core.lua'), 'utf8')).toBe('-- Bulk099 1.0\n');

    s.proxy.rule = null;
    const again = await cli(['update', 'bulk-000', 'bulk-099', ...online(x)]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.last).toEqual({
      updated: [{ slug: 'bulk-099', from: '1.0', to: '2.0' }],
      upToDate: ['bulk-000'],
      failed: [],
    });
  }, 120_000);
});
