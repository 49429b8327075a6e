/*
 * Serving the game client's chunks (issue 43), against serving one big file, from the same service:
 *   GAME_BENCH_MB=256 npx tsx bench/game-chunks.mts
 * Starts the service (from its sources, SQLite, local store) as a child process, publishes a build of
 * GAME_BENCH_MB MiB of random bytes (a few MPQ-like files cut into 1 MiB chunks) and stores the same
 * bytes as one file. Then, ROUNDS times each, a launcher-like reader fetches every chunk of the build
 * over 4 keep-alive connections (checking each against its name), and a plain reader downloads the
 * one file over one connection (hashing it); prints both throughputs, their ratio (aim ≥ 0.8) and the
 * service's peak RSS while each ran. The 2 GiB is GAME_BENCH_MB=2048; the nginx comparison
 * (offload against nginx alone) needs nginx and is not made here.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { startServer } from '../test/helpers/process.js';

const MIB = 1024 * 1024;
const totalMb = Number(process.env.GAME_BENCH_MB ?? 256);
const ROUNDS = Number(process.env.GAME_BENCH_ROUNDS ?? 3);
const FILES = 4;
const password = 'bench-password-1';

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-game-bench-'));
const server = await startServer({ DATA_DIR: dataDir, ADMIN_PASSWORD: password, LOGIN_RATE_LIMIT: '1000' });
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** GETs `url` through `agent` and answers the SHA-256 of the body, hashed as it streams. */
function hashOf(url: string, agent: http.Agent): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        if (res.statusCode !== 200) reject(new Error(`${url} → ${res.statusCode}`));
        const hash = createHash('sha256');
        res.on('data', (part: Buffer) => hash.update(part));
        res.on('end', () => resolve(hash.digest('hex')));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

/** The service's resident memory now (Linux), in MiB. */
const rssMb = (): number => {
  const status = fs.readFileSync(`/proc/${server.child.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
};

async function measure(name: string, bytes: number, run: () => Promise<void>): Promise<number> {
  const rates: number[] = [];
  const before = rssMb();
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb())), 50);
  for (let round = 0; round < ROUNDS; round += 1) {
    const started = performance.now();
    await run();
    rates.push(bytes / MIB / ((performance.now() - started) / 1000));
  }
  clearInterval(sampler);
  const median = [...rates].sort((a, b) => a - b)[Math.floor(rates.length / 2)] ?? 0;
  console.log(
    `${name}: ${median.toFixed(0)} MiB/s (rounds ${rates.map((r) => r.toFixed(0)).join(', ')}), service RSS ${before.toFixed(0)} MiB before, at most ${peak.toFixed(0)} MiB while loaded`,
  );
  return median;
}

try {
  const login = await fetch(`${server.url}/api/admin/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', password }),
  });
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const files: { path: string; size: number; sha256: string; chunks: [string, number][] }[] = [];
  const names: string[] = [];
  const whole = createHash('sha256');
  const wholeParts: Buffer[] = [];
  for (let f = 0; f < FILES; f += 1) {
    const content = randomBytes((totalMb / FILES) * MIB);
    wholeParts.push(content);
    whole.update(content);
    const chunks: [string, number][] = [];
    for (let at = 0; at < content.length; at += MIB) {
      const piece = content.subarray(at, at + MIB);
      const name = sha256(piece);
      const res = await fetch(`${server.url}/api/admin/game/chunks/${name}`, {
        method: 'PUT',
        headers: { cookie, 'content-type': 'application/octet-stream' },
        body: new Uint8Array(piece),
      });
      if (res.status !== 201) throw new Error(`chunk → ${res.status}: ${await res.text()}`);
      chunks.push([name, piece.length]);
      names.push(name);
    }
    files.push({ path: `Data/common-${f}.MPQ`, size: content.length, sha256: sha256(content), chunks });
  }
  const manifest = JSON.stringify({ format: 1, app: 'app', version: '1.0', buildCode: 1, files });
  const created = await fetch(`${server.url}/api/admin/game/builds`, {
    method: 'POST',
    headers: { cookie, 'content-type': 'application/json' },
    body: JSON.stringify({ version: '1.0', buildCode: 1, manifest }),
  });
  if (created.status !== 201) throw new Error(`build → ${created.status}: ${await created.text()}`);
  const form = new FormData();
  form.append('file', new Blob(wholeParts.map((part) => new Uint8Array(part))), 'client.bin');
  wholeParts.length = 0;
  const uploaded = await fetch(`${server.url}/api/upload`, { method: 'POST', headers: { cookie }, body: form });
  const { filePath } = (await uploaded.json()) as { filePath: string };
  const wholeSha = whole.digest('hex');
  const bytes = totalMb * MIB;
  console.log(`${totalMb} MiB: ${names.length} chunks of 1 MiB in ${FILES} files, and one file of the same bytes`);

  const four = new http.Agent({ keepAlive: true, maxSockets: 4 });
  /** Every chunk of the build, checked against its name, by `readers` readers sharing `agent`. */
  const readChunks = (agent: http.Agent, readers: number) => async () => {
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < names.length; i = next++) {
        const name = names[i] as string;
        if ((await hashOf(`${server.url}/api/game/chunks/${name}`, agent)) !== name) {
          throw new Error(`chunk ${name} does not match its name`);
        }
      }
    };
    await Promise.all(Array.from({ length: readers }, worker));
  };
  const chunkRate = await measure('chunks over 4 keep-alive connections', bytes, readChunks(four, 4));
  const one = new http.Agent({ keepAlive: true, maxSockets: 1 });
  await measure('chunks over 1 keep-alive connection', bytes, readChunks(one, 1));
  const fileRate = await measure('one file over one connection', bytes, async () => {
    if ((await hashOf(`${server.url}${filePath}`, one)) !== wholeSha) throw new Error('the file does not match');
  });
  console.log(`chunks / one file: ${(chunkRate / fileRate).toFixed(2)} (aim ≥ 0.8)`);
  four.destroy();
  one.destroy();
} finally {
  await server.stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
