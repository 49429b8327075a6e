import cookie from '@fastify/cookie';
import cors from '@fastify/cors';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import { ContentCache } from './db/content-writes.js';
import type { Config } from './config.js';
import { installAudit } from './modules/audit/log.js';
import type { AppContext } from './context.js';
import type { DatabaseHandle } from './db/index.js';
import { originGuard } from './http/auth.js';
import { answerClientError, answerFrameworkError, installErrorHandling } from './http/errors.js';
import { installInputChecks } from './http/input.js';
import { installRequestIdHeader, requestId } from './http/request-id.js';
import { requestLog } from './http/request-log.js';
import { installSecurityHeaders, securityHeadersHook } from './http/security-headers.js';
import { installBodyDeadline, serverTimeouts } from './http/timeouts.js';
import { URL_FORMATS } from './http/urls.js';
import { Metrics } from './metrics/metrics.js';
import { metricsPlugin } from './metrics/plugin.js';
import { addonRoutes } from './modules/addons/routes.js';
import { auditRoutes } from './modules/audit/routes.js';
import { authRoutes } from './modules/auth/routes.js';
import { contentRoutes } from './modules/content/routes.js';
import { consoleRoutes } from './modules/console/routes.js';
import { AuthService } from './modules/auth/service.js';
import { deviceRoutes } from './modules/devices/routes.js';
import { DeviceHousekeeping } from './modules/devices/housekeeping.js';
import { webhookRoutes } from './modules/webhooks/routes.js';
import { WebhookWorker } from './modules/webhooks/worker.js';
import { DeviceService } from './modules/devices/service.js';
import { DEFAULT_DELTA_OPTIONS, DeltaWorker } from './modules/deltas/worker.js';
import { DownloadService } from './modules/downloads/service.js';
import { feedRoutes } from './modules/feeds/routes.js';
import { fileRoutes } from './modules/files/routes.js';
import { ResumableUploads } from './modules/files/resumable.js';
import { FileService } from './modules/files/service.js';
import { StoredUploadSweep } from './modules/files/sweep.js';
import { installIdempotency } from './modules/idempotency/plugin.js';
import { GameChunks } from './modules/game/chunks.js';
import { gameRoutes } from './modules/game/routes.js';
import { signingRoutes } from './modules/signing/routes.js';
import { softwareRoutes } from './modules/software/routes.js';
import { statsRoutes } from './modules/stats/routes.js';
import { healthRoutes, Readiness } from './modules/system/health.js';
import { systemRoutes } from './modules/system/routes.js';
import { DatabaseLimits, RedisLimits } from './http/shared-limits.js';
import { Signer } from './modules/signing/signer.js';
import type { Storage } from './storage/storage.js';

export interface AppDeps {
  config: Config;
  database: DatabaseHandle;
  storage: Storage;
  /** Pino options, or false for silence (tests). */
  logger?: boolean | object;
}

export interface App {
  readonly server: FastifyInstance;
  readonly ctx: AppContext;
  /** `/readyz` answers 503 from now on (the instance keeps serving until `close`). */
  beginShutdown(): void;
  /** Writes buffered heartbeats and closes the server; the database and store stay open. */
  close(): Promise<void>;
}

