/**
 * The bare baseline: a plain `node:http` server. `/?bytes=N` answers constant JSON padded to N bytes,
 * matching the size of the service's answer being compared; `/file/<key>` streams a file of the
 * store (`FILE_ROOT`) with `fs.createReadStream`, as the smallest Node file server would.
 *
 * `BASELINE=fastify`: `/?bytes=N` answered by Fastify alone instead (one route, no plugin or hook,
 * logging set as the service sets it): the framework's own ceiling, for reading the service's ratios.
 *
 * Plain JavaScript: it runs without a TypeScript loader, like the built service it is compared with.
 */
/* global process, Buffer */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

/** @type {Map<number, Buffer>} */
const bodies = new Map();
/** @type {Map<string, number>} */
const sizes = new Map();
const fileRoot = process.env.FILE_ROOT ?? '.';

/** @param {number} bytes */
function bodyOf(bytes) {
  let body = bodies.get(bytes);
  if (!body) {
    const head = '{"ok":true,"pad":"';
    const tail = '"}';
    body = Buffer.from(head + 'x'.repeat(Math.max(0, bytes - head.length - tail.length)) + tail);
    bodies.set(bytes, body);
  }
  return body;
}

/**
 * @param {http.ServerResponse} res
 * @param {string} key
 */
function sendFile(res, key) {
  const file = path.join(fileRoot, key);
  let size = sizes.get(file);
  if (size === undefined) {
    size = fs.statSync(file).size;
    sizes.set(file, size);
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
  fs.createReadStream(file).pipe(res);
}

/** The constant JSON of `/?bytes=N` and the store's files, straight from node:http. */
function bareServer() {
  return http.createServer((req, res) => {
    const url = req.url ?? '/';
    if (url.startsWith('/file/')) return sendFile(res, decodeURIComponent(url.slice('/file/'.length)));
    const bytes = Number(/[?&]bytes=(\d+)/.exec(url)?.[1] ?? 64);
    req.resume();
    req.on('end', () => {
      const body = bodyOf(bytes);
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': body.length });
      res.end(body);
    });
  });
}

/** The same constant JSON through Fastify with nothing else: what every route of the service starts from. */
async function fastifyServer() {
  const { default: Fastify, LogController } = await import('fastify');
  const app = Fastify({
    logger: { level: 'info' },
    logController: new LogController({ disableRequestLogging: true }),
  });
  // POST too: a JSON body parsed by Fastify's own parser, as a heartbeat's is (the fleet scenario).
  app.route({
    method: ['GET', 'POST'],
    url: '/',
    handler: (request, reply) => {
      const { bytes } = /** @type {{ bytes?: string }} */ (request.query);
      reply.type('application/json; charset=utf-8').send(bodyOf(Number(bytes ?? 64)));
    },
  });
  await app.ready();
  return app.server;
}

const server = process.env.BASELINE === 'fastify' ? await fastifyServer() : bareServer();
server.keepAliveTimeout = 72_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
