import { type ChildProcess, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { keyFromFilePath } from '../src/storage/storage.js';
import type { ServerProcess } from '../test/helpers/process.js';

/**
 * Shared shapes of the load benchmarks. `bench/run.ts` starts the real service, then loads every
 * module in `bench/` that exports `scenarios: ScenarioProvider`, seeds through it and measures each
 * scenario beside its baseline: by default a bare `node:http` server answering a constant JSON body
 * of the same size; downloads compare with bare Node file streaming and nginx sendfile.
 */

export interface Scenario {
  name: string;
  method?: 'GET' | 'POST';
  path: string;
  body?: string;
  headers?: Record<string, string>;
  /** Builds each request's body (e.g. a different deviceId per heartbeat). */
  makeBody?: (n: number) => string;
  /** Builds each request's path and query (e.g. a different deviceId per check-update); `path` is the first. */
  makePath?: (n: number) => string;
  /** Also print this scenario's rate against another one of the same run, by name, with its own aim. */
  against?: { name: string; aim: number };
  /** The lowest acceptable ratio of the service's rate to the baseline's; printed beside the result. */
  aim?: number;
  /** Loads this absolute URL instead of the service's `path` (e.g. the service behind nginx). */
  url?: string;
  /** The process whose event loop is measured, when not the service (null: not a Node process). */
  process?: ChildProcess | null;
  /** Connections, when not the run's `--connections`. */
  connections?: number;
  /**
   * What the rate is compared with, loaded in the same rounds. Default: the bare node:http server
   * answering constant JSON of the same size.
   */
  baseline?: Baseline;
  /** Large bodies: loaded with wrk (autocannon itself tops out far below what the servers send). */
  wrk?: boolean;
  /** With `wrk`: a Lua script (bench/lua/) that makes each request, and the environment it reads. */
  wrkScript?: { path: string; env?: Record<string, string> };
  /** Load of its own kept up while this scenario (and its baseline) is measured; answers how to stop it. */
  background?: () => () => void;
  /**
   * Also measured in each round while `start` has some work under way (until the function it
   * answers resolves), and printed against the plain measure of the same rounds, aim ≥ 0.95.
   */
  during?: { label: string; start(): Promise<() => Promise<void>> };
}

/** What the loop probe (bench/loop-probe.mjs) answers for a window of load. */
export interface LoopDelay {
  p99Ms: number;
  maxMs: number;
  /** CPU time (user + system, all threads) the process used in the window. */
  cpuMs: number;
}

export interface Baseline {
  name: string;
  url: string;
  /** The process whose event loop is measured (null: not a Node process). */
  process: ChildProcess | null;
}

export interface BenchTarget {
  /** Base URL of the running service, e.g. http://127.0.0.1:41234 */
  url: string;
  /** Session cookie header of the administrator (`sid=…`). */
  cookie: string;
  engine: 'sqlite' | 'postgres';
  /** The service's DATABASE_URL (a postgres:// URL), or null for SQLite in `dataDir`. */
  databaseUrl: string | null;
  dataDir: string;
}

/** What `bench/run.ts` hands its scenario providers besides the service. */
export interface BenchRun extends BenchTarget {
  /** The bare node:http baseline: constant JSON at `/?bytes=N`, and the store's files at `/file/<key>`. */
  bare: Baseline;
  /** The same constant JSON at `/?bytes=N` through Fastify alone: the framework's own ceiling. */
  fastify: Baseline;
  /**
   * Starts another service process on the same database and folder, stopped after the run
   * (`nodeArgs`: more arguments for its node, e.g. `--import` of a bench-only preload).
   */
  startService(env: Record<string, string>, nodeArgs?: readonly string[]): Promise<ServerProcess>;
  /** Runs `stop` after the run (in reverse order). */
  cleanup(stop: () => Promise<unknown>): void;
  /** Whether `--only` lets a scenario of this name run (a provider skips costly seeding otherwise). */
  wanted(name: string): boolean;
}

export type ScenarioProvider = (target: BenchRun) => Promise<Scenario[]>;

/** A JSON call to the service as the administrator; throws on a non-2xx answer. */
export async function api<T = unknown>(target: BenchTarget, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(target.url + path, {
    method,
    headers: { cookie: target.cookie, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path} → ${res.status}: ${text}`);
  return (text === '' ? undefined : JSON.parse(text)) as T;
}

/** Uploads `content` as `name` as the administrator: its `filePath` (`/uploads/…`) and its key in the store. */
export async function uploadFile(
  target: BenchTarget,
  name: string,
  content: Buffer,
): Promise<{ filePath: string; key: string }> {
  const form = new FormData();
  form.append('file', new Blob([new Uint8Array(content)]), name);
  const res = await fetch(`${target.url}/api/upload`, {
    method: 'POST',
    headers: { cookie: target.cookie },
    body: form,
  });
  if (res.status !== 201) throw new Error(`upload → ${res.status}: ${await res.text()}`);
  const { filePath } = (await res.json()) as { filePath: string };
  const key = keyFromFilePath(filePath);
  if (key === null) throw new Error(`upload answered a path outside the store: ${filePath}`);
  return { filePath, key };
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
}

/** Whether wrk is on the PATH: the download scenarios load with it. */
export function wrkInstalled(): boolean {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
    return true;
  } catch (err) {
    // wrk prints its usage and exits 1 on --version: only a missing binary is absent.
    return (err as NodeJS.ErrnoException).code !== 'ENOENT';
  }
}

/** Whether process `pid` runs the program `name` (Linux: /proc/PID/comm); false once it has ended. */
export function runs(pid: number, name: string): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === name;
  } catch {
    return false;
  }
}
