/**
 * Delta updates. check-update's `latest.delta` names a zstd frame compressed with the installed
 * version's file as its prefix (`zstd --patch-from`). Given that file, `applyDelta` downloads the
 * delta (resumable, and verified against the signed answer before anything reads it), rebuilds the
 * new file into the state folder's downloads, verifies it against `latest` and moves it into place.
 * Any failure is reported, not thrown (the caller then downloads the full file), except a cancellation.
 *
 * Two engines rebuild: `node`, the runtime's own `zlib` where it has zstd with dictionaries (Node 24,
 * detected by trying it, never by version), streaming the new file to disk with the installed file
 * as the dictionary; `program`, the `zstd` program (1.4.5 or later), where the runtime has no such
 * zstd or the pair is larger than the in-process cap. Both check the frame's checksum, and both
 * stop as soon as the rebuilt file would pass the size the signed answer promises (`expected.fileSize`):
 * a delta that expands further (a zstd bomb, signed by a stolen key) writes no more than that, and
 * fails as any other delta does.
 *
 * The rebuilt file is named after the process writing it (`<sha256>.<pid>.rebuilt`): one left by a
 * process that died mid-apply (killed, crashed, the power cut) is removed by the next download of
 * any update (`removeAbandonedRebuilds`), while a rebuild still under way in a live process is not.
 */
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import zlib from 'node:zlib';
import { fetchFile, type FetchFileOptions, partFiles } from '../net/download.js';
import { AbortedError } from '../errors.js';
import { type ExpectedFile, type FileCheck, verifyFile } from '../trust/verify.js';

/** check-update's `latest.delta`: a patch from the version the client checked with. */
export type DeltaOffer = Readonly<
  NonNullable<
    import('../api.js').paths['/api/software/check-update']['get']['responses'][200]['content']['application/json']['latest']['delta']
  >
>;

export interface DeltaRequest {
  /** The state folder's downloads. */
  readonly dir: string;
  readonly offer: DeltaOffer;
  /** The installed file of the version `offer.fromVersionCode`. */
  readonly currentFile: string;
  /** What the rebuilt file must be (`latest`'s size and SHA-256). */
  readonly expected: ExpectedFile;
  /** Where the verified file goes (renamed, on the downloads' file system). */
  readonly destination: string;
  /** The zstd program. */
  readonly zstd: string;
  /**
   * The most the `node` engine may hold in memory, counted as twice the installed file (the
   * dictionary: our buffer and zstd's copy of it) plus the new file (the decoder's window is at most
   * its size), as measured (bench/deltas.ts). A larger pair goes to the program; 0: never in process.
   */
  readonly inProcessMaxBytes: number;
  readonly checks: readonly FileCheck[];
  /** Progress, cancellation and retries of the delta's download. */
  readonly download: FetchFileOptions;
}

/** What rebuilt a delta: the runtime's `zlib` or the `zstd` program. */
export type DeltaEngine = 'node' | 'program';

export type DeltaOutcome =
  | { readonly applied: true; readonly downloadedBytes: number; readonly engine: DeltaEngine }
  | { readonly applied: false; readonly downloadedBytes: number; readonly reason: string };

/** `<sha256 of the new file>.<pid of the process writing it>.rebuilt` */
const REBUILT = /^[0-9a-f]{64}\.(\d+)\.rebuilt$/;

/** Whether process `pid` is running (on Windows too: signal 0 only asks). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The rebuilt files this process is writing now. */
const writing = new Set<string>();

/**
 * Deletes the rebuilt files in `dir` that no running process is writing: those of processes that
 * ended, and this process's own that it is not writing now (an earlier process had the same pid).
 */
