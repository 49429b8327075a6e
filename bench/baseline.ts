import http from 'node:http';

/**
 * The bare baseline: a plain `node:http` server answering constant JSON. `?bytes=N` pads the body
 * to N bytes so that it matches the size of the service's answer being compared.
 */
const bodies = new Map<number, Buffer>();

function bodyOf(bytes: number): Buffer {
  let body = bodies.get(bytes);
  if (!body) {
    const head = '{"ok":true,"pad":"';
    const tail = '"}';
    body = Buffer.from(head + 'x'.repeat(Math.max(0, bytes - head.length - tail.length)) + tail);
    bodies.set(bytes, body);
  }
  return body;
}

const server = http.createServer((req, res) => {
  const bytes = Number(/[?&]bytes=(\d+)/.exec(req.url ?? '')?.[1] ?? 64);
  req.resume();
  req.on('end', () => {
    const body = bodyOf(bytes);
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': body.length });
    res.end(body);
  });
});

server.keepAliveTimeout = 72_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
