/*
 * Serving the game client's chunks (issue 43), against serving one big file, from the same service:
 *   GAME_BENCH_MB=256 npx tsx bench/game-chunks.mts
 * Starts the service (from its sources, SQLite, local store) as a child process, publishes a build of
 * GAME_BENCH_MB MiB of random bytes (a few MPQ-like files cut into 1 MiB chunks) and stores the same
 * bytes as one file. Then, in each of ROUNDS rounds (the ways taking turns, so that the shared
 * machine's load falls on all of them alike), a launcher-like reader fetches every chunk of the build
 * over 4 keep-alive connections, then over 1, and a plain reader downloads the one file over one
 * connection; every reader hashes every byte it gets (each chunk checked against its name, the file
 * against its SHA-256). Prints each way's median throughput, the service's CPU time per MiB and peak
 * RSS while it ran, and the median of the rounds' ratios chunks / one file (aim ≥ 0.8).
 *
 * Where nginx is installed (test/helpers/nginx.ts; TEST_NGINX=0 skips it), a second instance of the
 * service on the same data with DOWNLOAD_OFFLOAD=x-accel-redirect sits behind nginx, and the same
 * reader fetches the chunks through it, against nginx serving the same chunk files itself (aim ≥ 0.9).
 * The issue's 2 GiB is GAME_BENCH_MB=2048.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { nginxWanted, startNginx } from '../test/helpers/nginx.js';
import { loginCookie, startServer, type ServerProcess } from '../test/helpers/process.js';

const MIB = 1024 * 1024;
const totalMb = Number(process.env.GAME_BENCH_MB ?? 256);
const ROUNDS = Number(process.env.GAME_BENCH_ROUNDS ?? 5);
const FILES = 4;
const password = 'bench-password-1';
const OFFLOAD_PREFIX = '/internal-uploads/';

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-game-bench-'));
const env = { DATA_DIR: dataDir, ADMIN_PASSWORD: password, LOGIN_RATE_LIMIT: '1000' };
const server = await startServer(env);
const stops: (() => Promise<unknown>)[] = [() => server.stop()];
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

/** A process's resident memory (MiB) and CPU time so far (ms, user and system), from Linux's /proc. */
function usage(pid: number): { rssMb: number; cpuMs: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  // The fields after the command's name (which ends with the last ')'): utime and stime are 14th and 15th.
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { rssMb: Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024, cpuMs: (ticks * 1000) / 100 };
}

interface Way {
  name: string;
  /** The process serving it, whose CPU and memory are measured (null: nginx alone). */
  pid: number | null;
  run: () => Promise<void>;
  rates: number[];
  cpuMsPerMib: number[];
  rssBefore: number;
  rssPeak: number;
}

const way = (name: string, child: ServerProcess | null, run: () => Promise<void>): Way => ({
  name,
  pid: child?.child.pid ?? null,
  run,
  rates: [],
  cpuMsPerMib: [],
  rssBefore: Infinity,
  rssPeak: 0,
});

