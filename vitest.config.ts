import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
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

/**
 * The test files that run once, in the project `once`, instead of once per engine (projects `sqlite` and
 * `postgres`). Every other file under test/ and each package's test/ (the console's aside) touches the
 * service's database or its store, and runs on each engine. test/run-once.test.ts fails when a file
 * here opens a database engine-specifically (TEST_ENGINE, test/helpers/db.ts) and when a test file is
 * in no project.
 */
export const RUN_ONCE = [
  // Pure units and checks of the repository: no database, no store.
  'test/admin-imports.test.ts',
  'test/build.test.ts',
  'test/config.test.ts',
  'test/domain.test.ts',
  'test/game-manifest.test.ts',
  'test/heap.test.ts',
  'test/node-version.test.ts',
  'test/publisher-keys-log.test.ts',
  'test/readme.test.ts',
  'test/rollout-rule.test.ts',
  'test/run-once.test.ts',
  'test/zstd.test.ts',
  // The launcher client's tests: they test the client, against a service started in-process on the
  // project's engine (test/helpers/app.ts), which is no part of what they test. tamper.test.ts is not
  // here: its two instances behind one balancer share one PostgreSQL database.
  'packages/launcher-client/test/addons-safety.test.ts',
  'packages/launcher-client/test/addons.test.ts',
  'packages/launcher-client/test/api-types.test.ts',
  'packages/launcher-client/test/delta.test.ts',
  'packages/launcher-client/test/download.test.ts',
  'packages/launcher-client/test/errors.test.ts',
  'packages/launcher-client/test/events.test.ts',
  'packages/launcher-client/test/exe.test.ts',
  'packages/launcher-client/test/fastcdc.test.ts',
  'packages/launcher-client/test/fingerprint.test.ts',
  'packages/launcher-client/test/flow.test.ts',
  'packages/launcher-client/test/game-client.test.ts',
  'packages/launcher-client/test/game-machine.test.ts',
  'packages/launcher-client/test/game-mirrors-adoption.test.ts',
  'packages/launcher-client/test/game-rules.test.ts',
  'packages/launcher-client/test/hasher.test.ts',
  'packages/launcher-client/test/heartbeat.test.ts',
  'packages/launcher-client/test/http-signature.test.ts',
  'packages/launcher-client/test/keys.test.ts',
  'packages/launcher-client/test/lifecycle.test.ts',
  'packages/launcher-client/test/minisign-client.test.ts',
  'packages/launcher-client/test/minisign.test.ts',
  'packages/launcher-client/test/pack.test.ts',
  'packages/launcher-client/test/replay.test.ts',
  'packages/launcher-client/test/windows-addons.test.ts',
  'packages/launcher-client/test/windows-exe.test.ts',
  'packages/launcher-client/test/windows-game-in-use.test.ts',
  'packages/launcher-client/test/windows-game.test.ts',
  // The publisher's tests, likewise against a service started in-process.
  'packages/publish/test/api-types.test.ts',
  'packages/publish/test/api.test.ts',
  'packages/publish/test/ci.test.ts',
  'packages/publish/test/cli.test.ts',
  'packages/publish/test/game.test.ts',
  'packages/publish/test/minisign-cli.test.ts',
  'packages/publish/test/minisign.test.ts',
  'packages/publish/test/pack.test.ts',
  'packages/publish/test/progress.test.ts',
  'packages/publish/test/tus.test.ts',
];

/** The files of each engine's project: every test file but the console's and the run-once ones. */
export const PER_ENGINE = {
  include: ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
  exclude: ['test/console/**', '**/node_modules/**', ...RUN_ONCE],
};

/** The console's browser tests, in a project of their own. */
export const CONSOLE_INCLUDE = ['test/console/**/*.test.ts'];

/**
 * The engine of the service that the run-once files start: SQLite, or TEST_ONCE_ENGINE (`postgres`
 * where better-sqlite3 cannot load, as in CI's Node 20 run of the client suites).
 */
function onceEngine(): 'sqlite' | 'postgres' {
  const engine = process.env.TEST_ONCE_ENGINE ?? 'sqlite';
  if (engine !== 'sqlite' && engine !== 'postgres') {
    throw new Error(`TEST_ONCE_ENGINE must be sqlite or postgres, not "${engine}"`);
  }
  return engine;
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
      // Files side by side, two at least (Vitest's default is one fewer than the cores: one on CI's
      // two): most of a file's time is waiting on the processes, timers and servers it starts.
      maxWorkers: Math.max(2, os.availableParallelism() - 1),
      projects: [
        ...engines.map((engine) => ({
          extends: true as const,
          test: {
            name: engine,
            ...PER_ENGINE,
            env: { TEST_ENGINE: engine },
          },
        })),
        { extends: true as const, test: { name: 'once', include: RUN_ONCE, env: { TEST_ENGINE: onceEngine() } } },
        // Browser tests of the admin console: once, against a real service process (SQLite), in Chromium.
        {
          extends: true as const,
          test: {
            name: 'console',
            include: CONSOLE_INCLUDE,
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
