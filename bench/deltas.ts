import { execFile } from 'node:child_process';
import { createHash, randomBytes, randomFillSync } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  DEFAULT_IN_PROCESS_DELTA_MAX_BYTES,
  type DownloadedUpdate,
  type TrustedKey,
  type UpdateInfo,
  UpdateManager,
} from 'patchwell-client';
import { highWaterKb, makeDelta, rebuiltDigest } from '../src/modules/deltas/zstd.js';
import { api, type BenchRun, runs, type Scenario, type ScenarioProvider, uploadFile, wrkInstalled } from './lib.js';

/*
 * Delta updates. For a 100 MB pair (and with `--delta-gb` a 1 GB pair): the delta's size, the time
 * and the zstd child's peak memory to make it, with the function the service's worker runs; then the
 * time and peak memory to apply it in the launcher client (its `downloadUpdate`) with both engines:
 * the zstd program (zstd's peak RSS) and, on Node 24 (through npx), the runtime's zlib (the whole
 * launcher process's peak RSS, beside the same process's before the rebuild). Then, with
 * `--delta-gb`: check-update and a download while the service itself makes a 1 GB delta against the
 * same without, in the same rounds (aim: within 5 %).
 *
 * `patch-delta` (bounded, 8.5 MB files): two successive patches of a launcher through the service's
 * flow; the second downloads only its delta from the applied first.
 */

const MB = 1000 * 1000;
const CHUNK = 16 * 1024 * 1024;

/**
 * Writes a build of `size` bytes and the next one: incompressible bytes (an installer's are) with a
 * 5 % region rewritten in every 5th chunk of 16 MiB, 20 kB inserted in every 7th and 30 kB removed
 * in every 6th. Streamed: memory stays at one chunk whatever the size.
 */
function writePair(size: number, source: string, target: string): void {
  const src = fs.openSync(source, 'w');
  const dst = fs.openSync(target, 'w');
  try {
    for (let i = 0, done = 0; done < size; i += 1) {
      const chunk = randomBytes(Math.min(CHUNK, size - done));
      done += chunk.length;
      fs.writeSync(src, chunk);
      let next = Buffer.from(chunk);
      if (i % 5 === 1) randomFillSync(next, 1000, Math.floor(next.length * 0.05));
      if (i % 7 === 2) next = Buffer.concat([next.subarray(0, 5000), randomBytes(20_000), next.subarray(5000)]);
      if (i % 6 === 3) next = Buffer.concat([next.subarray(0, 7000), next.subarray(37_000)]);
      fs.writeSync(dst, next);
    }
  } finally {
    fs.closeSync(src);
    fs.closeSync(dst);
  }
}

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/** A delta made for a pair, and the target file it rebuilds. */
interface Made {
  delta: string;
  target: { file: string; size: number; sha256: string };
}

/** Makes the pair's delta as the worker does (zstd, nice 19, one thread) and prints what it cost. */
async function measureMaking(label: string, source: string, target: string): Promise<Made> {
  const out = `${target}.zst`;
  const signal = new AbortController().signal;
  const started = performance.now();
  const run = await makeDelta(source, target, out, signal);
  const made = (performance.now() - started) / 1000;
  const size = fs.statSync(out).size;
  const full = fs.statSync(target).size;
  const checked = performance.now();
  const digest = await rebuiltDigest(source, out, signal);
  const rebuilt = (performance.now() - checked) / 1000;
  console.log(
    `delta ${label}: ${mib(size)} for a ${mib(full)} file (${((100 * size) / full).toFixed(2)} %); made in ${made.toFixed(1)} s, ` +
      `zstd peak RSS ${mib(run.maxRssKb * 1024)}; rebuilt (the service's check) in ${rebuilt.toFixed(1)} s`,
  );
  return { delta: out, target: { file: target, size: full, sha256: digest } };
}

/** The pids of this process's zstd children (Linux: /proc/self/task/N/children; else none). */
function zstdChildren(): number[] {
  try {
    return fs
      .readdirSync('/proc/self/task')
      .flatMap((task) => fs.readFileSync(`/proc/self/task/${task}/children`, 'utf8').split(' '))
      .filter((pid) => pid !== '')
      .map(Number)
      .filter((pid) => runs(pid, 'zstd'));
  } catch {
    return [];
  }
}

