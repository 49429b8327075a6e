import fs from 'node:fs';
import path from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply } from 'fastify';

/** Where `vite build --config admin/vite.config.ts` writes the console (same from src/ and dist/). */
export const CONSOLE_DIST = path.resolve(import.meta.dirname, '../../../admin/dist');

/** The console's HTML may run its own bundled scripts only: nothing an article or addon text carries. */
const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: blob: http: https:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'self'",
  "frame-ancestors 'none'",
].join('; ');

const NOT_BUILT = `<!doctype html><meta charset="utf-8"><title>Admin console not built</title>
<h1>Admin console not built</h1>
<p>The service runs, but the admin console's files are missing (<code>admin/dist</code>).
Build them with <code>npm run build</code> (<code>npm start</code> does it), or run <code>npm run dev</code>
for the console with hot reload.</p>
<p>管理控制台尚未构建：请运行 <code>npm run build</code>（<code>npm start</code> 会自动构建）。</p>`;

/**
 * The admin console at `/admin`: hashed assets cached for a year, `index.html` revalidated every time,
 * and every other `/admin/*` path answered with `index.html` so that client routes survive a reload.
 */
export function consoleRoutes(distDir: string = CONSOLE_DIST): FastifyPluginAsyncTypebox {
  return async (app) => {
    await app.register(fastifyStatic, { root: distDir, serve: false });

    function sendIndex(reply: FastifyReply) {
      if (!fs.existsSync(path.join(distDir, 'index.html'))) {
        return reply.code(503).header('Cache-Control', 'no-store').type('text/html; charset=utf-8').send(NOT_BUILT);
      }
      return reply
        .header('Cache-Control', 'no-cache')
        .header('Content-Security-Policy', CONSOLE_CSP)
        .header('X-Frame-Options', 'DENY')
        .sendFile('index.html', distDir, { cacheControl: false });
    }

    const handler = async (request: { params: unknown }, reply: FastifyReply) => {
      const wanted = ((request.params as { '*'?: string })['*'] ?? '').replace(/^\/+/, '');
      if (wanted !== '' && wanted !== 'index.html') {
        const file = path.resolve(distDir, wanted);
        if (file.startsWith(distDir + path.sep) && fs.statSync(file, { throwIfNoEntry: false })?.isFile()) {
          const immutable = wanted.startsWith('assets/');
          return reply
            .header('Cache-Control', immutable ? 'public, max-age=31536000, immutable' : 'public, max-age=300')
            .sendFile(wanted, distDir, { cacheControl: false });
        }
        // A missing asset is a 404, not the app shell (a stale tab asking for an old bundle).
        if (/\.[a-z0-9]+$/i.test(wanted) && wanted.startsWith('assets/')) {
          return reply.code(404).send({ error: `no console file ${wanted}` });
        }
      }
      return sendIndex(reply);
    };

    const schema = { hide: true } as const;
    app.get('/admin', { schema }, handler);
    app.get('/admin/*', { schema }, handler);
  };
}
