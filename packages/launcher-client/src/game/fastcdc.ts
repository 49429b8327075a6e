/**
 * FastCDC content-defined chunking, the 2020 paper's algorithm (Xia et al., "The Design of Fast
 * Content-Defined Chunking for Data Deduplication Based Storage Systems"): the Gear hash, cut points
 * skipped below the minimum, normalized chunking and "rolling two bytes each time". Cut points are
 * those of the Rust `fastcdc` crate's `v2020` module (its gear table, masks and loop), checked against
 * that crate's published test vectors; no npm implementation of it is kept up.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';

const KiB = 1024;
const MiB = 1024 * KiB;

/** Chunk sizes: at least `min` bytes (except a file's last chunk), at most `max`, about `avg` on average. */
export interface ChunkSizes {
  min: number;
  avg: number;
  max: number;
  /** Normalization level (0-3, default 1): how tightly sizes gather around `avg`. */
  level?: number;
}

/** What the publish command cuts game files with (game-files.md). */
export const GAME_CHUNK_SIZES: ChunkSizes = { min: 256 * KiB, avg: MiB, max: 4 * MiB };

/**
 * The crate's masks by number of bits (0-5 unused): bits spread as the paper advises, from the C
 * reference implementation (destor) and restic's FastCDC, as [high 32 bits, low 32 bits].
 */
const MASKS: readonly (readonly [number, number])[] = [
  [0, 0],
  [0, 0],
  [0, 0],
  [0, 0],
  [0, 0],
  [0x00000000, 0x01804110],
  [0x00000000, 0x01803110],
  [0x00000000, 0x18035100],
  [0x00000018, 0x00035300],
  [0x00000190, 0x00353000],
  [0x00005900, 0x03530000],
  [0x0000d900, 0x03530000],
  [0x0000d901, 0x03530000],
  [0x0000d903, 0x03530000],
  [0x0000d903, 0x13530000],
  [0x0000d90f, 0x03530000],
  [0x0000d903, 0x03537000],
  [0x0000d907, 0x03537000],
  [0x0000d907, 0x07537000],
  [0x0000d917, 0x07537000],
  [0x0000d917, 0x47537000],
  [0x0000d917, 0x67537000],
  [0x0000d937, 0x67537000],
  [0x0000d937, 0x77537000],
  [0x0000d937, 0x77577000],
  [0x0000db37, 0x77577000],
];

/**
 * The gear table: for each byte value v, the first 8 bytes (big-endian) of the MD5 of 64 bytes of v
 * (how the crate's `table64` example makes its table).
 *
 * The crate's loop adds `GEAR_LS` (the table shifted left one bit) after shifting its hash by two at
 * even positions and checks it against the masks shifted by one: the same test, on the same hash, as
 * the plain Gear step (`hash = 2 * hash + GEAR[byte]`) checked against the masks. Only bits 0-47 of
 * the hash meet a mask and carries only move up, so it is kept here as two 24-bit halves: small
 * integers, fast in V8. What the crate keeps of its shortcut is where it cuts: at an even position
 * before the byte that matched, at an odd one after it.
 */
const LOW = 0xffffff;
const GEAR_HI = new Int32Array(256);
const GEAR_LO = new Int32Array(256);
for (let v = 0; v < 256; v += 1) {
  const digest = createHash('md5').update(Buffer.alloc(64, v)).digest();
  GEAR_HI[v] = digest.readUIntBE(2, 3);
  GEAR_LO[v] = digest.readUIntBE(5, 3);
}

/** A 48-bit mask as its two 24-bit halves. */
const halves = ([hi, lo]: readonly [number, number]): [number, number] => [
  ((hi & 0xffff) << 8) | (lo >>> 24),
  lo & LOW,
];

export class Chunker {
  readonly min: number;
  readonly avg: number;
  readonly max: number;
  private readonly maskS: [number, number];
  private readonly maskL: [number, number];