export async function removeAbandonedRebuilds(dir: string): Promise<void> {
  let names: string[];
  try {
    names = await fs.promises.readdir(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(REBUILT.exec(name)?.[1] ?? NaN);
    const file = path.join(dir, name);
    if (Number.isNaN(pid) || (pid === process.pid ? writing.has(file) : running(pid))) continue;
    await fs.promises.rm(file, { force: true });
  }
}

/** `--patch-from` came with zstd 1.4.5. */
const PATCH_FROM_SINCE = [1, 4, 5];

const programChecks = new Map<string, Promise<string | null>>();

/** Why `program` cannot rebuild deltas (cannot run, or older than 1.4.5), or null when it can (remembered). */
export function zstdUnusable(program: string): Promise<string | null> {
  let check = programChecks.get(program);
  if (check === undefined) {
    check = new Promise((resolve) => {
      execFile(program, ['--version'], { timeout: 10_000 }, (err, stdout) => {
        if (err) return resolve(`${program} cannot run: ${err.message}`);
        const version = /v(\d+)\.(\d+)\.(\d+)/.exec(stdout)?.slice(1).map(Number);
        if (version === undefined) return resolve(`${program} --version names no version`);
        const order = version.map((n, i) => n - (PATCH_FROM_SINCE[i] ?? 0)).find((d) => d !== 0) ?? 0;
        resolve(order < 0 ? `${program} is ${version.join('.')}: --patch-from needs 1.4.5` : null);
      });
    });
    programChecks.set(program, check);
    // A program that could not run may be installed later: only a usable one is remembered.
    void check.then((reason) => reason !== null && programChecks.delete(program));
  }
  return check;
}

/** The part of Node 24's `zlib` the `node` engine uses (absent from the Node 20 types this package builds with). */
interface ZlibZstd {
  createZstdDecompress(options: { dictionary: Buffer; params: Record<number, number> }): Transform;
  zstdCompressSync(data: Buffer, options: { dictionary: Buffer }): Buffer;
  zstdDecompressSync(data: Buffer, options?: { dictionary: Buffer }): Buffer;
  constants: { ZSTD_d_windowLogMax: number };
}

let zlibZstdFound: ZlibZstd | null | undefined;

/**
 * The runtime's zstd with dictionaries, or null: found by use, not by version (a runtime may have
 * zstd without the `dictionary` option, which it would then ignore). A frame compressed with a
 * dictionary must need it to decompress, and decompress to the same bytes with it.
 */
export function zlibZstd(): ZlibZstd | null {
  if (zlibZstdFound !== undefined) return zlibZstdFound;
  const candidate = zlib as unknown as Partial<ZlibZstd>;
  zlibZstdFound = null;
  if (
    typeof candidate.createZstdDecompress === 'function' &&
    typeof candidate.zstdCompressSync === 'function' &&
    typeof candidate.zstdDecompressSync === 'function' &&
    typeof candidate.constants?.ZSTD_d_windowLogMax === 'number'
  ) {
    const found = candidate as ZlibZstd;
    const probe = Buffer.from('patchwell zstd dictionary probe '.repeat(8));
    try {
      const frame = found.zstdCompressSync(probe, { dictionary: probe });
      const needsIt = (() => {
        try {
          return !found.zstdDecompressSync(frame).equals(probe);
        } catch {
          return true;
        }
      })();
      if (needsIt && found.zstdDecompressSync(frame, { dictionary: probe }).equals(probe)) zlibZstdFound = found;
    } catch {
      // zstd present but without dictionaries
    }
  }
  return zlibZstdFound;
}

/**
 * Passes on at most `maxBytes`: the chunk that would pass them is not written, and fails the
 * rebuild (the pipeline then stops the decoder or the program).
 */
function atMost(maxBytes: number): Transform {
  let passed = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      passed += chunk.length;
      if (passed <= maxBytes) return done(null, chunk);
      done(new Error(`the delta rebuilds more than the ${maxBytes} bytes latest promises: stopped there`));
    },
  });
}

/**
 * The largest window a delta to a file of `fileSize` bytes needs, as a power of two: the service's
 * zstd writes the file's size in the frame and uses it as the window (a single segment), so no
 * genuine delta asks for more; zstd's bounds are 2^10 and 2^31.
 */
function windowLog(fileSize: number): number {
  return Math.min(31, Math.max(10, Math.ceil(Math.log2(Math.max(1, fileSize)))));
}

/**
 * The `node` engine: the delta streamed through the runtime's zstd decoder to `out`, with the
 * installed file as the dictionary (held in memory: the caller caps its size), windows up to the
 * promised file's size (`ZSTD_d_windowLogMax`) and at most `maxBytes` written.
 */
