/*
 * The sweep of stored files nothing names (issue 38) at scale, on the local store (in-process):
 *   SWEEP_FILES=200000 TEST_ENGINE=sqlite npx tsx bench/stored-upload-sweep.mts
 * Writes SWEEP_FILES small files into a fresh store (every tenth named by a banner), and SWEEP_CHUNKS
 * game chunks (default 0: files under game-chunks/, which this sweep leaves to the game module), then
 * times one sweep that finds them all older than UPLOAD_EXPIRY_HOURS, and a second one (only the
 * named left), with the process's peak RSS and heap while each runs (sampled every 20 ms).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createHash, randomUUID } from 'node:crypto';
import { buildTestApp } from '../test/helpers/app.js';
import { filePathFromKey } from '../src/storage/storage.js';

const total = Number(process.env.SWEEP_FILES ?? 100_000);
const chunks = Number(process.env.SWEEP_CHUNKS ?? 0);
const NAMED_EVERY = 10;
const MB = 1024 * 1024;

const t = await buildTestApp();
try {
  const root = path.join(t.dir, 'uploads');
  const named: string[] = [];
  for (let i = 0; i < total; i += 1) {
    const month = `2026-${String((i % 12) + 1).padStart(2, '0')}`;
    const key = `${month}/${randomUUID()}-f${i}.bin`;
    if (i % 12 === 0 || i < 12) fs.mkdirSync(path.join(root, month), { recursive: true });
    fs.writeFileSync(path.join(root, month, key.slice(month.length + 1)), 'x');
    if (i % NAMED_EVERY === 0) named.push(key);
  }
  for (let i = 0; i < chunks; i += 1) {
    const name = createHash('sha256').update(String(i)).digest('hex');
    const folder = path.join(root, 'game-chunks', name.slice(0, 2));
    fs.mkdirSync(folder, { recursive: true });
    fs.writeFileSync(path.join(folder, name), 'x');
  }
  const at = new Date().toISOString();
  for (let i = 0; i < named.length; i += 500) {
    await t.app.ctx.db
      .insertInto('banners')
      .values(
        named.slice(i, i + 500).map((key, j) => ({
          id: `b${i + j}`,
          imageUrl: filePathFromKey(key),
          sortOrder: 0,
          enabled: 1,
          createdAt: at,
        })),
      )
      .execute();
  }
  // The files written, out of the kernel's cache onto the disk: the sweep is not timed against their writing.
  execFileSync('sync');
  const later = Date.now() + 25 * 3600_000;
  for (const pass of ['first (all old)', 'second (named left)']) {
    globalThis.gc?.();
    const before = process.memoryUsage();
    let rss = before.rss;
    let heap = before.heapUsed;
    const sampler = setInterval(() => {
      const now = process.memoryUsage();
      rss = Math.max(rss, now.rss);
      heap = Math.max(heap, now.heapUsed);
    }, 20);
    const started = performance.now();
    const counts = await t.app.ctx.uploadSweep.run(later);
    const seconds = (performance.now() - started) / 1000;
    clearInterval(sampler);
    console.log(
      `${pass}: ${JSON.stringify(counts)} in ${seconds.toFixed(1)} s ` +
        `(${((counts?.examined ?? 0) / seconds).toFixed(0)} files/s); ` +
        `peak RSS ${(rss / MB).toFixed(0)} MB (+${((rss - before.rss) / MB).toFixed(0)}), ` +
        `peak heap ${(heap / MB).toFixed(0)} MB (+${((heap - before.heapUsed) / MB).toFixed(0)})`,
    );
  }
} finally {
  await t.close();
}
