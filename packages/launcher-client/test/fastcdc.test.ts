import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Chunker, chunkFile, GAME_CHUNK_SIZES } from '../src/game/fastcdc.js';

/**
 * The Rust `fastcdc` crate's published v2020 test vectors (src/v2020/mod.rs, tests `test_cut_*`):
 * chunk lengths of test/fixtures/SekienAkashita.jpg (from that crate, MIT) for each configuration.
 */
const SEKIEN = path.join(import.meta.dirname, 'fixtures/SekienAkashita.jpg');
const VECTORS: { min: number; avg: number; max: number; level?: number; lengths: number[] }[] = [
  { min: 4096, avg: 16384, max: 65535, lengths: [21325, 17140, 28084, 18217, 24700] },
  { min: 8192, avg: 32768, max: 131072, lengths: [66549, 42917] },
  { min: 16384, avg: 65536, max: 262144, lengths: [109466] },
  { min: 4096, avg: 16384, max: 65535, level: 0, lengths: [6634, 59915, 25597, 5237, 12083] },
  { min: 8192, avg: 16384, max: 32768, level: 3, lengths: [17350, 19911, 17426, 17519, 19940, 17320] },
];

function lengths(data: Uint8Array, chunker: Chunker): number[] {
  const out: number[] = [];
  for (let start = 0; start < data.length;) {
    const length = chunker.cut(data, start, data.length);
    out.push(length);
    start += length;
  }
  return out;
}

describe('FastCDC (2020)', () => {
  it("cuts SekienAkashita.jpg where the crate's published vectors cut it", () => {
    const data = fs.readFileSync(SEKIEN);
    expect(data.length).toBe(109466);
    for (const { lengths: expected, ...sizes } of VECTORS) {
      expect(lengths(data, new Chunker(sizes)), JSON.stringify(sizes)).toEqual(expected);
    }
  });

  it("cuts all zeros at the maximum (the crate's test_cut_all_zeros)", () => {
    expect(lengths(new Uint8Array(10240), new Chunker({ min: 64, avg: 256, max: 1024 }))).toEqual(Array(10).fill(1024));
  });

  it('chunkFile streams a file in large reads: the same cuts as in memory, each chunk hashed, sizes in range', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fastcdc-'));
    try {
      const data = randomBytes(40 * 1024 * 1024 + 12345);
      const file = path.join(dir, 'big.bin');
      fs.writeFileSync(file, data);
      const chunker = new Chunker(GAME_CHUNK_SIZES);
      let read = 0;
      const chunked = await chunkFile(file, chunker, (bytes) => (read += bytes));
      expect(read).toBe(data.length);
      expect(chunked.size).toBe(data.length);
      expect(chunked.sha256).toBe(createHash('sha256').update(data).digest('hex'));
      expect(chunked.chunks.map(([, length]) => length)).toEqual(lengths(data, chunker));
      let offset = 0;
      for (const [sha256, length] of chunked.chunks) {
        expect(sha256).toBe(
          createHash('sha256')
            .update(data.subarray(offset, offset + length))
            .digest('hex'),
        );
        offset += length;
      }
      const inner = chunked.chunks.slice(0, -1).map(([, length]) => length);
      expect(Math.min(...inner)).toBeGreaterThanOrEqual(GAME_CHUNK_SIZES.min);
      expect(Math.max(...inner)).toBeLessThanOrEqual(GAME_CHUNK_SIZES.max);
      // About 1 MiB on average.
      expect(data.length / chunked.chunks.length).toBeGreaterThan(0.6 * 1024 * 1024);
      expect(data.length / chunked.chunks.length).toBeLessThan(1.6 * 1024 * 1024);

      // An insertion changes only the chunks around it.
      const inserted = Buffer.concat([data.subarray(0, 20_000_000), randomBytes(1 << 20), data.subarray(20_000_000)]);
      fs.writeFileSync(file, inserted);
      const after = await chunkFile(file, chunker);
      const before = new Set(chunked.chunks.map(([sha256]) => sha256));
      const fresh = after.chunks.filter(([sha256]) => !before.has(sha256));
      expect(fresh.reduce((sum, [, length]) => sum + length, 0)).toBeLessThan(8 * 1024 * 1024);

      const empty = path.join(dir, 'empty');
      fs.writeFileSync(empty, '');
      expect((await chunkFile(empty, chunker)).chunks).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
