/*
 * The launcher's game manager against the real service (in-process, one engine per run):
 *   TEST_ENGINE=sqlite npx tsx bench/game-client.mts   (npm run build -w patchwell-client first)
 * SIZE_MB (default 256) of game in one large file (1 MiB chunks) plus a small one; FILES (default
 * 10,000) small files for the quick verify. Each step runs the built `launcher-client game` command in
 * a child process: wall time and peak RSS (VmHWM). Baselines in the same run: `curl` fetching the same
 * chunks into one file over one connection, `sha256sum` over the same (cached) files.
 * The update rewrites 3 regions of 1 MiB, inserts 1 MiB in the large file and adds a 20 MiB file; the
 * new build is cut where a content-defined chunker would cut (the old boundaries, shifted past the
 * insertion): how files are cut is the publisher's business.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { highWaterKb } from '../src/modules/deltas/zstd.js';
import { buildTestApp } from '../test/helpers/app.js';
import { putChunk } from '../test/helpers/game.js';

const CLI = path.resolve(import.meta.dirname, '../packages/launcher-client/dist/cli.js');
const SIZE_MB = Number(process.env.SIZE_MB ?? 256);
const FILES = Number(process.env.FILES ?? 10_000);
const MiB = 1 << 20;

const t = await buildTestApp();
const server = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-game-'));
const keys = path.join(work, 'keys.json');
fs.writeFileSync(keys, (await t.inject('/api/signing-keys')).body);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Runs a command to its end: wall ms, peak RSS in MiB, stdout. */
async function measured(command: string, args: string[]): Promise<{ ms: number; peakMiB: number; out: string }> {
  const started = performance.now();
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  let peakKb = 0;
  const sample = setInterval(() => (peakKb = Math.max(peakKb, highWaterKb(child.pid ?? 0))), 5);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearInterval(sample);
  if (code !== 0 && !(code === 3 && args.includes('verify')))
    throw new Error(`${command} ${args.join(' ')} exited ${code}`);
  return { ms: performance.now() - started, peakMiB: peakKb / 1024, out };
}

/** Publishes `files` (each cut at `cuts`, byte offsets, or every MiB) as build `buildCode`. */
async function publish(buildCode: number, files: { path: string; content: Buffer; cuts?: number[] }[]) {
  const listed = [];
  for (const file of files) {
    const cuts = file.cuts ?? Array.from({ length: Math.ceil(file.content.length / MiB) }, (_, i) => i * MiB);
    const chunks: [string, number][] = [];
    for (const [i, at] of cuts.entries()) {
      const piece = file.content.subarray(at, cuts[i + 1] ?? file.content.length);
      const name = sha(piece);
      const res = await putChunk(t, name, piece);
      if (res.statusCode >= 300) throw new Error(`chunk: ${res.statusCode} ${res.body}`);
      chunks.push([name, piece.length]);
    }
    listed.push({ path: file.path, size: file.content.length, sha256: sha(file.content), chunks });
  }
  const manifest = JSON.stringify({ format: 1, app: 'app', version: `1.${buildCode}`, buildCode, files: listed });
  const res = await t.inject({
    method: 'POST',
    url: '/api/admin/game/builds',
    headers: { cookie: t.cookie },
    payload: { version: `1.${buildCode}`, buildCode, manifest },
  });
  if (res.statusCode !== 201) throw new Error(`build: ${res.statusCode} ${res.body}`);
  return listed;
}

const options = (name: string) => [
  '--server',
  server,
  '--trust',
  keys,
  '--state',
  path.join(work, name, 'state'),
  '--game-dir',
  path.join(work, name, 'game'),
  '--app',
  'app',
];
const mibs = (ms: number, bytes: number) => (bytes / MiB / (ms / 1000)).toFixed(0);

