import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** Issue 45: the console's modules import one another without a circle (each page loads on its own). */

const ROOT = path.resolve(import.meta.dirname, '..');
const ADMIN = path.join(ROOT, 'admin/src');

function sources(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? sources(path.join(dir, e.name)) : [path.join(dir, e.name)]))
    .filter((file) => /\.tsx?$/.test(file) && !file.endsWith('.d.ts'));
}

/** The console's own files a file imports (type imports included: they are circles to a reader too). */
function importsOf(file: string): string[] {
  const { importedFiles } = ts.preProcessFile(fs.readFileSync(file, 'utf8'), true, true);
  return importedFiles
    .map((i) => i.fileName)
    .filter((spec) => spec.startsWith('.'))
    .map((spec) => path.resolve(path.dirname(file), spec))
    .flatMap(
      (base) => ['.ts', '.tsx', '/index.ts', '/index.tsx'].map((ext) => base + ext).find((f) => fs.existsSync(f)) ?? [],
    )
    .filter((target) => target.startsWith(ADMIN));
}

/** Every circle of the graph, each as the files along it (found by depth-first search). */
function circles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') found.push([...stack.slice(stack.indexOf(next)), next]);
      else if (state.get(next) === undefined) visit(next);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (state.get(file) === undefined) visit(file);
  return found.map((circle) => circle.map((f) => path.relative(ADMIN, f)));
}

describe('the admin console', () => {
  it('has no import circle', () => {
    const graph = new Map(sources(ADMIN).map((file) => [file, importsOf(file)]));
    expect(graph.size).toBeGreaterThan(20);
    expect(circles(graph)).toEqual([]);
  });

  it('finds a circle when there is one (the check itself)', () => {
    const graph = new Map([
      [path.join(ADMIN, 'a.ts'), [path.join(ADMIN, 'b.ts')]],
      [path.join(ADMIN, 'b.ts'), [path.join(ADMIN, 'a.ts')]],
    ]);
    expect(circles(graph)).toEqual([['a.ts', 'b.ts', 'a.ts']]);
  });
});
