import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Api } from '../src/api.js';
import { FileUrlStorage } from '../src/state.js';
import { describeFile, uploadFile } from '../src/upload.js';

/** A server that accepts connections and never answers: the per-request deadline ends each attempt. */
let silent: net.Server;
let server: string;
let accepted = 0;
const sockets: net.Socket[] = [];
let dir: string;

beforeAll(async () => {
  silent = net.createServer((socket) => {
    accepted += 1;
    sockets.push(socket);
    socket.resume();
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  server = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lp-api-'));
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent.close(resolve));
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('the per-request deadline', () => {
  it('a JSON request to a server that never answers fails after its deadline, each attempt retried and logged', async () => {
    const lines: string[] = [];
    const api = new Api(server, 'token', (line) => lines.push(line), [0, 0], 500);
    accepted = 0;
    const started = Date.now();
    await expect(api.json('GET', '/api/admin/me')).rejects.toThrow('GET /api/admin/me: no answer within 0.5 s');
    expect(Date.now() - started).toBeLessThan(5000);
    expect(lines).toEqual([
      'retry 1/2 in 0 s: GET /api/admin/me: no answer within 0.5 s',
      'retry 2/2 in 0 s: GET /api/admin/me: no answer within 0.5 s',
    ]);
    expect(accepted).toBeGreaterThanOrEqual(1);
    api.close();
  });

  it("the default deadline is the launcher's, 30 s (a service that never answers costs 30 s an attempt, not 60)", async () => {
    const api = new Api(server, 'token', () => undefined, []);
    const started = Date.now();
    await expect(api.json('GET', '/api/admin/me')).rejects.toThrow('GET /api/admin/me: no answer within 30 s');
    expect(Date.now() - started).toBeGreaterThanOrEqual(29_000);
    expect(Date.now() - started).toBeLessThan(40_000);
    api.close();
  }, 60_000);

  it('so does a tus upload request (its own connections carry the deadline)', async () => {
    const lines: string[] = [];
    const api = new Api(server, 'token', (line) => lines.push(line), [0], 500);
    const file = path.join(dir, 'build.bin');
    fs.writeFileSync(file, 'bytes');
    const started = Date.now();
    await expect(
      uploadFile(api, await describeFile(file), {
        state: new FileUrlStorage(path.join(dir, 'state.json')),
        progress: () => undefined,
      }),
    ).rejects.toThrow(/no answer within 0.5 s/);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(lines).toEqual(['retry 1/1 in 0 s: POST /api/admin/uploads: no answer within 0.5 s']);
    api.close();
  });
});
