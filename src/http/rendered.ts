import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
import { setImmediate } from 'node:timers/promises';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { FastifyReply, FastifyRequest } from 'fastify';

export type Encoding = 'br' | 'gzip';

/** Smaller answers are sent as they are: compressing them saves less than it costs. */
export const COMPRESS_MIN_BYTES = 1024;

/**
 * Brotli quality 5: on JSON it is about as fast as gzip level 6 and a quarter smaller; 11 would be
 * 50 times slower for a few more percent. gzip keeps its default level.
 */
const BROTLI_QUALITY = 5;

/** The parts a streamed answer was made from (see `sendRendered`): what its signature covers. */
const streamed = new WeakMap<Readable, readonly Buffer[]>();

/** The parts of a large answer's stream made here, else undefined. */
export function streamedParts(payload: unknown): readonly Buffer[] | undefined {
  return payload instanceof Readable ? streamed.get(payload) : undefined;
}

/** Each part's raw deflate segment (see `segmentOf`), made once and kept as long as the part. */
const segments = new WeakMap<Buffer, Promise<Buffer>>();

/**
 * A part compressed on its own as raw deflate, ended with a sync flush (on a byte boundary, without
 * a final block): such segments, laid end to end, are one valid deflate stream, so a large answer's
 * gzip form is assembled from its parts' segments, and a part shared by many renderings (a block of
 * list elements that did not change) is compressed once for all of them.
 */
function segmentOf(part: Buffer): Promise<Buffer> {
  let found = segments.get(part);
  if (found === undefined) {
    found = promisify(zlib.deflateRaw)(part, { finishFlush: zlib.constants.Z_SYNC_FLUSH });
    found.catch(() => segments.delete(part));
    segments.set(part, found);
  }
  return found;
}

/** gzip's header (RFC 1952: deflate, no name, no time) and the deflate stream's final, empty block. */
const GZIP_HEADER = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
const FINAL_BLOCK = zlib.deflateRawSync(Buffer.alloc(0));
/** The CRC of a large answer is computed in runs of this many bytes, letting other requests in between. */
const CRC_RUN_BYTES = 8 * 1024 * 1024;

/**
 * gzip of parts from their deflate segments, as parts: header, segments, final block, CRC-32 and
 * length of the whole (so the gzip form too is streamed rather than copied into one buffer).
 */
async function gzipOfParts(parts: readonly Buffer[]): Promise<Buffer[]> {
  const deflated = await Promise.all(parts.map(segmentOf));
  let crc = 0;
  let length = 0;
  let run = 0;
  for (const part of parts) {
    // (Node 20's crc32 of an empty buffer need not give back the value passed in.)
    if (part.length > 0) crc = zlib.crc32(part, crc);
    length += part.length;
    run += part.length;
    if (run >= CRC_RUN_BYTES) {
      run = 0;
      await setImmediate();
    }
  }
  const trailer = Buffer.alloc(8);
  trailer.writeUInt32LE(crc >>> 0, 0);
  trailer.writeUInt32LE(length % 2 ** 32, 4);
  return [GZIP_HEADER, ...deflated, FINAL_BLOCK, trailer];
}

/**
 * An answer rendered to JSON once, with its compressed forms made on first demand (off the event
 * loop, in zlib's thread pool) and kept with it: every later request for the same answer and
 * encoding sends the same bytes, so compression costs once per rendered answer, never per request.
 *
 * A large answer is kept as the parts it was assembled from (`parts`: blocks of a list's elements,
 * which its renderer keeps and reuses while they do not change) and streamed from them, rather than
 * copied into one buffer per rendering: clients still reading an older rendering then pin only the
 * parts that changed. It is offered in gzip only, assembled from its parts' deflate segments (see
 * `segmentOf`) and streamed too; brotli streams cannot be assembled from pieces, and compressing
 * the whole anew for every rendering would cost seconds. Such an answer carries its validator
 * (`large`), made when it was rendered, because the hook that adds one reads whole bodies only (the
 * signing hook reads the parts of its stream, see `streamedParts`).
 */
export class RenderedJson {
  private readonly encoded = new Map<Encoding, Promise<Buffer>>();
  private gzipped: Promise<Buffer[]> | null = null;
  readonly length: number;

  constructor(
    readonly parts: readonly Buffer[],
    /** Headers that belong to this answer (paging: `Link`, `X-Total-Count`). */
    readonly headers: Readonly<Record<string, string>> = {},
    /** A large answer's weak ETag (several parts); a one-part answer gets its own from the hooks. */
    readonly large: { readonly etag: string } | null = null,
  ) {
    this.length = parts.reduce((n, part) => n + part.length, 0);
  }

  static of(body: Buffer, headers: Readonly<Record<string, string>> = {}): RenderedJson {
    return new RenderedJson([body], headers);
  }