/**
 * Applies the pair's delta as a launcher does: the launcher client's `downloadUpdate` with the old
 * file as `currentFile`, given the offer check-update would carry. It downloads the delta (from the
 * bare server, loopback), rebuilds the new file with the zstd program, checks its size and SHA-256
 * and moves it into place. Prints the time of all that and zstd's peak RSS (sampled every 20 ms;
 * the client's own process streams, its memory does not grow with the file).
 */
async function measureApplying(run: BenchRun, label: string, source: string, made: Made): Promise<void> {
  const uploads = path.join(run.dataDir, 'uploads');
  const served = (file: string) => `${run.bare.url}/file/${encodeURI(path.relative(uploads, file))}`;
  const delta = fs.readFileSync(made.delta);
  const update: UpdateInfo = {
    kind: 'full',
    slug: 'bench-delta',
    version: '2',
    versionCode: 2,
    changelog: '',
    downloadUrl: served(made.target.file),
    fileSize: made.target.size,
    sha256: made.target.sha256,
    fileName: null,
    fileSignature: null,
    downgrade: false,
    delta: {
      fromVersionCode: 1,
      downloadUrl: served(made.delta),
      fileSize: delta.length,
      sha256: createHash('sha256').update(delta).digest('hex'),
    },
  };
  const stateDir = fs.mkdtempSync(path.join(run.dataDir, 'bench-client-'));
  const client = new UpdateManager({ serverUrl: run.url, trustedKeys: [], stateDir, inProcessDeltaMaxBytes: 0 });
  let peakKb = 0;
  const sample = setInterval(() => {
    for (const pid of zstdChildren()) peakKb = Math.max(peakKb, highWaterKb(pid));
  }, 20);
  const started = performance.now();
  try {
    const done = await client.downloadUpdate(update, { currentFile: source });
    const seconds = (performance.now() - started) / 1000;
    if (!done.delta) throw new Error(`delta ${label}: the client did not apply the delta: ${done.deltaFailure}`);
    console.log(
      `delta ${label}: applied by the launcher client in ${seconds.toFixed(1)} s (${mib(done.downloadedBytes)} downloaded, ` +
        `rebuilt by zstd, ${mib(made.target.size)} checked), zstd peak RSS ${mib(peakKb * 1024)}`,
    );
    fs.rmSync(done.file, { force: true });
    await measureApplyingInProcess(run, label, source, update, stateDir);
  } finally {
    clearInterval(sample);
    fs.rmSync(stateDir, { recursive: true, force: true });
    fs.rmSync(made.delta, { force: true });
  }
}

/**
 * The same with the `node` engine: the built client on Node 24 (npx, from npm's cache or the
 * registry), rebuilding with its zlib in the launcher's own process. Its peak RSS
 * (`process.resourceUsage().maxRSS`) is the whole launcher's: the baseline printed beside it is the
 * same process's just before `downloadUpdate`.
 */
async function measureApplyingInProcess(
  run: BenchRun,
  label: string,
  source: string,
  update: UpdateInfo,
  stateDir: string,
): Promise<void> {
  const script = [
    "import { UpdateManager } from 'patchwell-client';",
    'const [options, update, currentFile] = process.argv.slice(-3).map((a) => JSON.parse(a));',
    'const before = process.resourceUsage().maxRSS;',
    'const started = performance.now();',
    'const done = await new UpdateManager(options).downloadUpdate(update, { currentFile });',
    'const seconds = (performance.now() - started) / 1000;',
    'console.log(JSON.stringify({ done, seconds, before, peak: process.resourceUsage().maxRSS }));',
  ].join('\n');
  // Measured beyond the client's default cap (2 × the old file + the new one ≤ 1 GiB), which sends
  // the 1 GB pair to the program: these figures are what the cap is set from.
  const options = { serverUrl: run.url, trustedKeys: [], stateDir, inProcessDeltaMaxBytes: Number.MAX_SAFE_INTEGER };
  let out;
  try {
    out = await promisify(execFile)(
      'npx',
      ['-y', '--prefer-offline', 'node@24', '--input-type=module', '-e', script, '--'].concat(
        [options, update, source].map((a) => JSON.stringify(a)),
      ),
      { maxBuffer: 1024 * 1024 },
    );
  } catch (err) {
    console.warn(`delta ${label}: the node engine not measured (Node 24 through npx): ${(err as Error).message}`);
    return;
  }
  const { done, seconds, before, peak } = JSON.parse(out.stdout.trim().split('\n').at(-1) ?? '') as {
    done: DownloadedUpdate;
    seconds: number;
    before: number;
    peak: number;
  };
  if (done.deltaEngine !== 'node') throw new Error(`delta ${label}: zlib did not rebuild it: ${done.deltaFailure}`);
  console.log(
    `delta ${label}: applied by the launcher client on Node 24 in ${seconds.toFixed(1)} s, rebuilt by zlib in its ` +
      `process: peak RSS ${mib(peak * 1024)} (the same process before: ${mib(before * 1024)}; by default ` +
      `${2 * fs.statSync(source).size + update.fileSize <= DEFAULT_IN_PROCESS_DELTA_MAX_BYTES ? 'in process' : 'above the cap: the program'})`,
  );
}

