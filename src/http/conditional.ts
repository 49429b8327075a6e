import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/** Rendered answers are shared buffers: their tags are computed once. */
const bufferTags = new WeakMap<Buffer, string>();

function tagOf(payload: string | Buffer): string {
  if (Buffer.isBuffer(payload)) {
    let tag = bufferTags.get(payload);
    if (tag === undefined) {
      tag = `W/"${createHash('sha1').update(payload).digest('base64url')}"`;
      bufferTags.set(payload, tag);
    }
    return tag;
  }
  return `W/"${createHash('sha1').update(payload).digest('base64url')}"`;
}

function matches(header: string | undefined, tag: string): boolean {
  if (header === undefined) return false;
  const bare = tag.slice(2);
  return header.split(',').some((t) => {
    const candidate = t.trim();
    return candidate === '*' || candidate === tag || candidate === bare || candidate.replace(/^W\//, '') === bare;
  });
}

function applies(request: FastifyRequest, reply: FastifyReply, payload: unknown): payload is string | Buffer {
  if (request.method !== 'GET' && request.method !== 'HEAD') return false;
  if (reply.statusCode !== 200) return false;
  if (typeof payload !== 'string' && !Buffer.isBuffer(payload)) return false;
  if (reply.hasHeader('etag') || reply.hasHeader('cache-control')) return false;
  const type = reply.getHeader('content-type');
  if (typeof type !== 'string' || !type.startsWith('application/json')) return false;
  return !request.url.startsWith('/api/admin/');
}

/**
 * Installed on the scopes of public reads. Public JSON reads carry an `ETag` and `Cache-Control: no-cache`: clients and CDNs may keep a
 * copy but revalidate every time, so an admin change is still seen on the next read, while an
 * unchanged answer (the whole addon catalogue, say) costs a 304 instead of its bytes.
 */
export function installConditionalGet(app: FastifyInstance): void {
  app.addHook('onSend', (request, reply, payload, done) => {
    if (!applies(request, reply, payload)) return done(null, payload);
    const tag = tagOf(payload);
    reply.header('ETag', tag).header('Cache-Control', 'no-cache');
    if (matches(request.headers['if-none-match'], tag)) {
      reply.code(304);
      reply.removeHeader('content-length');
      return done(null, '');
    }
    return done(null, payload);
  });
}
