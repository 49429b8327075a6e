import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '../..');
const ADMIN = path.join(ROOT, 'admin');
const BUILT = path.join(ADMIN, 'dist/index.html');

function newestMtime(entry: string): number {
  const stat = fs.statSync(entry, { throwIfNoEntry: false });
  if (!stat) return 0;
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(0, ...fs.readdirSync(entry).map((name) => newestMtime(path.join(entry, name))));
}

/** The browser tests drive the built console that the service serves: build it when missing or older than its sources. */
export default function setup() {
  const built = fs.statSync(BUILT, { throwIfNoEntry: false })?.mtimeMs ?? 0;
  const sources = Math.max(
    ...['src', 'index.html', 'vite.config.ts', 'postcss.config.mjs'].map((p) => newestMtime(path.join(ADMIN, p))),
  );
  if (built >= sources) return;
  execFileSync(
    process.execPath,
    [
      path.join(ROOT, 'node_modules/vite/bin/vite.js'),
      'build',
      '--config',
      'admin/vite.config.ts',
      '--logLevel',
      'warn',
    ],
    {
      cwd: ROOT,
      stdio: 'inherit',
      // Vitest runs with NODE_ENV=test; the console is always built as production (React's production build).
      env: { ...process.env, NODE_ENV: 'production' },
    },
  );
}
