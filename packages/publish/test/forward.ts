import http from 'node:http';

/** Forwards one request to the service at `base` as it came, counting the bytes of PATCH and PUT bodies (uploads). */
export function forward(
  base: URL,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  countUploadBytes: (bytes: number) => void,
): void {
  const upstream = http.request(
    { host: base.hostname, port: base.port, method: req.method, path: req.url, headers: req.headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on('error', () => res.destroy());
  req.on('data', (chunk: Buffer) => {
    if (req.method === 'PATCH' || req.method === 'PUT') countUploadBytes(chunk.length);
  });
  req.pipe(upstream);
}
