import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONSOLE_INCLUDE, PER_ENGINE, RUN_ONCE } from '../vitest.config.js';

/**
 * Issue 55: a test file runs on each engine only when it touches the database or the store; the files
 * of vitest.config.ts's RUN_ONCE run once. None of them may choose what it does by the engine, and no
 * test file may be left out of every project.
 */

const ROOT = path.resolve(import.meta.dirname, '..');

/** The test files under `dir` (relative to the repository's root), outside node_modules. */
function testFiles(dir = ''): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const file = path.posix.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' || entry.name === '.git' ? [] : testFiles(file);
    return file.endsWith('.test.ts') ? [file] : [];
  });
}

/** Whether a project of `include` and `exclude` runs `file`. */
const runs = (file: string, include: readonly string[], exclude: readonly string[] = []) =>
  include.some((glob) => path.matchesGlob(file, glob)) && !exclude.some((glob) => path.matchesGlob(file, glob));

/** Opening the database of the run's engine, or asking which engine runs. */
const ENGINE_SPECIFIC = [/\bTEST_ENGINE\b/, /helpers\/db\.js'/];

/**
 * Where `file` (relative to the root), or a helper of its own folder that it imports (`./…`, and theirs
 * in turn), asks for the engine: `file:line: text` each.
 */
function engineSpecific(file: string, seen = new Set<string>()): string[] {
  if (seen.has(file)) return [];
  seen.add(file);
  const source = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const found = source
    .split('\n')
    .flatMap((line, i) => (ENGINE_SPECIFIC.some((p) => p.test(line)) ? [`${file}:${i + 1}: ${line.trim()}`] : []));
  const helpers = [...source.matchAll(/from '\.\/([^']+)\.js'/g)].map((m) =>
    path.join(path.dirname(file), `${m[1]}.ts`),
  );
  return [...found, ...helpers.flatMap((helper) => engineSpecific(helper, seen))];
}

describe('the files that run once (vitest.config.ts RUN_ONCE)', () => {
  it('are test files that exist, each named once', () => {
    for (const file of RUN_ONCE) expect(fs.existsSync(path.join(ROOT, file)), file).toBe(true);
    expect(RUN_ONCE.every((file) => file.endsWith('.test.ts'))).toBe(true);
    expect(new Set(RUN_ONCE).size).toBe(RUN_ONCE.length);
  });

  it('never ask which engine runs, nor open a database of their own (test/helpers/db.ts)', () => {
    expect(RUN_ONCE.flatMap((file) => engineSpecific(file))).toEqual([]);
  });

  it('the check finds a file that does: tamper.test.ts, whose two instances share one PostgreSQL database', () => {
    expect(engineSpecific('packages/launcher-client/test/tamper.test.ts')).toEqual([
      expect.stringMatching(/^packages\/launcher-client\/test\/tamper\.test\.ts:\d+: import \{ ENGINE \}/),
    ]);
    expect(RUN_ONCE).not.toContain('packages/launcher-client/test/tamper.test.ts');
  });
});

describe('every test file', () => {
  it("is in a project (once, each engine's, the console's), and a run-once file in no other", () => {
    const every = testFiles();
    const once = every.filter((file) => runs(file, RUN_ONCE));
    const perEngine = every.filter((file) => runs(file, PER_ENGINE.include, PER_ENGINE.exclude));
    const console = every.filter((file) => runs(file, CONSOLE_INCLUDE));
    expect(every.length).toBeGreaterThan(90);
    expect(once).toHaveLength(RUN_ONCE.length);
    expect(every.filter((file) => ![once, perEngine, console].some((project) => project.includes(file)))).toEqual([]);
    expect(once.filter((file) => perEngine.includes(file) || console.includes(file))).toEqual([]);
  });
});
