import cookie from '@fastify/cookie';
import cors from '@fastify/cors';
import helmet from '@fastify/helmet';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import { ContentCache } from './cache.js';
import type { Config } from './config.js';
import type { AppContext } from './context.js';
import type { DatabaseHandle } from './db/index.js';
import { installErrorHandling } from './http/errors.js';
import { addonRoutes } from './modules/addons/routes.js';
import { authRoutes } from './modules/auth/routes.js';
import { contentRoutes } from './modules/content/routes.js';
import { consoleRoutes } from './modules/console/routes.js';
import { AuthService } from './modules/auth/service.js';
import { deviceRoutes } from './modules/devices/routes.js';
import { DeviceService } from './modules/devices/service.js';
import { DownloadService } from './modules/downloads/service.js';
import { fileRoutes } from './modules/files/routes.js';
import { FileService } from './modules/files/service.js';
import { signingRoutes } from './modules/signing/routes.js';
import { softwareRoutes } from './modules/software/routes.js';
import { statsRoutes } from './modules/stats/routes.js';
import { systemRoutes } from './modules/system/routes.js';
import { Signer } from './signing.js';
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
    ajv: { customOptions: { coerceTypes: false, removeAdditional: true, allErrors: false } },
    routerOptions: { ignoreTrailingSlash: true },
    // A line per request only at debug: launchers poll and beat every minute, and at info those lines
    // would cost more than the answers. Failures are logged by the error handler at any level.
    logController: new LogController({ disableRequestLogging: !['debug', 'trace'].includes(config.logLevel) }),
  }).withTypeProvider<TypeBoxTypeProvider>();

  const db = database.db;
  const files = new FileService(db, storage);
  const cache = new ContentCache(db, config.cacheCheckMs);
  const signer = new Signer(db, cache, { keyFile: config.signingKeyFile, overlapDays: config.signingOverlapDays });
  await signer.init();
  const ctx: AppContext = {
    config,
    db,
    engine: database.engine,
    storage,
    cache,
    signer,
    auth: new AuthService(db),
    files,
    downloads: new DownloadService(db, storage, files),
    devices: new DeviceService(db, config.heartbeatFlushMs, (err) =>
      server.log.error({ err }, 'heartbeat flush failed'),
    ),
  };

  installErrorHandling(server);
  server.decorateRequest('admin', null);
  await server.register(cookie);
  await server.register(cors, {
    origin: config.corsOrigin === '*' ? '*' : config.corsOrigin.split(','),
    // A web page may verify signed answers too.
    exposedHeaders: ['X-Signature'],
  });
  await server.register(helmet, {
    // A JSON API whose images and files are embedded by the community website on another origin.
    contentSecurityPolicy: false,
    crossOriginResourcePolicy: { policy: 'cross-origin' },
    crossOriginEmbedderPolicy: false,
    // HTTPS policy belongs to the operator's TLS terminator, not to a service that may run on plain HTTP.
    strictTransportSecurity: false,
  });
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

  await server.register(systemRoutes(ctx));
  await server.register(authRoutes(ctx));
  await server.register(fileRoutes(ctx));
  await server.register(softwareRoutes(ctx));
  await server.register(signingRoutes(ctx));
  await server.register(addonRoutes(ctx));
  await server.register(contentRoutes(ctx));
  await server.register(deviceRoutes(ctx));
  await server.register(statsRoutes(ctx));
  await server.register(consoleRoutes());

  await ctx.auth.bootstrapAdmin(config.adminUsername, config.adminPassword, server.log);

  return {
    server,
    ctx,
    async close() {
      await server.close();
      await ctx.devices.close();
    },
  };
}
