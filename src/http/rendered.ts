import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { buffer } from 'node:stream/consumers';
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

/** The identity body of each compressed form: what signatures cover (clients verify what they decode). */
const identities = new WeakMap<Buffer, Buffer>();

/** The uncompressed body of a compressed answer made here, else undefined (the payload is its own body). */
export function identityBody(payload: Buffer): Buffer | undefined {
  return identities.get(payload);
}

/** The signatures of compressed forms of large answers (signed when rendered; see `RenderedJson`). */
const presigned = new WeakMap<Buffer, string>();

/** The `X-Signature` made for the body this compressed payload decodes to, when it was made in advance. */
export function presignedSignature(payload: Buffer): string | undefined {
  return presigned.get(payload);
}

/**
 * An answer rendered to JSON once, with its compressed forms made on first demand (off the event
 * loop, in zlib's thread pool) and kept with it: every later request for the same answer and
 * encoding sends the same bytes, so compression costs once per rendered answer, never per request.
 *
 * A large answer is kept as the parts it was assembled from (`parts`, e.g. a list's elements,
 * which its renderer keeps anyway) and streamed from them, rather than copied into one buffer per
 * rendering: clients still reading an older rendering then pin only the parts that changed. Such an
 * answer carries its validator and signature (`etag`, and `X-Signature` in `headers`), made when it
 * was rendered, because the hooks that add them read whole bodies only.
 */
export class RenderedJson {
  private readonly encoded = new Map<Encoding, Promise<Buffer>>();
  readonly length: number;

  constructor(
    readonly parts: readonly Buffer[],
    /** Headers that belong to this answer (paging: `Link`, `X-Total-Count`; a large one's signature). */
    readonly headers: Readonly<Record<string, string>> = {},
    /** A large answer's weak ETag and `X-Signature` (several parts); a one-part answer gets its own from the hooks. */
    readonly large: { readonly etag: string; readonly signature: string } | null = null,
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

  /** Bytes held for this answer and its compressed forms (br and gzip of JSON are each well under a tenth of it). */
  get bytes(): number {
    return Math.ceil(this.length * 1.25);
  }

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
      found.then(
        (compressed) => {
          if (this.large !== null) presigned.set(compressed, this.large.signature);
          else identities.set(compressed, this.body());
        },
        // A failure is not kept: the next request tries again (and this one is sent uncompressed).
        () => this.encoded.delete(encoding),
      );
      this.encoded.set(encoding, found);
    }
    return found;
  }
}

/** The weak validator of a body in parts, as the conditional-GET hook makes it for a whole body. */
export function etagOfParts(parts: readonly Buffer[]): string {
  const hash = createHash('sha1');
  for (const part of parts) hash.update(part);
  return `W/"${hash.digest('base64url')}"`;
}

/**
 * The encoding to send for an `Accept-Encoding` header: `br` before `gzip` when both are
 * acceptable (RFC 9110 §12.5.3: q-values, `*`, `identity`), else null (identity).
 */
export function chooseEncoding(header: string | undefined): Encoding | null {
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
  const best = (['br', 'gzip'] as const).filter((e) => weight(e) > 0);
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
  reply.type('application/json; charset=utf-8').header('Vary', vary ? `${String(vary)}, Accept-Encoding` : 'Accept-Encoding');
  for (const [name, value] of Object.entries(rendered.headers)) reply.header(name, value);
  const encoding = rendered.length >= COMPRESS_MIN_BYTES ? chooseEncoding(request.headers['accept-encoding']) : null;
  if (encoding !== null) {
    const body = await rendered.compressed(encoding).catch(() => null);
    if (body !== null) return reply.header('Content-Encoding', encoding).send(body);
  }
  const { large } = rendered;
  if (large === null) return reply.send(rendered.body());
  // A large answer in parts: its validator is checked here, and its parts streamed.
  reply.header('ETag', large.etag).header('Cache-Control', 'no-cache');
  const match = request.headers['if-none-match'];
  if (typeof match === 'string' && match.split(',').some((tag) => tag.trim() === large.etag || tag.trim() === '*')) {
    return reply.code(304).send();
  }
  return reply
    .header('X-Signature', large.signature)
    .header('Content-Length', rendered.length)
    .send(Readable.from(rendered.parts));
}
