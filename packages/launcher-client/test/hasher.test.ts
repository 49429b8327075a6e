import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Hasher } from '../src/hasher.js';

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
const shared = (bytes: Buffer) => {
  const out = Buffer.from(new SharedArrayBuffer(bytes.length));
  bytes.copy(out);
  return out;
};

/** A work file of three places (sizes 100, 50, 70) and the bytes meant for it. */
let made = 0;
function workFile(dir: string) {
  const parts = [randomBytes(100), randomBytes(50), randomBytes(70)];
  const offsets = [0, 100, 150];
  const file = path.join(dir, `work-${++made}`);
  fs.writeFileSync(file, Buffer.alloc(220));
  const put = (i: number) => {
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, parts[i]!, 0, parts[i]!.length, offsets[i]);
    fs.closeSync(fd);
  };
  return { file, parts, offsets, put, whole: sha256(Buffer.concat(parts)) };
}

describe('Hasher: chunk names and whole checks on a thread of their own', () => {
  let dir: string;
  let hasher: Hasher;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hasher-'));
    hasher = new Hasher();
  });
  afterEach(async () => {
    await hasher.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("answers a chunk's SHA-256, from bytes shared with the thread; unshared bytes are refused", async () => {
    const bytes = randomBytes(3000);
    expect(await hasher.chunk(shared(bytes), 'not-its-name', [])).toBe(sha256(bytes));
    await expect(hasher.chunk(bytes, sha256(bytes), [])).rejects.toThrow(/shared/);
  });

  it('hashes a file whole from chunks in order, and reads back the places written out of order', async () => {
    const w = workFile(dir);
    // The last place is written first (another connection was faster): it is read back later.
    w.put(2);
    hasher.written(w.file, w.offsets[2]!, w.parts[2]!.length);
    for (const i of [0, 1]) {
      expect(
        await hasher.chunk(shared(w.parts[i]!), sha256(w.parts[i]!), [{ file: w.file, offset: w.offsets[i]! }]),
      ).toBe(sha256(w.parts[i]!));
      w.put(i);
      hasher.written(w.file, w.offsets[i]!, w.parts[i]!.length);
    }
    expect(await hasher.whole(w.file, 220)).toBe(w.whole);
  });

  it('a whole check reads what is on disk: a place written with other bytes than its chunk makes another hash', async () => {
    const w = workFile(dir);
    for (const i of [2, 1, 0]) {
      w.put(i);
      hasher.written(w.file, w.offsets[i]!, w.parts[i]!.length);
    }
    expect(await hasher.whole(w.file, 220)).toBe(w.whole);
    // Written out of order, then damaged on disk before its turn came: the read back sees the damage.
    const v = workFile(dir);
    v.put(1);
    hasher.written(v.file, v.offsets[1]!, v.parts[1]!.length);
    const fd = fs.openSync(v.file, 'r+');
    fs.writeSync(fd, Buffer.from([v.parts[1]![0]! ^ 0xff]), 0, 1, v.offsets[1]);
    fs.closeSync(fd);
    v.put(0);
    hasher.written(v.file, 0, 100);
    v.put(2);
    hasher.written(v.file, 150, 70);
    expect(await hasher.whole(v.file, 220)).not.toBe(v.whole);
  });

  it('bytes that do not hash to the name given are not taken into the whole check', async () => {
    const w = workFile(dir);
    const lie = randomBytes(100);
    expect(await hasher.chunk(shared(lie), sha256(w.parts[0]!), [{ file: w.file, offset: 0 }])).toBe(sha256(lie));
    for (const i of [0, 1, 2]) {
      w.put(i);
      hasher.written(w.file, w.offsets[i]!, w.parts[i]!.length);
    }
    expect(await hasher.whole(w.file, 220)).toBe(w.whole);
  });

  it('null when a place was never written, or the file is not the size asked', async () => {
    const w = workFile(dir);
    for (const i of [0, 2]) {
      w.put(i);
      hasher.written(w.file, w.offsets[i]!, w.parts[i]!.length);
    }
    expect(await hasher.whole(w.file, 220)).toBeNull();
    const v = workFile(dir);
    for (const i of [0, 1, 2]) {
      v.put(i);
      hasher.written(v.file, v.offsets[i]!, v.parts[i]!.length);
    }
    fs.appendFileSync(v.file, 'x');
    expect(await hasher.whole(v.file, 220)).toBeNull();
    // An empty file is whole with no place at all.
    fs.writeFileSync(path.join(dir, 'empty'), '');
    expect(await hasher.whole(path.join(dir, 'empty'), 0)).toBe(sha256(Buffer.alloc(0)));
  });

  it('a file that cannot be read fails the check with its error; a closed hasher refuses work', async () => {
    await expect(hasher.whole(path.join(dir, 'absent'), 10)).rejects.toThrow(/ENOENT/);
    await hasher.close();
    await expect(hasher.chunk(shared(randomBytes(4)), 'x', [])).rejects.toThrow(/closed/);
  });
});