const median = (values: readonly number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

/** One run of `w` over `bytes`, its throughput, CPU and memory recorded. */
async function runOnce(w: Way, bytes: number): Promise<void> {
  const before = w.pid === null ? null : usage(w.pid);
  const sampler =
    w.pid === null ? null : setInterval(() => (w.rssPeak = Math.max(w.rssPeak, usage(w.pid as number).rssMb)), 50);
  const started = performance.now();
  await w.run();
  const seconds = (performance.now() - started) / 1000;
  if (sampler !== null) clearInterval(sampler);
  w.rates.push(bytes / MIB / seconds);
  if (before !== null && w.pid !== null) {
    const after = usage(w.pid);
    w.rssBefore = Math.min(w.rssBefore, before.rssMb);
    w.rssPeak = Math.max(w.rssPeak, after.rssMb);
    w.cpuMsPerMib.push((after.cpuMs - before.cpuMs) / (bytes / MIB));
  }
}

function report(w: Way): void {
  const service =
    w.pid === null
      ? ''
      : `, service CPU ${median(w.cpuMsPerMib).toFixed(2)} ms/MiB, RSS ${w.rssBefore.toFixed(0)} MiB before, at most ${w.rssPeak.toFixed(0)} MiB`;
  console.log(
    `${w.name}: ${median(w.rates).toFixed(0)} MiB/s (rounds ${w.rates.map((r) => r.toFixed(0)).join(', ')})${service}`,
  );
}

/** The median over rounds of `a`'s throughput over `b`'s in the same round. */
function ratio(a: Way, b: Way, aim: number): void {
  const ratios = a.rates.map((rate, i) => rate / (b.rates[i] as number));
  console.log(
    `${a.name} / ${b.name}: ${median(ratios).toFixed(2)} (rounds ${ratios.map((r) => r.toFixed(2)).join(', ')}; aim ≥ ${aim})`,
  );
}

try {
  const cookie = await loginCookie(server.url, password);
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
  const one = new http.Agent({ keepAlive: true, maxSockets: 1 });
  stops.push(async () => {
    four.destroy();
    one.destroy();
  });
  /** Every chunk of the build (`url` of its name), checked against its name, by `readers` readers sharing `agent`. */
  const readChunks = (url: (name: string) => string, agent: http.Agent, readers: number) => async () => {
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < names.length; i = next++) {
        const name = names[i] as string;
        if ((await hashOf(url(name), agent)) !== name) throw new Error(`chunk ${name} does not match its name`);
      }
    };
    await Promise.all(Array.from({ length: readers }, worker));
  };
  const chunkPath = (name: string) => `/api/game/chunks/${name}`;
  const chunks4 = way(
    'chunks over 4 keep-alive connections',
    server,
    readChunks((n) => server.url + chunkPath(n), four, 4),
  );
  const chunks1 = way(
    'chunks over 1 keep-alive connection',
    server,
    readChunks((n) => server.url + chunkPath(n), one, 1),
  );
  const file = way('one file over one connection', server, async () => {
    if ((await hashOf(`${server.url}${filePath}`, one)) !== wholeSha) throw new Error('the file does not match');
  });
  const ways = [chunks4, chunks1, file];

  let offloaded: Way | null = null;
  let nginxAlone: Way | null = null;
  if (nginxWanted()) {
    const offloading = await startServer({
      ...env,
      DOWNLOAD_OFFLOAD: 'x-accel-redirect',
      DOWNLOAD_OFFLOAD_PREFIX: OFFLOAD_PREFIX,
    });
    stops.push(() => offloading.stop());
    const nginx = await startNginx({
      upstream: `127.0.0.1:${offloading.port}`,
      storeRoot: path.join(dataDir, 'uploads'),
      offloadPrefix: OFFLOAD_PREFIX,
    });
    stops.push(() => nginx.stop());
    // The offloaded answer is the service's: its ETag and immutable caching, nginx's bytes.
    const probe = await fetch(nginx.url + chunkPath(names[0] as string));
    const headers = `${probe.status} ${probe.headers.get('etag')} ${probe.headers.get('cache-control')}`;
    if (headers !== `200 "${names[0]}" public, max-age=31536000, immutable`) throw new Error(`offloaded: ${headers}`);
    await probe.arrayBuffer();
    offloaded = way(
      'chunks through nginx (offload), 4 connections',
      offloading,
      readChunks((n) => nginx.url + chunkPath(n), four, 4),
    );
    // The store's own layout: what a mirror of game-chunks/ serves.
    nginxAlone = way(
      'chunks from nginx alone, 4 connections',
      null,
      readChunks((n) => `${nginx.directUrl}game-chunks/${n.slice(0, 2)}/${n}`, four, 4),
    );
    ways.push(offloaded, nginxAlone);
  }

  for (let round = 0; round < ROUNDS; round += 1) {
    for (const w of ways) await runOnce(w, bytes);
  }
  for (const w of ways) report(w);
  ratio(chunks4, file, 0.8);
  if (offloaded !== null && nginxAlone !== null) ratio(offloaded, nginxAlone, 0.9);
} finally {
  for (const stop of stops.reverse()) await stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
