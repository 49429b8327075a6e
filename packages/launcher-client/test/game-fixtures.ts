/**
 * What the game client's tests share: temporary folders (removed by `removeTempDirs`), a
 * `GameManager` and the `launcher-client` command against the service through its proxy.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { type BuiltManifest, type GameFile, manifestOf, publishBuild, sha256Of } from '../../../test/helpers/game.js';
import {
  GameManager,
  type GameManagerOptions,
  type TrustedKey,
  UpdateManager,
  type UpdateManagerOptions,
} from '../src/index.js';
import { type Service, startService } from './helpers.js';

export const CLI = path.resolve(import.meta.dirname, '../src/cli.ts');
export const KiB = 1024;

const dirs: string[] = [];

/**
 * The service for a file of game tests: started before them (`started` is given it and its signing
 * keys), its proxy's rule reset after each, closed after them with every temporary folder removed.
 */
export function withService(started: (s: Service, keys: TrustedKey[]) => void | Promise<void>): void {
  let service: Service;
  beforeAll(async () => {
    service = await startService();
    await started(service, await service.keys());
  });
  afterEach(() => {
    service.proxy.rule = null;
  });
  afterAll(async () => {
    await service.close();
    removeTempDirs();
  });
}

/** A new folder under the system's temporary folder. */
export function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
}

function removeTempDirs(): void {
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
}

export type GameOptions = Partial<GameManagerOptions> & {
  trustedKeys?: TrustedKey[];
  deadlines?: Pick<UpdateManagerOptions, 'timeoutMs' | 'minBytesPerSecond' | 'stallTimeoutMs'>;
};

/** A `GameManager` of app `app` over `stateDir` and `gameDir`, talking to the service through the proxy. */
export function gameManager(s: Service, keys: TrustedKey[], stateDir: string, gameDir: string, options: GameOptions) {
  const updates = new UpdateManager({
    serverUrl: s.proxy.url,
    trustedKeys: options.trustedKeys ?? keys,
    stateDir,
    retry: { baseDelayMs: 10 },
    ...options.deadlines,
  });
  return new GameManager({ updates, gameDir, app: 'app', ...options });
}

/** The options every online `launcher-client game` command takes. */
export function commonArgs(s: Service, keys: TrustedKey[], stateDir: string, gameDir: string): string[] {
  const trust = path.join(tempDir('game-trust-'), 'keys.json');
  fs.writeFileSync(trust, JSON.stringify(keys));
  return ['--server', s.proxy.url, '--trust', trust, '--state', stateDir, '--game-dir', gameDir, '--app', 'app'];
}

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  /** The process id the command ran as. */
  pid: number;
}

/**
 * Runs the command (TypeScript, through tsx) to its end; `started` is told its process id; `under`
 * runs it under another program (`['strace', …]`).
 */
export function cli(
  args: string[],
  options: { started?: (pid: number) => void; under?: readonly string[] } = {},
): Promise<CliRun> {
  return new Promise((resolve) => {
    const [program, ...before] = [...(options.under ?? []), process.execPath];
    const child = spawn(program!, [...before, '--import', 'tsx', CLI, ...args]);
    options.started?.(child.pid ?? -1);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr, pid: child.pid ?? -1 }));
  });
}

/** The last line of a command's output, as JSON. */
export const lastJson = (text: string) =>
  JSON.parse(text.trim().split('\n').at(-1) ?? 'null') as Record<string, unknown>;

export const read = (dir: string, file: string) => fs.readFileSync(path.join(dir, file));

/** Publishes build `buildCode` of `files` on the service (its chunks uploaded first). */
export async function publishGame(
  s: Service,
  version: string,
  buildCode: number,
  files: GameFile[],
  extra: Record<string, unknown> = {},
): Promise<BuiltManifest> {
  const built = manifestOf({ version, buildCode }, files, extra);
  const res = await publishBuild(s.t, { version, buildCode }, built);
  expect(res.statusCode, res.body).toBe(201);
  return built;
}

/** Every file below `dir` and its bytes' SHA-256, and every link and where it points (`-> target`). */
export function tree(dir: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const file = path.relative(dir, path.join(entry.parentPath, entry.name)).split(path.sep).join('/');
    if (entry.isFile()) files[file] = sha256Of(fs.readFileSync(path.join(dir, file)));
    else if (entry.isSymbolicLink()) files[file] = `-> ${fs.readlinkSync(path.join(dir, file))}`;
  }
  return files;
}
