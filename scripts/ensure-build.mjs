#!/usr/bin/env node
/**
 * Builds the service (tsc → dist/) and the admin console (vite → admin/dist/) only when their
 * sources changed since the last build: `npm start` runs this first, so the first start builds and
 * every restart after it is listening within a second or two. The sources' digest is kept beside
 * each build (`.build-hash`). Where the sources are absent (the Docker image, a copy of a built
 * tree installed with --omit=dev) what is built is used as it is.
 *
 * Plain JavaScript on purpose: it runs before anything is compiled, without dev dependencies.
 */
/* global console, process */
// First: on a Node that package.json's engines exclude, one line and exit 1 before building anything.
import './node-version.mjs';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');

const PARTS = [
  {
    name: 'the service',
    script: 'build:server',
    sources: 'src',
    inputs: ['src', 'packages/launcher-client/src', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json'],
    output: 'dist/server.js',
    stamp: 'dist/.build-hash',
  },
  {
    name: 'the admin console',
    script: 'build:admin',
    sources: 'admin/src',
    inputs: ['admin', 'packages/publish/src', 'package-lock.json'],
    output: 'admin/dist/index.html',
    stamp: 'admin/dist/.build-hash',
  },
];

/** Skipped inside input folders: build outputs and dependencies. */
const SKIP = new Set(['dist', 'node_modules']);

function files(entry) {
  const full = path.join(ROOT, entry);
  if (!fs.existsSync(full)) return [];
  if (fs.statSync(full).isFile()) return [entry];
  return fs
    .readdirSync(full, { withFileTypes: true })
    .filter((e) => !SKIP.has(e.name))
    .flatMap((e) => files(path.join(entry, e.name)));
}

function digest(inputs) {
  const hash = createHash('sha256');
  for (const file of inputs.flatMap(files).sort()) {
    hash.update(`${file}\0`);
    hash.update(fs.readFileSync(path.join(ROOT, file)));
  }
  return hash.digest('hex');
}

for (const part of PARTS) {
  const sources = part.sources;
  const output = path.join(ROOT, part.output);
  const stamp = path.join(ROOT, part.stamp);
  if (!fs.existsSync(path.join(ROOT, sources))) {
    if (fs.existsSync(output)) continue;
    console.error(
      `ensure-build: neither the sources (${sources}/) nor the build of ${part.name} (${part.output}) exist`,
    );
    process.exit(1);
  }
  const wanted = digest(part.inputs);
  const built = fs.existsSync(output) && fs.existsSync(stamp);
  if (built && fs.readFileSync(stamp, 'utf8') === wanted) continue;
  const why = built ? 'its sources changed since the last build' : 'the first build: a minute or two';
  console.log(`ensure-build: building ${part.name} (${why})`);
  const run = spawnSync('npm', ['run', '--silent', part.script], { cwd: ROOT, stdio: 'inherit' });
  if (run.status !== 0) process.exit(run.status ?? 1);
  fs.writeFileSync(stamp, wanted);
}