export async function buildApp(deps: AppDeps): Promise<App> {
  const { config, database, storage } = deps;
  const server = Fastify({
    logger: deps.logger ?? { level: config.logLevel },
    trustProxy: config.trustProxy,
    bodyLimit: 2 * 1024 * 1024,
    // Bodies are never coerced (`name: 123` is a 400); query values are declared as strings.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: true, allErrors: false, formats: URL_FORMATS } },
    routerOptions: { ignoreTrailingSlash: true },
    ...serverTimeouts(config.timeouts),
    clientErrorHandler: answerClientError,
    frameworkErrors: answerFrameworkError,
    requestIdHeader: false,
    genReqId: requestId,
    childLoggerFactory: requestLog,
    // A line per request only at debug: launchers poll and beat every minute, and at info those lines
    // would cost more than the answers. Failures are logged by the error handler at any level.
    logController: new LogController({
      disableRequestLogging: !['debug', 'trace'].includes(config.logLevel),
      requestIdLogLabel: 'requestId',
    }),
  }).withTypeProvider<TypeBoxTypeProvider>();

  const db = database.db;
  const metrics = config.metrics
    ? new Metrics({
        database,
        devicesOnline: () => ctx.devices.countOnline(),
        gameStore: () => ctx.gameChunks.figures(),
      })
    : null;
  const readiness = new Readiness();
  const files = new FileService(db, storage, metrics?.uploaded);
  const gameChunks = new GameChunks(db, storage, metrics?.gameChunksSwept);
  const cache = new ContentCache(db, config.cacheCheckMs, metrics?.cacheLookup);
  const signer = new Signer(db, cache, {
    keyFile: config.signingKeyFile,
    overlapDays: config.signingOverlapDays,
    publicBaseUrl: config.publicBaseUrl,
  });
  await signer.init();
  const limits = config.redis ? new RedisLimits(config.redis.url, config.redis.prefix) : new DatabaseLimits(db);
  const ctx: AppContext = {
    config,
    db,
    reads: database.reads,
    engine: database.engine,
    storage,
    cache,
    signer,
    auth: new AuthService(db, config.appName),
    files,
    resumable: new ResumableUploads(storage, files, {
      maxBytes: config.maxUploadBytes,
      expiryHours: config.uploadExpiryHours,
    }),
    uploadSweep: new StoredUploadSweep(
      db,
      storage,
      files,
      config.uploadExpiryHours * 3600_000,
      metrics?.storedUploadsSwept,
      undefined,
      (before) => gameChunks.sweep(before),
    ),
    gameChunks,
    downloads: new DownloadService(db, storage, files, {
      engine: database.engine,
      offload: config.downloadOffload,
      onCounted: metrics?.downloadCounted,
    }),
    limits,
    webhooks: new WebhookWorker(db, { ...config.webhooks, appName: config.appName }),
    deltas: new DeltaWorker(db, storage, cache, { ...DEFAULT_DELTA_OPTIONS, ...config.deltas }, server.log),
    housekeeping: new DeviceHousekeeping(database, {
      deviceDays: config.deviceRetentionDays,
      ipDays: config.ipRetentionDays,
    }),
    devices: new DeviceService(
      database,
      limits,
      {
        flushMs: config.heartbeatFlushMs,
        devicesPerAddressHour: config.devicesPerAddressHour,
        engine: database.engine,
      },
      (err) => server.log.error({ err }, 'heartbeat flush failed'),
      metrics?.heartbeats,
    ),
  };

  installErrorHandling(server);
  installRequestIdHeader(server);
  if (metrics) await server.register(metricsPlugin(metrics, config.metricsToken));
  installBodyDeadline(server, config.timeouts.body);
  installInputChecks(server);
  installAudit(server, db);
  installIdempotency(server, db, ['/api/software/:id/versions', '/api/releases', '/api/admin/game/builds']);
  server.decorateRequest('admin', null);
  await server.register(cookie);
  const corsOrigins = config.corsOrigin === '*' ? [] : config.corsOrigin.split(',').map((o) => o.trim());
  // A malformed preflight gets the preflight headers rather than the plugin's text/plain 400.
  await server.register(cors, {
    origin: config.corsOrigin === '*' ? '*' : corsOrigins,
    strictPreflight: false,
    // A web page may verify signed answers too, and follow the catalogue's pages. One string, joined
    // here once: the plugin joins a list again on every request (about 2 µs of a heartbeat's time).
    exposedHeaders: ['Content-Digest', 'Signature-Input', 'Signature', 'Link', 'X-Total-Count'].join(', '),
  });
  server.addHook(
    'onRequest',
    originGuard(config.publicBaseUrl === null ? corsOrigins : [...corsOrigins, new URL(config.publicBaseUrl).origin]),
  );
  installSecurityHeaders(
    server,
    securityHeadersHook({
      // A JSON API whose images and files are embedded by the community website on another origin.
      contentSecurityPolicy: false,
      crossOriginResourcePolicy: { policy: 'cross-origin' },
      crossOriginEmbedderPolicy: false,
      // HTTPS policy belongs to the operator's TLS terminator, not to a service that may run on plain HTTP.
      strictTransportSecurity: false,
    }),
  );
  await server.register(swagger, {
    openapi: {
      info: {
        title: 'Launcher distribution and addon catalogue',
        version: '1.0.0',
        description: 'Launcher self-update, downloads, addon catalogue, site content and launcher heartbeats.',
      },
      components: {
        securitySchemes: {
          session: { type: 'apiKey', in: 'cookie', name: 'sid' },
          bearer: { type: 'http', scheme: 'bearer' },
        },
      },
    },
  });
  await server.register(swaggerUi, { routePrefix: '/docs' });
  server.get('/openapi.json', { schema: { hide: true } }, async () => server.swagger());

  await server.register(systemRoutes());
  await server.register(healthRoutes(ctx, readiness));
  await server.register(authRoutes(ctx));
  await server.register(auditRoutes(ctx));
  await server.register(fileRoutes(ctx));
  await server.register(softwareRoutes(ctx));
  await server.register(gameRoutes(ctx));
  await server.register(signingRoutes(ctx));
  await server.register(addonRoutes(ctx));
  await server.register(contentRoutes(ctx));
  await server.register(feedRoutes(ctx));
  await server.register(webhookRoutes(ctx));
  await server.register(deviceRoutes(ctx));
  await server.register(statsRoutes(ctx));
  await server.register(consoleRoutes());

  await ctx.auth.bootstrapAdmin(config.adminUsername, config.adminPassword, server.log);

  return {
    server,
    ctx,
    beginShutdown: () => readiness.beginShutdown(),
    async close() {
      // A delta being made is abandoned first: its job goes to another instance at once.
      await ctx.deltas.stop();
      ctx.housekeeping.stop();
      ctx.resumable.stop();
      await ctx.uploadSweep.stop();
      await ctx.webhooks.stop();
      const closed = server.close();
      // What was acknowledged so far is written now, whatever requests are still being answered.
      await ctx.devices.flush();
      // Node keeps a connection alive after the answer to a request that was in flight when the
      // server closed: close each as soon as it is idle, or the instance would wait out the idle
      // timeout (60 s) and an orchestrator's SIGKILL would come first.
      const idle = setInterval(() => server.server.closeIdleConnections(), 100);
      try {
        await closed;
      } finally {
        clearInterval(idle);
      }
      await ctx.devices.close();
      await limits.close();
    },
  };
}
