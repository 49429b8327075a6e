// First: on a Node that package.json's engines exclude, one line and exit 1 before anything loads.
import '../scripts/node-version.mjs';
import { buildApp } from './app.js';
import { ConfigError, loadConfig, startupNotes, startupWarnings } from './config.js';
import { openDatabase } from './db/index.js';
import { brokenBuildWarnings } from './modules/game/service.js';
import { HeapGrowth } from './modules/system/heap.js';
import { openStorage } from './storage/index.js';

async function main(): Promise<void> {
  // The heap's growth follows its live size (see HeapGrowth), unless node's command line chose it
  // (NODE_OPTIONS cannot carry this flag).
  const given = process.execArgv.some((arg) => arg.startsWith('--heap-growing-percent'));
  const heapGrowth = given ? null : new HeapGrowth();
  const config = loadConfig();
  const database = await openDatabase(config.database);
  const storage = await openStorage(config.storage);
  const app = await buildApp({ config, database, storage });
  const log = app.server.log;

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    // Readiness first: the load balancer sees /readyz fail and moves traffic away while this
    // instance still answers what reaches it; only then does it stop taking requests.
    app.beginShutdown();
    log.info(`${signal}: not ready; draining for ${config.shutdownDrainMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
    log.info('closing; writing buffered heartbeats');
    try {
      await app.close();
      await storage.close?.();
      await database.close();
      heapGrowth?.stop();
      process.exit(0);
    } catch (err) {
      log.error({ err }, 'shutdown failed');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));

  await app.server.listen({ port: config.port, host: config.host });
  const where = config.database.kind === 'sqlite' ? `SQLite ${config.database.file}` : 'PostgreSQL';
  const store = config.storage.kind === 'local' ? `folder ${config.storage.root}` : `s3://${config.storage.bucket}`;
  log.info(`database: ${where}; files: ${store}; admin console at /admin, API docs at /docs`);
  for (const note of startupNotes(config)) log.info(note);
  for (const warning of startupWarnings(config)) log.warn(warning);
  for (const warning of await brokenBuildWarnings(app.ctx.db)) log.warn(warning);
  // Retention and the online history: each instance tries every minute, one at a time runs.
  app.ctx.housekeeping.start((err) => log.error({ err }, 'device housekeeping failed'));
  app.ctx.resumable.start(10 * 60_000, (err) => log.error({ err }, 'expired upload sweep failed'));
  app.ctx.uploadSweep.start((err) => log.error({ err }, 'sweep of stored files nothing names failed'));
  app.ctx.fingerprints.start((err) => log.error({ err }, 'fingerprinting release folders failed'));
  app.ctx.webhooks.start((err) => log.error({ err }, 'webhook delivery failed'));
  if (config.deltas.enabled) await app.ctx.deltas.launch((err) => log.error({ err }, 'delta job failed'));
}

main().catch((err: unknown) => {
  if (err instanceof ConfigError) {
    console.error(`configuration error: ${err.message}`);
  } else {
    console.error(err);
  }
  process.exit(1);
});