async function rebuildInProcess(
  zstd: ZlibZstd,
  source: string,
  delta: string,
  out: string,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<void> {
  const dictionary = await fs.promises.readFile(source, signal ? { signal } : {});
  const decoder = zstd.createZstdDecompress({
    dictionary,
    params: { [zstd.constants.ZSTD_d_windowLogMax]: windowLog(maxBytes) },
  });
  await pipeline(
    fs.createReadStream(delta),
    decoder,
    atMost(maxBytes),
    fs.createWriteStream(out),
    signal ? { signal } : {},
  );
}

/**
 * `zstd -d -c --long=31 --patch-from=SOURCE -- DELTA`, spawned without a shell, its output written
 * to OUT up to `maxBytes` (past them the program is stopped). `--long=31` admits the 2 GiB windows
 * the service may use; zstd checks the frame's checksum and exits non-zero when it fails.
 * Memory: zstd holds the source and the new file's window (about both sizes).
 */
async function rebuild(
  program: string,
  source: string,
  delta: string,
  out: string,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<void> {
  const args = ['-q', '-d', '-c', '--long=31', `--patch-from=${source}`, '--', delta];
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(signal ? { signal } : {}) });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
  const exited = new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, killed) => {
      if (code === 0) return resolve();
      reject(new Error(`zstd exited with ${code ?? killed ?? 'no status'}: ${stderr.trim() || 'no message'}`));
    });
  });
  // Awaited below, after the output: a failure to start is not left unhandled meanwhile.
  exited.catch(() => undefined);
  try {
    await pipeline(child.stdout, atMost(maxBytes), fs.createWriteStream(out));
  } catch (err) {
    child.kill();
    await exited.catch(() => undefined);
    throw err;
  }
  await exited;
}

/**
 * Downloads `offer`, rebuilds the new file from `currentFile` and moves it, verified, to
 * `destination`. Leaves no file behind on failure; a cancellation throws `AbortedError` and keeps
 * the delta's partial download for a later call to resume.
 */
export async function applyDelta(request: DeltaRequest): Promise<DeltaOutcome> {
  const { dir, offer, download } = request;
  const deltaFiles = partFiles(dir, offer.sha256);
  const rebuilt = path.join(dir, `${request.expected.sha256}.${process.pid}.rebuilt`);
  let downloadedBytes = 0;
  writing.add(rebuilt);
  try {
    const source = path.resolve(request.currentFile);
    const inProcess = zlibZstd();
    const fits = async () =>
      2 * (await fs.promises.stat(source)).size + request.expected.fileSize <= request.inProcessMaxBytes;
    const engine: DeltaEngine = inProcess !== null && (await fits()) ? 'node' : 'program';
    if (engine === 'program') {
      const unusable = await zstdUnusable(request.zstd);
      if (unusable !== null) return { applied: false, downloadedBytes, reason: unusable };
    }
    await fs.promises.access(source, fs.constants.R_OK);
    downloadedBytes = await fetchFile(dir, offer.downloadUrl, offer, download);
    await verifyFile(deltaFiles.part, offer);
    if (inProcess !== null && engine === 'node') {
      await rebuildInProcess(inProcess, source, deltaFiles.part, rebuilt, request.expected.fileSize, download.signal);
    } else {
      await rebuild(request.zstd, source, deltaFiles.part, rebuilt, request.expected.fileSize, download.signal);
    }
    await verifyFile(rebuilt, request.expected, request.checks);
    await fs.promises.mkdir(path.dirname(request.destination), { recursive: true });
    await fs.promises.rename(rebuilt, request.destination);
    await deltaFiles.remove();
    return { applied: true, downloadedBytes, engine };
  } catch (err) {
    await fs.promises.rm(rebuilt, { force: true });
    if (err instanceof AbortedError) throw err;
    if (download.signal?.aborted) throw new AbortedError('the download was cancelled', { cause: err });
    await deltaFiles.remove();
    return { applied: false, downloadedBytes, reason: (err as Error).message };
  } finally {
    writing.delete(rebuilt);
  }
}
