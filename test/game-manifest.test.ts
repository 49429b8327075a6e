import { describe, expect, it } from 'vitest';
import { checkManifest, globMatcher, MAX_CHUNK_BYTES, MAX_MANIFEST_FILES } from '../src/domain/game-manifest.js';

// The manifest rules of game-files.md, as one pure function a launcher mirrors: every rule refused
// with a message naming the fault, every valid form accepted.

const H = (n: number) => n.toString(16).padStart(64, '0');
const file = (path: string, size = 1, extra: Record<string, unknown> = {}) => ({
  path,
  size,
  sha256: H(999),
  chunks: size === 0 ? [] : [[H(size), size]],
  ...extra,
});
const manifest = (files: unknown[], extra: Record<string, unknown> = {}) =>
  JSON.stringify({ format: 1, app: 'acme', version: '1.18.3', buildCode: 1183, files, ...extra });
const errorOf = (text: string) => {
  const checked = checkManifest(text);
  return checked.ok ? null : checked.error;
};

describe('checkManifest', () => {
  it('accepts a valid manifest and answers its figures', () => {
    const checked = checkManifest(
      manifest(
        [
          {
            path: 'WoW.exe',
            size: 5,
            sha256: H(1),
            executable: true,
            chunks: [
              [H(2), 2],
              [H(3), 3],
            ],
          },
          { path: 'Data/patch-3.mpq', size: 2, sha256: H(4), chunks: [[H(2), 2]] },
          { path: 'WTF/Config.wtf', size: 0, sha256: H(5), chunks: [], policy: 'initial' },
          { path: 'Data/中文/é.txt', size: 1, sha256: H(6), chunks: [[H(7), 1]] },
        ],
        { remove: ['Data/patch-*.mpq4', 'Data/old-?.MPQ'] },
      ),
    );
    expect(checked.ok).toBe(true);
    if (!checked.ok) return;
    expect(checked.totalSize).toBe(8);
    expect([...checked.chunks]).toEqual([
      [H(2), 2],
      [H(3), 3],
      [H(7), 1],
    ]);
    expect(checked.manifest.files[0]?.executable).toBe(true);
    expect(checked.manifest.files[1]?.policy).toBe('exact');
    expect(checked.manifest.files[2]?.policy).toBe('initial');
  });

  it.each([
    ['../evil.dll', 'files[0].path: "../evil.dll" has an empty, "." or ".." segment'],
    ['Data/../../x', 'has an empty, "." or ".." segment'],
    ['./WoW.exe', 'has an empty, "." or ".." segment'],
    ['Data//x', 'has an empty, "." or ".." segment'],
    ['Data/', 'has an empty, "." or ".." segment'],
    ['/etc/passwd', 'is absolute'],
    ['C:/Windows/x.dll', 'starts with a drive letter'],
    ['c:x.dll', 'starts with a drive letter'],
    ['Data\\x.mpq', 'has a forbidden character ("\\\\")'],
    ['Data/a:b', 'has a forbidden character (":")'],
    ['Data/a\u0001b', 'has a forbidden character'],
    ['Data/a?b', 'has a forbidden character ("?")'],
    ['Data/a*b', 'has a forbidden character ("*")'],
    ['Data/a<b', 'has a forbidden character'],
    ['Data/a|b', 'has a forbidden character'],
    ['Data/a"b', 'has a forbidden character'],
    ['CON', 'has a segment Windows reserves ("CON")'],
    ['Data/nul.txt', 'has a segment Windows reserves ("nul.txt")'],
    ['com1/x', 'has a segment Windows reserves'],
    ['Data/LPT9.tar.gz', 'has a segment Windows reserves'],
    ['Data/x.', 'ending in a dot or space'],
    ['Data/x ', 'ending in a dot or space'],
    ['e\u0301.txt', 'is not in Unicode NFC'],
  ])('refuses the path %j', (path, message) => {
    expect(errorOf(manifest([file(path)]))).toContain(message);
  });

  it.each(['CONSOLE.exe', 'COM10', 'LPT0.txt', 'Data/aux_x.mpq', 'Data/.hidden', 'Data/x.y'])(
    'accepts the path %j',
    (path) => {
      expect(errorOf(manifest([file(path)]))).toBeNull();
    },
  );

  it('refuses paths equal but for case, and a file under another file', () => {
    expect(errorOf(manifest([file('Data/A.mpq'), file('data/a.MPQ')]))).toContain('differ only in case');
    expect(errorOf(manifest([file('WoW.exe'), file('WoW.exe')]))).toContain('differ only in case');
    expect(errorOf(manifest([file('Data'), file('Data/x.mpq')]))).toBe(
      'files: "Data/x.mpq" is under "Data", which is a file',
    );
    expect(errorOf(manifest([file('data/x/y'), file('Data/X')]))).toContain('is under "Data/X"');
  });

  it('refuses sizes that do not add up, chunks of 0 bytes or over 8 MiB, and malformed hashes', () => {
    expect(errorOf(manifest([{ ...file('a'), size: 2 }]))).toBe('files[0].size: is 2 but its chunks add up to 1');
    expect(errorOf(manifest([{ ...file('a', 0), size: 0, chunks: [[H(1), 0]] }]))).toContain(
      'files[0].chunks[0][1]: must be an integer from 1 to 8388608',
    );
    const big = MAX_CHUNK_BYTES + 1;
    expect(errorOf(manifest([{ ...file('a'), size: big, chunks: [[H(1), big]] }]))).toContain('chunks[0][1]');
    expect(errorOf(manifest([{ ...file('a'), size: MAX_CHUNK_BYTES, chunks: [[H(1), MAX_CHUNK_BYTES]] }]))).toBeNull();
    expect(errorOf(manifest([{ ...file('a'), chunks: [[H(0xab).toUpperCase(), 1]] }]))).toContain(
      'lowercase hex SHA-256',
    );
    expect(errorOf(manifest([{ ...file('a'), sha256: 'x' }]))).toContain('files[0].sha256');
    expect(errorOf(manifest([{ ...file('a'), chunks: [[H(1)]] }]))).toContain('must be [sha256, size]');
    expect(errorOf(manifest([{ ...file('a'), size: -1 }]))).toContain('files[0].size');
    expect(errorOf(manifest([file('a', 1), { ...file('b', 2), chunks: [[H(1), 2]] }]))).toContain(
      'named with another size',
    );
  });

  it('refuses more than 100,000 files', () => {
    const files = Array.from({ length: MAX_MANIFEST_FILES + 1 }, (_, i) => file(`f/${i}`, 0));
    expect(errorOf(manifest(files))).toBe('files: 100001 files, more than the limit of 100000');
    expect(errorOf(manifest(files.slice(1)))).toBeNull();
  });

  it('remove: at least two segments, the first a literal top-level folder holding a listed file, not a player folder', () => {
    const files = [file('Data/patch-3.mpq'), file('WoW.exe'), file('Tools/Sub/x.dll')];
    const refusals: [string, string][] = [
      ['*', 'must have at least two segments'],
      ['*.dll', 'must have at least two segments'],
      ['WoW.exe', 'must have at least two segments'],
      ['*/x', 'must name its top-level folder without "*" or "?" ("*")'],
      ['D?ta/x', 'must name its top-level folder without "*" or "?"'],
      ['WTF/*.wtf', 'may not reach into the player folder "WTF/"'],
      ['wtf/Config.wtf', 'may not reach into the player folder "wtf/"'],
      ['Interface/AddOns/*', 'may not reach into the player folder'],
      ['Screenshots/*.jpg', 'may not reach into the player folder'],
      ['Logs/*', 'may not reach into the player folder'],
      ['ERRORS/*', 'may not reach into the player folder'],
      ['WDB/*', 'may not reach into the player folder'],
      ['Cache/x/*', 'may not reach into the player folder'],
      ['Other/x.mpq', 'names the folder "Other/", which holds no listed file'],
      ['WoW.exe/x', 'names the folder "WoW.exe/", which holds no listed file'],
    ];
    for (const [pattern, rule] of refusals) {
      expect(errorOf(manifest(files, { remove: [pattern] }))).toMatch(
        new RegExp(`^remove\\[0\\]: "${pattern.replace(/[*?.]/g, '\\$&')}" `),
      );
      expect(errorOf(manifest(files, { remove: [pattern] }))).toContain(rule);
    }
    // The spec's own example: a pattern matching a listed file is valid (a listed file is never removed).
    expect(errorOf(manifest(files, { remove: ['Data/patch-*.mpq'] }))).toBeNull();
    expect(errorOf(manifest(files, { remove: ['data/PATCH-?.MPQ', 'Tools/*/*.dll', 'tools/Sub/old.dll'] }))).toBeNull();
    expect(errorOf(manifest(files, { remove: ['../x'] }))).toContain('remove[0]');
    expect(errorOf(manifest(files, { remove: ['Data/ok', 'Logs/x'] }))).toContain('remove[1]');
  });

  it('a build lists at least one file, and only initial files in the player folders', () => {
    expect(errorOf(manifest([]))).toBe('files: a build lists at least one file');
    for (const folder of ['WTF', 'Interface', 'Screenshots', 'Logs', 'Errors', 'WDB', 'Cache', 'interface', 'wdb']) {
      expect(errorOf(manifest([file('WoW.exe'), file(`${folder}/a/b.txt`)]))).toBe(
        `files[1].policy: "${folder}/a/b.txt" is in a player folder (WTF, Interface, Screenshots, Logs, Errors, WDB, Cache), so it must be "initial"`,
      );
      expect(errorOf(manifest([file(`${folder}/a/b.txt`, 1, { policy: 'initial' })]))).toBeNull();
    }
    // A file named like a player folder at the top, or a folder that only starts like one, is not in one.
    expect(errorOf(manifest([file('WTF'), file('WTFs/x'), file('Data/WTF/x')]))).toBeNull();
  });

  it('accepted (a stored or installed build): read despite the player-safety rules, made safe to act on', () => {
    const text = manifest([file('WoW.exe'), file('WTF/Config.wtf'), file('Interface/AddOns/Foo/Foo.toc')], {
      remove: ['Data/x', 'Logs/*', 'WoW.exe/*', '*'],
    });
    expect(errorOf(text)).toContain('files[1].policy');
    const checked = checkManifest(text, { accepted: true });
    expect(checked.ok).toBe(true);
    if (!checked.ok) return;
    expect(checked.broken).toBe(
      'files[1].policy: "WTF/Config.wtf" is in a player folder (WTF, Interface, Screenshots, Logs, Errors, WDB, Cache), so it must be "initial"',
    );
    expect(checked.manifest.files.map((f) => f.policy)).toEqual(['exact', 'initial', 'initial']);
    // Every pattern the rules refuse is dropped: nothing at the top, in a player folder or unlisted is removed.
    expect(checked.manifest.remove).toEqual([]);
    const empty = checkManifest(manifest([]), { accepted: true });
    expect(empty.ok && empty.broken).toBe('files: a build lists at least one file');
    // Structural faults are refused even so; a valid manifest has nothing broken.
    expect(checkManifest(manifest([file('../x')]), { accepted: true }).ok).toBe(false);
    const valid = checkManifest(manifest([file('Data/a')], { remove: ['Data/b*'] }), { accepted: true });
    expect(valid.ok && valid.broken).toBeNull();
    expect(valid.ok && valid.manifest.remove).toEqual(['Data/b*']);
  });

  it('refuses what is not a format-1 manifest', () => {
    expect(errorOf('{')).toContain('manifest: not JSON');
    expect(errorOf('[]')).toBe('manifest: must be an object');
    expect(errorOf(manifest([file('a')], { format: 2 }))).toBe('format: must be 1');
    expect(errorOf(manifest([file('a')], { buildCode: 0 }))).toContain('buildCode');
    expect(errorOf(manifest([file('a')], { app: '' }))).toContain('app');
    expect(errorOf(manifest([], { files: {} }))).toBe('files: must be an array');
    expect(errorOf(manifest([{ ...file('a'), policy: 'sometimes' }]))).toContain('files[0].policy');
    expect(errorOf(manifest([{ ...file('a'), executable: 'yes' }]))).toContain('files[0].executable');
  });

  it('matches globs within one segment, case-insensitively', () => {
    const matches = globMatcher('Data/patch-*.mpq');
    expect(matches('Data/patch-4.MPQ')).toBe(true);
    expect(matches('data/PATCH-.mpq')).toBe(true);
    expect(matches('Data/sub/patch-4.mpq')).toBe(false);
    expect(matches('Data/patch-4.mpq.bak')).toBe(false);
    expect(globMatcher('a.b')('axb')).toBe(false);
    expect(globMatcher('?.txt')('ab.txt')).toBe(false);
  });
});
