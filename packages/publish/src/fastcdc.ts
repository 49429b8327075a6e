/**
 * FastCDC content-defined chunking, the 2020 paper's algorithm (Xia et al., "The Design of Fast
 * Content-Defined Chunking for Data Deduplication Based Storage Systems"): the Gear hash, cut points
 * skipped below the minimum, normalized chunking and "rolling two bytes each time". Cut points are
 * those of the Rust `fastcdc` crate's `v2020` module (its gear table, masks and loop), checked against
 * that crate's published test vectors; no npm implementation of it is kept up. The 64-bit hash is held
 * as two 32-bit halves.
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
 * (how the crate's `table64` example makes its table). `GEAR_LS` is it shifted left one bit.
 */
const GEAR_HI = new Uint32Array(256);
const GEAR_LO = new Uint32Array(256);
const GEAR_LS_HI = new Uint32Array(256);
const GEAR_LS_LO = new Uint32Array(256);
for (let v = 0; v < 256; v += 1) {
  const digest = createHash('md5').update(Buffer.alloc(64, v)).digest();
  const hi = digest.readUInt32BE(0);
  const lo = digest.readUInt32BE(4);
  GEAR_HI[v] = hi;
  GEAR_LO[v] = lo;
  GEAR_LS_HI[v] = ((hi << 1) | (lo >>> 31)) >>> 0;
  GEAR_LS_LO[v] = (lo << 1) >>> 0;
}

/** The gear table's entry for a byte value, as a 64-bit integer (for tests against the published table). */
export function gear(value: number): bigint {
  return (BigInt(GEAR_HI[value] ?? 0) << 32n) | BigInt(GEAR_LO[value] ?? 0);
}

export class Chunker {
  readonly min: number;
  readonly avg: number;
  readonly max: number;
  private readonly maskS: readonly [number, number];
  private readonly maskL: readonly [number, number];
  private readonly maskSLs: readonly [number, number];
  private readonly maskLLs: readonly [number, number];

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
    this.maskS = small;
    this.maskL = large;
    const shifted = ([hi, lo]: readonly [number, number]) =>
      [((hi << 1) | (lo >>> 31)) >>> 0, (lo << 1) >>> 0] as const;
    this.maskSLs = shifted(small);
    this.maskLLs = shifted(large);
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
    const limit1 = center >>> 1;
    const limit2 = remaining >>> 1;
    let index = this.min >>> 1;
    let hi = 0;
    let lo = 0;
    let [mHi, mLo] = this.maskS;
    let [mLsHi, mLsLo] = this.maskSLs;
    let limit = limit1;
    for (let phase = 0; phase < 2; phase += 1) {
      for (; index < limit; index += 1) {
        const a = start + index * 2;
        // hash = (hash << 2) + GEAR_LS[data[a]]
        let byte = data[a] as number;
        let sum = ((lo << 2) >>> 0) + (GEAR_LS_LO[byte] as number);
        hi = (((hi << 2) | (lo >>> 30)) + (GEAR_LS_HI[byte] as number) + (sum > 0xffffffff ? 1 : 0)) >>> 0;
        lo = sum >>> 0;
        if ((lo & mLsLo) === 0 && (hi & mLsHi) === 0) return a - start;
        // hash += GEAR[data[a + 1]]
        byte = data[a + 1] as number;
        sum = lo + (GEAR_LO[byte] as number);
        hi = (hi + (GEAR_HI[byte] as number) + (sum > 0xffffffff ? 1 : 0)) >>> 0;
        lo = sum >>> 0;
        if ((lo & mLo) === 0 && (hi & mHi) === 0) return a + 1 - start;
      }
      [mHi, mLo] = this.maskL;
      [mLsHi, mLsLo] = this.maskLLs;
      limit = limit2;
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
    const buffer = Buffer.allocUnsafe(READ_BYTES + chunker.max);
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