try {
  const big = randomBytes(SIZE_MB * MiB);
  const small = randomBytes(3 * MiB);
  const first = await publish(1, [
    { path: 'Data/big.MPQ', content: big },
    { path: 'WoW.exe', content: small },
  ]);
  const total = big.length + small.length;

  // Fresh install vs curl of the same chunks into one file over one connection.
  const install = await measured(process.execPath, [CLI, 'game', 'update', ...options('a')]);
  const urls = first.flatMap((f) => f.chunks.map(([name]) => `${server}/api/game/chunks/${name}`));
  const list = path.join(work, 'urls.txt');
  fs.writeFileSync(list, urls.map((u) => `url = "${u}"\noutput = "/dev/stdout"\n`).join(''));
  const curl = await measured('sh', ['-c', `curl -s -K ${list} > ${path.join(work, 'curl.bin')}`]);
  console.log(
    `| fresh install ${SIZE_MB + 3} MiB | ${install.ms.toFixed(0)} ms | ${mibs(install.ms, total)} MiB/s | peak ${install.peakMiB.toFixed(0)} MiB | curl ${curl.ms.toFixed(0)} ms (${mibs(curl.ms, total)} MiB/s) | ${(curl.ms / install.ms).toFixed(2)}× curl's throughput |`,
  );

  // verify --full vs sha256sum of the same files (cached).
  const full = await measured(process.execPath, [CLI, 'game', 'verify', '--full', ...options('a')]);
  const game = path.join(work, 'a', 'game');
  const sum = await measured('sha256sum', [path.join(game, 'Data/big.MPQ'), path.join(game, 'WoW.exe')]);
  console.log(
    `| verify --full | ${full.ms.toFixed(0)} ms | sha256sum ${sum.ms.toFixed(0)} ms | ${(sum.ms / full.ms).toFixed(2)}× its throughput |`,
  );

  // The update: 3 rewritten MiB, 1 MiB inserted, a new 20 MiB file.
  const inserted = randomBytes(MiB);
  const at = Math.floor(SIZE_MB / 2) * MiB + 12345;
  const edited = Buffer.concat([big.subarray(0, at), inserted, big.subarray(at)]);
  for (const region of [0.1, 0.3, 0.8]) randomBytes(MiB).copy(edited, Math.floor(edited.length * region));
  const oldCuts = first[0]!.chunks.map((_, i) => i * MiB);
  const cuts = [...oldCuts.filter((c) => c < at), at, at + MiB, ...oldCuts.filter((c) => c > at).map((c) => c + MiB)];
  await publish(2, [
    { path: 'Data/big.MPQ', content: edited, cuts: [...new Set(cuts)].sort((a, b) => a - b) },
    { path: 'WoW.exe', content: small },
    { path: 'Data/patch-2.mpq', content: randomBytes(20 * MiB) },
  ]);
  const update = await measured(process.execPath, [CLI, 'game', 'update', ...options('a')]);
  const result = JSON.parse(update.out.trim().split('\n').at(-1)!) as { downloadedBytes: number; reusedBytes: number };
  console.log(
    `| update (3 × 1 MiB rewritten, 1 MiB inserted, +20 MiB file) | ${update.ms.toFixed(0)} ms | downloaded ${(result.downloadedBytes / MiB).toFixed(1)} MiB | reused ${(result.reusedBytes / MiB).toFixed(1)} MiB | peak ${update.peakMiB.toFixed(0)} MiB |`,
  );

  // Quick verify of FILES unchanged small files.
  await publish(
    3,
    Array.from({ length: FILES }, (_, i) => ({
      path: `Many/${Math.floor(i / 100)}/f${i}.bin`,
      content: randomBytes(256),
    })),
  );
  await measured(process.execPath, [CLI, 'game', 'update', ...options('b')]);
  const quick = await measured(process.execPath, [CLI, 'game', 'verify', ...options('b')]);
  console.log(
    `| quick verify of ${FILES} unchanged files | ${quick.ms.toFixed(0)} ms (the whole command, Node's start included) |`,
  );
} finally {
  await t.close();
  fs.rmSync(work, { recursive: true, force: true });
}
