/**
 * `npm run dev`: the API with reload on change (tsx watch) and the admin console with hot reload
 * (Vite dev server proxying /api and /uploads to the API). Open the URL Vite prints, under /admin/.
 */
// First: on a Node that package.json's engines exclude, one line and exit 1 before anything loads.
import './node-version.mjs';
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
const bin = (name: string) => path.join(ROOT, 'node_modules/.bin', name);
const port = process.env.PORT ?? '3000';

const children: ChildProcess[] = [
  spawn(bin('tsx'), ['watch', 'src/server.ts'], { cwd: ROOT, stdio: 'inherit', env: { ...process.env, PORT: port } }),
  spawn(bin('vite'), ['--config', 'admin/vite.config.ts'], {
    cwd: ROOT,
    stdio: 'inherit',
    env: { ...process.env, ADMIN_API_URL: process.env.ADMIN_API_URL ?? `http://127.0.0.1:${port}` },
  }),
];

let stopping = false;
function stop(code: number) {
  if (stopping) return;
  stopping = true;
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
  setTimeout(() => process.exit(code), 2000).unref();
}
for (const child of children) child.once('exit', (code) => stop(code ?? 0));
process.once('SIGINT', () => stop(0));
process.once('SIGTERM', () => stop(0));
