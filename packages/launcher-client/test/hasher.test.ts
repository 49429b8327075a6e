import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChunkBuffer, Hasher } from '../src/game/hasher.js';

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
/** A chunk buffer holding `bytes` (and room to spare, as a worker's buffer has). */
const lend = (bytes: Buffer) => {
  const into = ChunkBuffer.of(bytes.length + 16);
  bytes.copy(into.bytes);
  return into;
};

/** A work file of three places (sizes 100, 50, 70), all zeros, and the bytes meant for it. */
let made = 0;
function workFile(dir: string) {
  const parts = [randomBytes(100), randomBytes(50), randomBytes(70)];
  const offsets = [0, 100, 150];
  const file = path.join(dir, `work-${++made}`);
  fs.writeFileSync(file, Buffer.alloc(220));
  /** Writes place `i` as an earlier run would have. */
  const put = (i: number) => {
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, parts[i]!, 0, parts[i]!.length, offsets[i]);
    fs.closeSync(fd);
  };
  const at = (i: number) => [{ file, offset: offsets[i]!, size: 220 }];
  return { file, parts, offsets, put, at, whole: sha256(Buffer.concat(parts)), bytes: Buffer.concat(parts) };
}

describe('Hasher: chunk names, writes and whole checks on a thread of their own', () => {
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

  it("answers a chunk's SHA-256 from bytes moved to the thread and given back; a view of Node's pool is refused", async () => {
    const bytes = randomBytes(3000);
    const into = lend(bytes);
    const before = into.bytes;
    expect(await hasher.chunk(into, 3000, 'not-its-name', {})).toBe(sha256(bytes));
    expect(before.length).toBe(0); // moved, not copied
    expect(into.bytes.subarray(0, 3000).equals(bytes)).toBe(true);
    await expect(hasher.chunk(new ChunkBuffer(Buffer.from('pooled')), 6, 'x', {})).rejects.toThrow(/whole ArrayBuffer/);
    await expect(hasher.chunk(lend(bytes), 4000, 'x', {})).rejects.toThrow(/at least its size/);
  });

  it('writes a chunk that hashes to its name at its places, and hashes the file whole in order, reading back places filled out of order', async () => {
    const w = workFile(dir);
    // The last place is filled first (another connection was faster): it is read back in its turn.
    for (const i of [2, 0, 1]) {
      expect(await hasher.chunk(lend(w.parts[i]!), w.parts[i]!.length, sha256(w.parts[i]!), { write: w.at(i) })).toBe(
        sha256(w.parts[i]!),
      );
    }
    expect(await hasher.whole(w.file, 220)).toBe(w.whole);
    expect(fs.readFileSync(w.file).equals(w.bytes)).toBe(true);
    // One chunk at two places of two files: written at both.
    const v = workFile(dir);
    const u = workFile(dir);
    u.parts[0] = v.parts[0]!;
    await hasher.chunk(lend(v.parts[0]!), 100, sha256(v.parts[0]!), { write: [...v.at(0), ...u.at(0)] });
    expect(fs.readFileSync(u.file).subarray(0, 100).equals(v.parts[0]!)).toBe(true);
    expect(fs.readFileSync(v.file).subarray(0, 100).equals(v.parts[0]!)).toBe(true);
  });

  it('a place that already holds its chunk (an earlier run) counts without a write; what is on disk is what the whole check sees', async () => {
    const w = workFile(dir);
    for (const i of [1, 0, 2]) {
      w.put(i);
      await hasher.chunk(lend(w.parts[i]!), w.parts[i]!.length, sha256(w.parts[i]!), { present: w.at(i) });
    }
    expect(await hasher.whole(w.file, 220)).toBe(w.whole);
    // Filled out of order, then damaged on disk before its turn came: the read back sees the damage.
    const v = workFile(dir);
    await hasher.chunk(lend(v.parts[1]!), 50, sha256(v.parts[1]!), { write: v.at(1) });
    const fd = fs.openSync(v.file, 'r+');
    fs.writeSync(fd, Buffer.from([v.parts[1]![0]! ^ 0xff]), 0, 1, v.offsets[1]);
    fs.closeSync(fd);
    for (const i of [0, 2])
      await hasher.chunk(lend(v.parts[i]!), v.parts[i]!.length, sha256(v.parts[i]!), { write: v.at(i) });
    expect(await hasher.whole(v.file, 220)).not.toBe(v.whole);
  });

  it('bytes that do not hash to the name given are neither written nor taken into the whole check', async () => {
    const w = workFile(dir);
    const lie = randomBytes(100);
    expect(await hasher.chunk(lend(lie), 100, sha256(w.parts[0]!), { write: w.at(0) })).toBe(sha256(lie));
    expect(fs.readFileSync(w.file).equals(Buffer.alloc(220))).toBe(true);
    for (const i of [0, 1, 2])
      await hasher.chunk(lend(w.parts[i]!), w.parts[i]!.length, sha256(w.parts[i]!), { write: w.at(i) });
    expect(await hasher.whole(w.file, 220)).toBe(w.whole);
  });

  it('null when a place was never filled, or the file is not the size asked; an empty file is whole with no place', async () => {
    const w = workFile(dir);
    for (const i of [0, 2])
      await hasher.chunk(lend(w.parts[i]!), w.parts[i]!.length, sha256(w.parts[i]!), { write: w.at(i) });
    expect(await hasher.whole(w.file, 220)).toBeNull();
    const v = workFile(dir);
    for (const i of [0, 1, 2])
      await hasher.chunk(lend(v.parts[i]!), v.parts[i]!.length, sha256(v.parts[i]!), { write: v.at(i) });
    fs.appendFileSync(v.file, 'x');
    expect(await hasher.whole(v.file, 220)).toBeNull();
    fs.writeFileSync(path.join(dir, 'empty'), '');
    expect(await hasher.whole(path.join(dir, 'empty'), 0)).toBe(sha256(Buffer.alloc(0)));
  });

  it('a write that fails rejects with its error and code, the buffer given back; a file that cannot be read fails its check', async () => {
    const bytes = randomBytes(64);
    const into = lend(bytes);
    const failed = hasher.chunk(into, 64, sha256(bytes), {
      write: [{ file: path.join(dir, 'absent', 'work'), offset: 0, size: 64 }],
    });
    await expect(failed).rejects.toMatchObject({ code: 'ENOENT' });
    expect(into.bytes.subarray(0, 64).equals(bytes)).toBe(true);
    expect(await hasher.whole(path.join(dir, 'absent'), 10)).toBeNull();
  });

  /** The descriptors of the process open on files of `dir`. */
  const open = () =>
    fs.readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir);
      } catch {
        return false; // closed meanwhile (readdir's own)
      }
    }).length;

  it.skipIf(process.platform !== 'linux')(
    'at most 64 work files are open at once: 100 files filled out of order are all checked right',
    async () => {
      const works = Array.from({ length: 100 }, () => workFile(dir));
      // Each file's last place first (kept for its read back), then its first two.
      for (const w of works) await hasher.chunk(lend(w.parts[2]!), 70, sha256(w.parts[2]!), { write: w.at(2) });
      expect(open()).toBe(64);
      for (const i of [0, 1]) {
        for (const w of works) {
          await hasher.chunk(lend(w.parts[i]!), w.parts[i]!.length, sha256(w.parts[i]!), { write: w.at(i) });
        }
      }
      expect(open()).toBeLessThanOrEqual(64);
      for (const w of works) expect(await hasher.whole(w.file, 220)).toBe(w.whole);
      expect(open()).toBe(0);
    },
  );

  it.skipIf(process.platform !== 'linux')(
    'a work file is made by its first write; its whole check answers once it is flushed and closed (the flush: game-machine.test.ts)',
    async () => {
      const w = workFile(dir);
      fs.rmSync(w.file);
      for (const i of [1, 2]) {
        await hasher.chunk(lend(w.parts[i]!), w.parts[i]!.length, sha256(w.parts[i]!), { write: w.at(i) });
      }
      expect(fs.existsSync(w.file)).toBe(true);
      expect(open()).toBe(1);
      await hasher.chunk(lend(w.parts[0]!), 100, sha256(w.parts[0]!), { write: w.at(0) });
      expect(await hasher.whole(w.file, 220)).toBe(w.whole);
      expect(open()).toBe(0);
      expect(fs.readFileSync(w.file).equals(w.bytes)).toBe(true);
    },
  );

  it.skipIf(process.platform !== 'linux')(
    'close closes the work files it holds open; a closed hasher refuses work',
    async () => {
      const w = workFile(dir);
      const v = workFile(dir);
      for (const f of [w, v]) await hasher.chunk(lend(f.parts[1]!), 50, sha256(f.parts[1]!), { write: f.at(1) });
      expect(open()).toBe(2);
      await hasher.close();
      expect(open()).toBe(0);
      await expect(hasher.chunk(lend(randomBytes(4)), 4, 'x', {})).rejects.toThrow(/closed/);
    },
  );
});
