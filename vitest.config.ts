import fs from 'node:fs';
import net from 'node:net';
import type { ViteUserConfig } from 'vitest/config';

/** PostgreSQL runs when reachable (or required with TEST_POSTGRES=1); TEST_POSTGRES=0 skips it. */
async function postgresReachable(): Promise<boolean> {
  const url = new URL(process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  return new Promise((resolve) => {
    const socket = net.connect({ host: url.hostname, port: Number(url.port || 5432) });
    socket.setTimeout(1000);
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
    socket.once('error', () => resolve(false));
  });
}

/** The console's browser tests run when Chromium is installed (or required with TEST_BROWSER=1); TEST_BROWSER=0 skips them. */
function browserWanted(): boolean {
  const wanted = process.env.TEST_BROWSER;
  if (wanted === '1' || wanted === '0') return wanted === '1';
  const present = fs.existsSync(process.env.CHROMIUM_PATH ?? '/usr/bin/chromium');
  if (!present) console.warn('Chromium not found: skipping the console browser tests (apt-get install chromium)');
  return present;
}

export default async (): Promise<ViteUserConfig> => {
  const wanted = process.env.TEST_POSTGRES;
  const postgres = wanted === '1' || (wanted !== '0' && (await postgresReachable()));
  const engines = postgres ? ['sqlite', 'postgres'] : ['sqlite'];
  const browser = browserWanted();
  return {
    test: {
      testTimeout: 60_000,
      hookTimeout: 60_000,
      pool: 'forks' as const,
      projects: [
        ...engines.map((engine) => ({
          extends: true as const,
          test: {
            name: engine,
            include: ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
            exclude: ['test/console/**', '**/node_modules/**'],
            env: { TEST_ENGINE: engine },
          },
        })),
        // Browser tests of the admin console: once, against a real service process (SQLite), in Chromium.
        {
          extends: true as const,
          test: {
            name: 'console',
            include: ['test/console/**/*.test.ts'],
            exclude: browser ? [] : ['test/console/console.test.ts', 'test/console/upload-resume.test.ts'],
            globalSetup: ['test/console/global-setup.ts'],
            testTimeout: 120_000,
            hookTimeout: 180_000,
          },
        },
      ],
    },
  };
};
