const OPEN = Buffer.from('[');
const COMMA = Buffer.from(',');
const CLOSE = Buffer.from(']');

/** A JSON array of elements already in JSON, as parts (the elements themselves, not copies). */
export function jsonArray<T>(items: readonly T[], element: (item: T) => Buffer): Buffer[] {
  const parts: Buffer[] = [OPEN];
  items.forEach((item, i) => {
    if (i > 0) parts.push(COMMA);
    parts.push(element(item));
  });
  parts.push(CLOSE);
  return parts;
}

/**
 * Elements per block: about half a megabyte of addons. Lists are cut at the same places on every
 * instance, so the same list gets the same validator everywhere (see `etagOfParts`).
 */
export const BLOCK_SIZE = 256;

/**
 * How a list's elements are rendered, and what tells that an element's JSON would change: its
 * identity (compared with ===) and its stamp (the counters it shows).
 */
export interface ElementRenderer<T> {
  readonly identity: (item: T) => unknown;
  readonly stamp: (item: T) => number;
  readonly render: (item: T) => string;
}

/** Consecutive elements of a list in JSON (joined by commas), with the identity and stamp of each. */
interface Block {
  readonly identities: readonly unknown[];
  readonly stamps: Float64Array;
  readonly json: Buffer;
}

function holds<T>(block: Block | undefined, run: readonly T[], elements: ElementRenderer<T>): block is Block {
  return (
    block !== undefined &&
    block.identities.length === run.length &&
    run.every((item, i) => block.identities[i] === elements.identity(item) && block.stamps[i] === elements.stamp(item))
  );
}

/**
 * Whole-list answers of one catalogue (content version) in blocks of `BLOCK_SIZE` consecutive
 * elements, each rendered once and kept across counter snapshots until one of its elements
 * changes (another element in its place, or other counters shown). A new snapshot then re-renders the blocks
 * whose addons were downloaded, not the list; the answer is the blocks themselves (streamed, and
 * compressed block by block, see `RenderedJson`), so renderings share their unchanged blocks.
 * Lists are kept while they fit in `budget` bytes, the least recently used dropped first.
 */
export class ListBlocks {
  private readonly lists = new Map<string, Block[]>();
  private bytes = 0;

  constructor(private readonly budget: number) {}

  /** The list `key` of `items` as array parts, its blocks reused where their elements are unchanged. */
  parts<T>(key: string, items: readonly T[], elements: ElementRenderer<T>): Buffer[] {
    const held = this.lists.get(key) ?? [];
    this.lists.delete(key);
    const blocks: Block[] = [];
    for (let start = 0; start < items.length; start += BLOCK_SIZE) {
      const run = items.slice(start, start + BLOCK_SIZE);
      const kept = held[blocks.length];
      blocks.push(
        holds(kept, run, elements)
          ? kept
          : {
              identities: run.map(elements.identity),
              stamps: Float64Array.from(run, elements.stamp),
              json: Buffer.from(run.map(elements.render).join(',')),
            },
      );
    }
    this.bytes += sizeOf(blocks) - sizeOf(held);
    this.lists.set(key, blocks);
    for (const [oldest, list] of this.lists) {
      if (this.bytes <= this.budget || oldest === key) break;
      this.lists.delete(oldest);
      this.bytes -= sizeOf(list);
    }
    return jsonArray(blocks, (b) => b.json);
  }
}

function sizeOf(blocks: readonly Block[]): number {
  return blocks.reduce((n, b) => n + b.json.length, 0);
}
