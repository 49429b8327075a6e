/*
 * Publishing a game client folder (issue 43), in-process service on SQLite and the local store:
 *   TEST_POSTGRES=0 npx tsx bench/game-publish.mts [--gb 0.5] [--small 3000]
 * Makes a client of --gb GiB (half of it one large file, the rest three MPQ-like files of random
 * bytes) and --small small files; times `sha256sum` over the files and the command's chunking (FastCDC
 * and SHA-256 of every chunk and file) over the same files (page cache warm for both); publishes it
 * with `launcher-publish game` (first publish: everything uploaded once); then rewrites three 1 MiB
 * regions of the large file, inserts 1 MiB in its middle, adds a 20 MiB file and publishes again:
 * the bytes uploaded must stay at or under 40 MiB.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildTestApp } from '../test/helpers/app.js';
import { apiToken, listen } from '../test/helpers/tus.js';
import { startCli } from '../packages/publish/test/cli-process.js';
import { clientManifest, walkClient } from '../packages/publish/src/game.js';

const { values } = parseArgs({ options: { gb: { type: 'string' }, small: { type: 'string' } } });
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const total = Math.round(Number(values.gb ?? '0.5') * GiB);
const smallCount = Number(values.small ?? '3000');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-game-'));
const root = path.join(dir, 'client');

/** Writes `size` random bytes to `file` in 16 MiB pieces. */
function randomFile(file: string, size: number): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const fd = fs.openSync(file, 'w');
  for (let left = size; left > 0; left -= 16 * MiB) fs.writeSync(fd, randomBytes(Math.min(left, 16 * MiB)));
  fs.closeSync(fd);
}

const t = await buildTestApp({ APP_NAME: 'bench' });
try {
  const server = await listen(t);
  const token = await apiToken(t);
  const big = path.join(root, 'Data/common.MPQ');
  const smallBytes = smallCount * 8 * 1024;
  const bigSize = Math.floor(total / 2);
  randomFile(big, bigSize);
  const rest = total - bigSize - smallBytes;
  for (let i = 0; i < 3; i += 1) randomFile(path.join(root, `Data/patch-${i}.MPQ`), Math.floor(rest / 3));
  for (let i = 0; i < smallCount; i += 1) {
    const file = path.join(root, `Interface/FrameXML/f${Math.floor(i / 100)}/file-${i}.lua`);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, randomBytes(1024 + Math.floor(Math.random() * 14 * 1024)));
  }
  const files = await walkClient(root, []);
  const bytes = files.reduce((sum, file) => sum + file.size, 0);
  console.log(`client: ${files.length} files, ${(bytes / MiB).toFixed(0)} MiB`);

  // sha256sum over the same files (arguments in batches), then the command's chunking, page cache warm.
  const sha256sum = () => {
    const started = performance.now();
    for (let i = 0; i < files.length; i += 1000) {
      execFileSync(
        'sha256sum',
        files.slice(i, i + 1000).map((file) => file.file),
        { maxBuffer: 64 * MiB },
      );
    }
    return (performance.now() - started) / 1000;
  };
  sha256sum();
  const shaSeconds = sha256sum();
  const quiet = { progress: Object.assign(fs.createWriteStream('/dev/null'), { isTTY: false }), env: {} };
  const started = performance.now();
  const manifest = await clientManifest(
    files,
    { app: 'bench', version: '1', buildCode: 1, remove: [], initial: [] },
    quiet,
  );
  const chunkSeconds = (performance.now() - started) / 1000;
  console.log(
    `sha256sum: ${shaSeconds.toFixed(2)} s (${(bytes / MiB / shaSeconds).toFixed(0)} MiB/s); ` +
      `chunking: ${chunkSeconds.toFixed(2)} s (${(bytes / MiB / chunkSeconds).toFixed(0)} MiB/s), ` +
      `${manifest.chunks.size} chunks; ratio ${(shaSeconds / chunkSeconds).toFixed(2)} (wanted >= 0.3)`,
  );

  const publish = async (code: number) => {
    const args = ['game', '--server', server, '--dir', root, '--app', 'bench', '--version', `1.${code}`];
    const begun = performance.now();
    const run = await startCli([...args, '--build-code', String(code)], { LAUNCHER_TOKEN: token }).done;
    if (run.code !== 0) throw new Error(`publish ${code} failed: ${run.stderr.slice(-2000)}`);
    const answer = JSON.parse(run.stdout.trim().split('\n').at(-1) ?? '') as {
      uploadedBytes: number;
      uploadedChunks: number;
      chunks: number;
    };
    const seconds = (performance.now() - begun) / 1000;
    console.log(
      `publish ${code}: ${seconds.toFixed(1)} s, uploaded ${answer.uploadedChunks}/${answer.chunks} chunks, ` +
        `${(answer.uploadedBytes / MiB).toFixed(1)} MiB`,
    );
    return answer;
  };
  const first = await publish(1);
  if (first.uploadedBytes !== bytes) throw new Error(`first publish uploaded ${first.uploadedBytes} of ${bytes}`);

  // Three 1 MiB regions rewritten, 1 MiB inserted in the middle, one 20 MiB file added.
  const fd = fs.openSync(big, 'r+');
  for (const at of [0.2, 0.45, 0.8]) fs.writeSync(fd, randomBytes(MiB), 0, MiB, Math.floor(bigSize * at));
  fs.closeSync(fd);
  const moved = `${big}.new`;
  const out = fs.openSync(moved, 'w');
  const input = fs.openSync(big, 'r');
  const buffer = Buffer.allocUnsafe(16 * MiB);
  const middle = Math.floor(bigSize / 2);
  for (let at = 0; at < bigSize;) {
    if (at === middle) fs.writeSync(out, randomBytes(MiB));
    const want = Math.min(buffer.length, (at < middle ? middle : bigSize) - at);
    const read = fs.readSync(input, buffer, 0, want, at);
    fs.writeSync(out, buffer, 0, read);
    at += read;
  }
  fs.closeSync(input);
  fs.closeSync(out);
  fs.renameSync(moved, big);
  randomFile(path.join(root, 'Data/patch-acme-4.MPQ'), 20 * MiB);
  const second = await publish(2);
  const mib = second.uploadedBytes / MiB;
  console.log(
    `republish after the changes: ${mib.toFixed(1)} MiB uploaded (wanted <= 40): ${mib <= 40 ? 'ok' : 'TOO MUCH'}`,
  );
} finally {
  await t.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
