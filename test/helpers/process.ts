import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '../..');

export interface ServerProcess {
  url: string;
  port: number;
  child: ChildProcess;
  /** Everything the process printed so far. */
  output(): string;
  /** Sends `signal` and resolves with the exit code once the process ended. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/**
 * The TCP ports process `pid` listens on (Linux: its descriptors' socket inodes, looked up among the
 * listening sockets of /proc/net/tcp and tcp6). A port from freePort() can be taken by any other
 * process before the child binds it (with test files side by side, another file's server): a helper
 * that starts a server checks the port is its child's before it talks to it.
 */
export function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  let fds: string[];
  try {
    fds = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  for (const fd of fds) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match?.[1]) inodes.add(match[1]);
    } catch {
      // closed meanwhile
    }
  }
  const ports: number[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
      const fields = line.trim().split(/\s+/);
      const [, local, , state, , , , , , inode] = fields;
      if (state === '0A' && inode && inodes.has(inode) && local)
        ports.push(Number.parseInt(local.split(':')[1] ?? '', 16));
    }
  }
  return ports;
}

/**
 * Starts the real service as a child process on loopback and waits until it answers: from its
 * sources (`src/server.ts` through tsx), or as built (`dist/server.js`, plain node: what `npm start`
 * runs, and what benchmarks measure). `nodeArgs` go to node before the entry (e.g. `--cpu-prof`, or
 * an `--import` probe for benchmarks).
 */
export async function startServer(
  env: Record<string, string>,
  timeoutMs = 30_000,
  nodeArgs: readonly string[] = [],
  from: 'sources' | 'build' = 'sources',
): Promise<ServerProcess> {
  const entry =
    from === 'build'
      ? [...nodeArgs, path.join(ROOT, 'dist/server.js')]
      : ['--import', 'tsx', ...nodeArgs, path.join(ROOT, 'src/server.ts')];
  // Port 0: the child binds a free port itself, read back from its listening socket, so no other
  // process can take the port between a choice here and the child's bind.
  const child = spawn(process.execPath, entry, {
    cwd: ROOT,
    env: { ...process.env, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'warn', SHUTDOWN_DRAIN_MS: '0', ...env },
    // An IPC channel for probes loaded with `nodeArgs` (bench/loop-probe.ts); unused otherwise.
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const deadline = Date.now() + timeoutMs;
  let port = 0;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited early (${child.exitCode}):\n${output}`);
    port ||= listeningPorts(child.pid ?? 0)[0] ?? 0;
    try {
      if (port !== 0 && (await fetch(`http://127.0.0.1:${port}/healthz`)).ok) break;
    } catch {
      // not answering yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`server did not start within ${timeoutMs} ms:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    port,
    child,
    output: () => output,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** The session cookie (`name=value`) of an administrator logged in to the service at `url`. */
export async function loginCookie(url: string, password: string, username = 'admin'): Promise<string> {
  const login = await fetch(`${url}/api/admin/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username, password }),
  });
  if (login.status !== 200) throw new Error(`login → ${login.status}: ${await login.text()}`);
  return (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
}