  constructor({ min, avg, max, level = 1 }: ChunkSizes) {
    if (!(min >= 64 && min <= avg && avg <= max && max <= 16 * MiB && avg >= 256 && avg <= 4 * MiB)) {
      throw new Error(`chunk sizes out of range: min ${min}, avg ${avg}, max ${max}`);
    }
    const bits = Math.round(Math.log2(avg));
    const small = MASKS[bits + level];
    const large = MASKS[bits - level];
    if (small === undefined || large === undefined || !(level >= 0 && level <= 3)) {
      throw new Error(`normalization level out of range: ${level}`);
    }
    this.min = min;
    this.avg = avg;
    this.max = max;
    this.maskS = halves(small);
    this.maskL = halves(large);
  }

  /**
   * The length of the chunk that starts at `start` in `data`, `end - start` bytes being what is left
   * (all of them when the file ends there; else at least `max`).
   */
  cut(data: Uint8Array, start: number, end: number): number {
    let remaining = end - start;
    if (remaining <= this.min) return remaining;
    let center = this.avg;
    if (remaining > this.max) remaining = this.max;
    else if (remaining < center) center = remaining;
    let hi = 0;
    let lo = 0;
    let [mHi, mLo] = this.maskS;
    let a = start + (this.min >>> 1) * 2;
    let limit = start + (center >>> 1) * 2;
    for (let phase = 0; phase < 2; phase += 1) {
      for (; a < limit; a += 2) {
        let byte = data[a] as number;
        lo = (lo << 1) + (GEAR_LO[byte] as number);
        hi = ((hi << 1) + (GEAR_HI[byte] as number) + (lo >>> 24)) & LOW;
        lo &= LOW;
        if ((lo & mLo) === 0 && (hi & mHi) === 0) return a - start;
        byte = data[a + 1] as number;
        lo = (lo << 1) + (GEAR_LO[byte] as number);
        hi = ((hi << 1) + (GEAR_HI[byte] as number) + (lo >>> 24)) & LOW;
        lo &= LOW;
        if ((lo & mLo) === 0 && (hi & mHi) === 0) return a + 1 - start;
      }
      [mHi, mLo] = this.maskL;
      limit = start + (remaining >>> 1) * 2;
    }
    return remaining;
  }
}

/** A file cut into chunks: `[sha256, size]` each, in order, and the whole file's size and SHA-256. */
export interface ChunkedFile {
  size: number;
  sha256: string;
  chunks: [string, number][];
}

/** Bytes asked of the file per read: large reads, few calls. */
const READ_BYTES = 16 * MiB;

/**
 * Cuts the file at `file` into chunks, hashing each (and the whole file) while reading it once in
 * large reads. `onBytes` is told each read's size (progress).
 */
export async function chunkFile(
  file: string,
  chunker: Chunker,
  onBytes: (bytes: number) => void = () => undefined,
): Promise<ChunkedFile> {
  const handle = await fs.open(file, 'r');
  try {
    // No larger than the file needs (plus one byte to see its end): small files make small buffers.
    const buffer = Buffer.allocUnsafe(Math.min(READ_BYTES + chunker.max, (await handle.stat()).size + 1));
    const whole = createHash('sha256');
    const chunks: [string, number][] = [];
    let start = 0;
    let end = 0;
    let size = 0;
    let eof = false;
    for (;;) {
      if (!eof && end - start < chunker.max) {
        buffer.copy(buffer, 0, start, end);
        end -= start;
        start = 0;
        while (!eof && end < buffer.length) {
          const { bytesRead } = await handle.read(buffer, end, buffer.length - end, null);
          if (bytesRead === 0) eof = true;
          whole.update(buffer.subarray(end, end + bytesRead));
          end += bytesRead;
          size += bytesRead;
          onBytes(bytesRead);
        }
      }
      if (start === end) break;
      const length = chunker.cut(buffer, start, end);
      chunks.push([
        createHash('sha256')
          .update(buffer.subarray(start, start + length))
          .digest('hex'),
        length,
      ]);
      start += length;
    }
    return { size, sha256: whole.digest('hex'), chunks };
  } finally {
    await handle.close();
  }
}