  /** The body in one buffer: the answer itself when it is one part, else a copy made now (not kept). */
  body(): Buffer {
    return this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts);
  }

  /**
   * Bytes held for this answer and its compressed forms (br and gzip of JSON are each well under a
   * tenth of it); a large answer's parts and their deflate segments are its renderer's blocks, which
   * their owner counts.
   */
  get bytes(): number {
    return this.large === null ? Math.ceil(this.length * 1.25) : 0;
  }

  /** The encodings this answer is offered in, best first. */
  get encodings(): readonly Encoding[] {
    return this.large === null ? ['br', 'gzip'] : ['gzip'];
  }

  /** The answer compressed whole (answers that are not large). */
  compressed(encoding: Encoding): Promise<Buffer> {
    let found = this.encoded.get(encoding);
    if (found === undefined) {
      const compressor =
        encoding === 'br'
          ? zlib.createBrotliCompress({
              params: {
                [zlib.constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
                [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
                [zlib.constants.BROTLI_PARAM_SIZE_HINT]: this.length,
              },
            })
          : zlib.createGzip();
      found = buffer(Readable.from(this.parts).pipe(compressor));
      // A failure is not kept: the next request tries again (and this one is sent uncompressed).
      found.catch(() => this.encoded.delete(encoding));
      this.encoded.set(encoding, found);
    }
    return found;
  }

  /** A large answer's gzip form, in parts (see `gzipOfParts`). */
  gzipParts(): Promise<Buffer[]> {
    if (this.gzipped === null) {
      const made = gzipOfParts(this.parts);
      made.catch(() => this.gzipped === made && (this.gzipped = null));
      this.gzipped = made;
    }
    return this.gzipped;
  }
}

/** Each part's SHA-1, made once and kept as long as the part. */
const digests = new WeakMap<Buffer, Buffer>();

/**
 * The weak validator of a body in parts: a hash of its parts' hashes (each made once per part), so
 * a new rendering that reuses most parts costs a hash of their digests, not of the whole body. The
 * parts are cut the same way on every instance, so every instance gives the same body the same tag.
 */
export function etagOfParts(parts: readonly Buffer[]): string {
  const hash = createHash('sha1');
  for (const part of parts) {
    let digest = digests.get(part);
    if (digest === undefined) {
      digest = createHash('sha1').update(part).digest();
      digests.set(part, digest);
    }
    hash.update(digest);
  }
  return `W/"${hash.digest('base64url')}"`;
}

/**
 * The encoding to send for an `Accept-Encoding` header: `br` before `gzip` when both are
 * acceptable (RFC 9110 §12.5.3: q-values, `*`, `identity`), else null (identity).
 */
export function chooseEncoding(
  header: string | undefined,
  offered: readonly Encoding[] = ['br', 'gzip'],
): Encoding | null {
  if (header === undefined || header === '') return null;
  const q = new Map<string, number>();
  for (const part of header.split(',')) {
    const [name = '', ...params] = part.trim().toLowerCase().split(';');
    if (name === '') continue;
    const qParam = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const value = qParam === undefined ? 1 : Number(qParam.slice(2));
    q.set(name.trim(), Number.isFinite(value) ? value : 0);
  }
  const weight = (encoding: Encoding) => q.get(encoding) ?? q.get('*') ?? 0;
  const best = offered.filter((e) => weight(e) > 0);
  if (best.length === 0) return null;
  return best.reduce((a, b) => (weight(b) > weight(a) ? b : a));
}

/**
 * Sends a rendered JSON answer, compressed when the client accepts it and the answer is large
 * enough, bypassing the route's serializer (the route keeps its response schema for the OpenAPI
 * document and tests; the renderer is what must follow it).
 */
export async function sendRendered(
  request: FastifyRequest,
  reply: FastifyReply,
  rendered: RenderedJson,
): Promise<FastifyReply> {
  const vary = reply.getHeader('vary');
  reply
    .type('application/json; charset=utf-8')
    .header('Vary', vary ? `${String(vary)}, Accept-Encoding` : 'Accept-Encoding');
  for (const [name, value] of Object.entries(rendered.headers)) reply.header(name, value);
  const encoding =
    rendered.length >= COMPRESS_MIN_BYTES
      ? chooseEncoding(request.headers['accept-encoding'], rendered.encodings)
      : null;
  const { large } = rendered;
  if (large === null) {
    const body = encoding === null ? null : await rendered.compressed(encoding).catch(() => null);
    if (body !== null) return reply.header('Content-Encoding', encoding as Encoding).send(body);
    return reply.send(rendered.body());
  }
  // A large answer in parts: its validator is checked here, and its parts (or its gzip form's) streamed.
  const gzip = encoding === 'gzip' ? await rendered.gzipParts().catch(() => null) : null;
  const etag = gzip === null ? large.etag : `${large.etag.slice(0, -1)}.gz"`;
  reply.header('ETag', etag).header('Cache-Control', 'no-cache');
  const match = request.headers['if-none-match'];
  if (typeof match === 'string' && match.split(',').some((tag) => tag.trim() === etag || tag.trim() === '*')) {
    return reply.code(304).send();
  }
  const parts = gzip ?? rendered.parts;
  if (gzip !== null) reply.header('Content-Encoding', 'gzip');
  const stream = Readable.from(parts);
  streamed.set(stream, parts);
  return reply
    .header(
      'Content-Length',
      parts.reduce((n, part) => n + part.length, 0),
    )
    .send(stream);
}