/**
 * Two successive patches through the service and the client's whole flow (check, download, apply,
 * check again), as a launcher on its full version 1 runs them: the first patch downloads whole, the
 * second only its delta from the first (its file kept by the state folder as the applied patch).
 * Prints the bytes each downloaded and what the delta saved.
 */
async function measurePatches(run: BenchRun): Promise<void> {
  const slug = 'bench-patch-launcher';
  const first = randomBytes(8.5 * MB);
  const second = Buffer.concat([first.subarray(0, 3 * MB), randomBytes(200_000), first.subarray(3 * MB + 100_000)]);
  const pkg = (packageSlug: string) =>
    api<{ id: string }>(run, 'POST', '/api/software', { slug: packageSlug, name: '补丁' });
  const [launcher, patches] = await Promise.all([pkg(slug), pkg(`${slug}-patch`)]);
  const publish = async (packageId: string, code: number, content: Buffer) => {
    const file = await uploadFile(run, `${slug}-${code}.bin`, content);
    await api(run, 'POST', `/api/software/${packageId}/versions`, {
      version: `1.0.${code}`,
      versionCode: code,
      filePath: file.filePath,
    });
  };
  await publish(launcher.id, 1, randomBytes(1024));
  await publish(patches.id, 2, first);
  const stateDir = fs.mkdtempSync(path.join(run.dataDir, 'bench-patch-'));
  const trustedKeys = (await (await fetch(`${run.url}/api/signing-keys`)).json()) as TrustedKey[];
  const client = new UpdateManager({ serverUrl: run.url, trustedKeys, stateDir, fullSlug: slug });
  try {
    await client.startup(1);
    const one = await client.downloadUpdate((await client.checkForUpdates()).update!);
    await client.markPatchApplied(2);
    await publish(patches.id, 3, second);
    // The service makes the delta from 2 in the background: asked until it offers it.
    const offered = `${run.url}/api/software/check-update?slug=${slug}-patch&versionCode=2`;
    const until = Date.now() + 120_000;
    while (!((await (await fetch(offered)).json()) as { latest: { delta?: unknown } }).latest.delta) {
      if (Date.now() > until) throw new Error('patch delta: the service made no delta from patch 2 within 120 s');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const update = (await client.checkForUpdates()).update!;
    const two = await client.downloadUpdate(update);
    if (!two.delta)
      throw new Error(`patch delta: the second patch was not rebuilt from the first: ${two.deltaFailure}`);
    console.log(
      `patch delta: the first patch downloaded whole (${mib(one.downloadedBytes)}); the second, rebuilt from the ` +
        `applied first, downloaded ${mib(two.downloadedBytes)} instead of ${mib(update.fileSize)}: ` +
        `${mib(update.fileSize - two.downloadedBytes)} saved (${((100 * two.downloadedBytes) / update.fileSize).toFixed(1)} % downloaded)`,
    );
  } finally {
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
}

interface Delta {
  fromVersionCode: number;
  status: string;
}

export const scenarios: ScenarioProvider = async (target) => {
  if (target.wanted('patch-delta')) await measurePatches(target);
  if (!target.wanted('delta')) return [];
  const gb = process.env.BENCH_DELTA_GB === '1';
  const store = path.join(target.dataDir, 'uploads', 'bench-deltas');
  fs.mkdirSync(store, { recursive: true });
  const pairs = [{ label: '100 MB', size: 100 * MB }, ...(gb ? [{ label: '1 GB', size: 1000 * MB }] : [])];
  const files: Record<string, { source: string; target: string }> = {};
  for (const pair of pairs) {
    const source = path.join(store, `${pair.label.replace(' ', '')}-source.bin`);
    const next = path.join(store, `${pair.label.replace(' ', '')}-target.bin`);
    writePair(pair.size, source, next);
    files[pair.label] = { source, target: next };
    await measureApplying(target, pair.label, source, await measureMaking(pair.label, source, next));
  }
  if (!gb) {
    console.warn('delta: 1 GB pair and the hot paths while it is made skipped (npm run bench -- --delta-gb)');
    return [];
  }

  // The service makes the 1 GB delta itself: the pair as two versions of a package.
  const big = files['1 GB'];
  if (big === undefined) return [];
  const storePath = (file: string) => `/uploads/bench-deltas/${path.basename(file)}`;
  // A second next build, 1 MiB apart from the first: a delta is made anew each time the target's file
  // changes (B ↔ B2), the same work each time.
  const other = path.join(store, '1GB-target-2.bin');
  fs.copyFileSync(big.target, other);
  const patch = fs.openSync(other, 'r+');
  try {
    fs.writeSync(patch, randomBytes(MB), 0, MB, 500 * MB);
  } finally {
    fs.closeSync(patch);
  }
  const pkg = await api<{ id: string }>(target, 'POST', '/api/software', { slug: 'bench-delta', name: '增量' });
  await api(target, 'POST', `/api/software/${pkg.id}/versions`, {
    version: '1.0.0',
    versionCode: 1,
    filePath: storePath(big.source),
  });
  const next = await api<{ id: string }>(target, 'POST', `/api/software/${pkg.id}/versions`, {
    version: '1.1.0',
    versionCode: 2,
    filePath: storePath(big.target),
  });
  const deltaStatus = async () => {
    const detail = await api<{ versions: Array<{ id: string; deltas?: Delta[] }> }>(
      target,
      'GET',
      '/api/admin/software/bench-delta',
    );
    return detail.versions.find((v) => v.id === next.id)?.deltas?.[0]?.status;
  };
  const until = async (done: (status: string | undefined) => boolean) => {
    while (!done(await deltaStatus())) await new Promise((resolve) => setTimeout(resolve, 200));
  };
  await until((s) => s === 'ready' || s === 'skipped' || s === 'failed');
  let flip = false;
  const during = {
    label: 'the service makes a 1 GB delta',
    async start() {
      // The target's file changes: the worker forgets the delta it had and makes a new one at once.
      flip = !flip;
      await api(target, 'PUT', `/api/software/versions/${next.id}`, {
        filePath: storePath(flip ? other : big.target),
      });
      await until((s) => s === 'pending');
      // Claimed within the worker's poll (1 s): zstd runs from then on, for longer than one measurement.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      return () => until((s) => s !== 'pending');
    },
  };
  const checkUpdate = '/api/software/check-update?slug=bench-delta&versionCode=0&lang=en';
  const scenarios: Scenario[] = [{ name: 'check-update (delta)', path: checkUpdate, during }];
  if (wrkInstalled()) {
    const small = await uploadFile(target, 'setup-1mib.exe', randomBytes(1024 * 1024));
    const pkgSmall = await api<{ id: string }>(target, 'POST', '/api/software', { slug: 'bench-delta-dl', name: '下' });
    const version = await api<{ id: string }>(target, 'POST', `/api/software/${pkgSmall.id}/versions`, {
      version: '1.0.0',
      versionCode: 1,
      filePath: small.filePath,
    });
    scenarios.push({
      name: 'download 1 MiB (delta)',
      path: `/api/software/download/${version.id}`,
      wrk: true,
      baseline: { ...target.bare, url: `${target.bare.url}/file/${small.key}` },
      during,
    });
  }
  return scenarios;
};
