import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ArchiveError } from '../src/errors.js';
import { archiveFingerprints, folderFingerprint } from '../src/addons/fingerprint.js';
import { zip } from './addons-fixtures.js';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fingerprint-test-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

/**
 * The reference, computed here from the files on disk with node's crypto: every file under `dir`
 * as `relative/path\n<sha256 of its bytes>\n`, in the order of the paths' UTF-8 bytes (NFC), hashed.
 */
function reference(dir: string): string {
  const lines: [Buffer, string][] = [];
  const walk = (at: string, prefix: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const rel = `${prefix}${entry.name}`;
      if (entry.isDirectory()) walk(path.join(at, entry.name), `${rel}/`);
      else lines.push([Buffer.from(rel.normalize('NFC'), 'utf8'), sha256(fs.readFileSync(path.join(at, entry.name)))]);
    }
  };
  walk(dir, '');
  lines.sort((a, b) => Buffer.compare(a[0], b[0]));
  return sha256(Buffer.concat(lines.map(([p, h]) => Buffer.concat([p, Buffer.from(`\n${h}\n`)]))));
}

/** Writes `files` (relative path → content) under `root` and answers them as zip entries under `root`'s name. */
function writeTree(root: string, files: Record<string, string>): { name: string; data: string }[] {
  return Object.entries(files).map(([rel, data]) => {
    const file = path.join(work, root, ...rel.split('/'));
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, data);
    return { name: `${root}/${rel}`, data };
  });
}

describe('folder fingerprints', () => {
  it('match a reference computed from the same files on disk, for every top-level folder of an archive', async () => {
    // UTF-8 order is not JavaScript's (UTF-16) order: U+1F600 (the pair D83D DE00) sorts before
    // U+FF5E in UTF-16 but after it in UTF-8 (F0 9F… > EF BD…). Upper case sorts before lower case,
    // `a-b` before `a.lua` before `a/`, and a name with a decomposed é is counted in NFC.
    const core = writeTree('Core', {
      'Core.toc': '## Title: Core\n',
      'y.lua': 'y',
      'Z.lua': 'Z',
      'libs/a/x.lua': 'x',
      'libs/a.lua': 'a',
      'libs/a-b.lua': 'ab',
      '\u{1F600}.txt': 'emoji',
      '\uFF5E.txt': 'wave',
      'caf\u0065\u0301.lua': 'café',
    });
    const options = writeTree('Core_Options', { 'Core_Options.toc': '## Title: Options\n', 'opts.lua': '-- o' });
    const file = path.join(work, 'addon.zip');
    fs.writeFileSync(
      file,
      zip([
        { name: 'Core/' },
        { name: 'Core/libs/' },
        ...core,
        { name: 'Core_Options/' },
        ...options,
        { name: 'Empty/' },
      ]),
    );
    const got = await archiveFingerprints(file);
    expect(got).toEqual([
      { folder: 'Core', fingerprint: reference(path.join(work, 'Core')) },
      { folder: 'Core_Options', fingerprint: reference(path.join(work, 'Core_Options')) },
      // A folder without files: the SHA-256 of nothing.
      { folder: 'Empty', fingerprint: sha256('') },
    ]);
  });

  it('is the hash of the lines in UTF-8 byte order, paths in NFC, hashes in lowercase', () => {
    const h = (s: string) => sha256(s);
    const files = [
      { path: 'z.lua', sha256: h('z').toUpperCase() },
      { path: '\uFF5E.txt', sha256: h('wave') },
      { path: '\u{1F600}.txt', sha256: h('emoji') },
      { path: 'Z.lua', sha256: h('Z') },
      { path: 'cafe\u0301/x.lua', sha256: h('x') },
    ];
    const expected = sha256(
      [
        `Z.lua\n${h('Z')}\n`,
        `caf\u00e9/x.lua\n${h('x')}\n`,
        `z.lua\n${h('z')}\n`,
        `\uFF5E.txt\n${h('wave')}\n`,
        `\u{1F600}.txt\n${h('emoji')}\n`,
      ].join(''),
    );
    expect(folderFingerprint(files)).toBe(expected);
    // The order the files are given in does not matter.
    expect(folderFingerprint([...files].reverse())).toBe(expected);
    expect(folderFingerprint([])).toBe(sha256(''));
  });

  it('refuses an archive the extractor refuses', async () => {
    const file = path.join(work, 'bad.zip');
    fs.writeFileSync(file, zip([{ name: 'Addon/../evil.lua', data: 'x' }]));
    await expect(archiveFingerprints(file)).rejects.toBeInstanceOf(ArchiveError);
    fs.writeFileSync(file, 'not a zip');
    await expect(archiveFingerprints(file)).rejects.toBeInstanceOf(ArchiveError);
  });
});
