/**
 * A Windows test file's setup: the service (on Linux, in-process, through the proxy) and Wine
 * (test/wine.ts, which stays importable outside the test runner: .ci/windows prepares Wine with it).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { type Service, startService } from './helpers.js';
import { type Run, Wine } from './wine.js';

/** A Windows test file's service (on Linux, through the proxy) and Wine, made before its tests. */
export interface WindowsSuite {
  readonly s: Service;
  readonly wine: Wine;
  /** The service's keys, as `--trust` reads them (a Linux path). */
  readonly keys: string;
  /** A new folder, removed after the file's tests. */
  tempDir(prefix: string): string;
}

/** Starts the service and prepares Wine before the file's tests (`beforeAll`); all closed after them. */
export function windowsSuite(): WindowsSuite {
  const dirs: string[] = [];
  let started: { s: Service; wine: Wine; keys: string } | undefined;
  const get = () => {
    if (started === undefined) throw new Error('the Windows suite is used before its beforeAll ran');
    return started;
  };
  const tempDir = (prefix: string) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };
  beforeAll(async () => {
    const [s, wine] = await Promise.all([startService(), Wine.prepare()]);
    const keys = path.join(tempDir('lc-win-keys-'), 'keys.json');
    fs.writeFileSync(keys, JSON.stringify(await s.keys()));
    started = { s, wine, keys };
  }, 300_000);
  afterAll(async () => {
    await started?.wine.close();
    await started?.s.close();
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  });
  return {
    get s() {
      return get().s;
    },
    get wine() {
      return get().wine;
    },
    get keys() {
      return get().keys;
    },
    tempDir,
  };
}

/** The answer of a run that must succeed (exit 0, its JSON last line); else its stderr in the failure. */
export function expectOk(run: Run): Record<string, unknown> {
  expect(run.code, `exit ${run.code}: ${run.stderr}`).toBe(0);
  return run.last!;
}
