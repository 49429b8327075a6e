import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort, listeningPorts } from './process.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Debian's nginx (`apt-get install nginx`), or `NGINX_PATH`. */
export const NGINX = process.env.NGINX_PATH ?? '/usr/sbin/nginx';

/** The snippet `deploy/nginx.conf` includes in its offload location: tests and benchmarks run the one we ship. */
export const OFFLOAD_SNIPPET = path.join(ROOT, 'deploy/nginx-offload.conf');

/** nginx runs when installed (or required with TEST_NGINX=1, as CI does); TEST_NGINX=0 skips it. */
export function nginxWanted(): boolean {
  const wanted = process.env.TEST_NGINX;
  if (wanted === '1' || wanted === '0') return wanted === '1';
  const present = fs.existsSync(NGINX);
  if (!present) console.warn(`nginx not found at ${NGINX}: skipping the nginx tests (apt-get install nginx)`);
  return present;
}

export interface NginxOptions {
  /** `host:port` of the service behind nginx. */
  upstream: string;
  /** The local store's folder. */
  storeRoot: string;
  /** The service's DOWNLOAD_OFFLOAD_PREFIX: nginx's internal location for offloaded downloads. */
  offloadPrefix: string;
}

export interface NginxProcess {
  url: string;
  /** nginx's own answer for a stored file, without the service: `${url}/direct/<key>`. */
  directUrl: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts nginx in the foreground on a loopback port, with its configuration, pid, logs and temp
 * files in a folder of its own: a reverse proxy to the service with the offload location, and
 * `/direct/` serving the store by itself (the baseline of the benchmarks).
 */
export async function startNginx(options: NginxOptions): Promise<NginxProcess> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-nginx-'));
  // A port from freePort() can be taken before nginx binds it (by another test file's server): nginx
  // then exits "Address already in use" and starts again on another one.
  for (let attempt = 1; ; attempt++) {
    const started = await launchNginx(dir, options, await freePort());
    if (started !== 'address-in-use') return started;
    if (attempt === 5) throw new Error('nginx found its port taken five times');
  }
}

async function launchNginx(dir: string, options: NginxOptions, port: number): Promise<NginxProcess | 'address-in-use'> {
  fs.rmSync(path.join(dir, 'error.log'), { force: true });
  const store = `${path.resolve(options.storeRoot)}/`;
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']
    .map((kind) => `${kind}_temp_path ${path.join(dir, kind)};`)
    .join('\n  ');
  fs.writeFileSync(
    path.join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
${process.getuid?.() === 0 ? 'user root;' : ''}
pid ${path.join(dir, 'nginx.pid')};
error_log ${path.join(dir, 'error.log')} warn;
events { worker_connections 1024; }
http {
  access_log off;
  ${temp}
  default_type application/octet-stream;
  sendfile on;
  upstream service {
    server ${options.upstream};
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://service;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
    }
    location ${options.offloadPrefix} {
      internal;
      alias ${store};
      include ${OFFLOAD_SNIPPET};
    }
    location /direct/ {
      alias ${store};
    }
  }
}
`,
  );
  const child = spawn(NGINX, ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-e', path.join(dir, 'error.log')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  // Ready once nginx itself listens on the port (an answer there could come from another process).
  while (!listeningPorts(child.pid ?? 0).includes(port)) {
    if (child.exitCode !== null) {
      const log = fs.readFileSync(path.join(dir, 'error.log'), 'utf8');
      if (/Address already in use/.test(log)) return 'address-in-use';
      throw new Error(`nginx exited (${child.exitCode}): ${output}${log}`);
    }
    if (Date.now() > deadline) throw new Error(`nginx did not listen within 10 s: ${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    url,
    directUrl: `${url}/direct/`,
    child,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
