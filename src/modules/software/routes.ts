import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { AppContext } from '../../context.js';
import { adminScope, changesBy, scoped } from '../../http/auth.js';
import { installConditionalGet } from '../../http/conditional.js';
import { baseUrl } from '../../http/base-url.js';
import { badRequest, notFound } from '../../http/errors.js';
import { sendRenderedJson } from '../../http/reply.js';
import { ChannelQuery, LangQuery, requestLang } from '../../http/lang.js';
import { integerQuery } from '../../http/query.js';
import { ErrorResponse, IdParams, OkResponse } from '../../http/schemas.js';
import { AUTO_HALT_SWEEP_MS, RolloutService } from './rollout.js';
import { localize } from '../../domain/lang.js';
import {
  ChangelogQuery,
  ChangelogResponse,
  CheckUpdateQuery,
  CheckUpdateResponse,
  DownloadQuery,
  LatestInfoResponse,
  LatestQuery,
  PackageCreateBody,
  PackageSchema,
  PackageUpdateBody,
  RolloutHealthSchema,
  VersionCreateBody,
  VersionUpdateBody,
  VersionWithLangSchema,
} from './schemas.js';
import { downloadPath, SoftwareService } from './service.js';
import { fileSignatureFields } from '../downloads/file-signature.js';

const FileResponse = {
  200: Type.Unknown({ description: 'the file (application/octet-stream)' }),
  302: Type.Unknown({ description: 'redirect to the external link' }),
  404: ErrorResponse,
};

const VersionParams = Type.Object({ versionId: Type.String() });

export function softwareRoutes(ctx: AppContext): FastifyPluginAsyncTypebox {
  const software = new SoftwareService(ctx);
  const rollout = new RolloutService(ctx);
  const { downloads } = ctx;

  /** Serves the launcher full package's latest version (`/api/software/latest`, `/download/launcher`). */
  async function serveLauncher(request: FastifyRequest, reply: FastifyReply) {
    const latest = await software.launcherLatest();
    if (!latest) throw notFound('no launcher version is available');
    return downloads.serve(request, reply, await software.downloadTarget(latest), {
      disposition: 'attachment',
      count: () => downloads.countVersion(latest.id, false),
    });
  }

  return async (app) => {
    // Automatic halts are also evaluated without anyone reading the health (every instance, idempotent).
    const sweep = setInterval(
      () => void rollout.sweep().catch((err: unknown) => app.log.error({ err }, 'automatic halt sweep failed')),
      AUTO_HALT_SWEEP_MS,
    );
    sweep.unref();
    app.addHook('onClose', async () => clearInterval(sweep));

    await app.register(
      scoped(async (launcher) => {
        ctx.signer.install(launcher);
        launcher.get(
          '/api/software/check-update',
          {
            // Machine endpoints for launchers: browser security headers would only cost time here.
            securityHeaders: false,
            // One signature serves every device that gets the same answer (deviceId and lang uncovered).
            config: { signedQueryParams: ['slug', 'versionCode'] },
            schema: {
              tags: ['software'],
              summary: 'Does a newer version of a package exist? (launcher self-update)',
              querystring: CheckUpdateQuery,
              response: { 200: CheckUpdateResponse, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request, reply) => {
            const { slug, versionCode, deviceId } = request.query;
            if (slug === undefined || slug === '') throw badRequest('querystring.slug: is required');
            const code = integerQuery(versionCode, 'versionCode', 0, Number.MIN_SAFE_INTEGER);
            const json = await software.checkUpdate(
              slug,
              code,
              deviceId === undefined || deviceId === '' ? null : deviceId,
              requestLang(request),
              baseUrl(request, ctx.config.publicBaseUrl),
            );
            return sendRenderedJson(reply, json);
          },
        );
      }),
    );

    app.get(
      '/download/launcher',
      {
        schema: {
          tags: ['software'],
          summary: 'The latest launcher installer, for embedding in web pages',
          querystring: Type.Object(ChannelQuery),
          response: FileResponse,
        },
      },
      serveLauncher,
    );

    app.get(
      '/api/software/download/:versionId',
      {
        schema: {
          tags: ['software'],
          summary: 'Download a software version (counted; source=launcher also counts a self-update)',
          params: VersionParams,
          querystring: DownloadQuery,
          response: { ...FileResponse, 410: ErrorResponse },
        },
      },
      async (request, reply) => {
        const version = await software.downloadableVersion(request.params.versionId);
        const launcher = request.query.source === 'launcher';
        return downloads.serve(request, reply, await software.downloadTarget(version), {
          disposition: 'attachment',
          count: () => downloads.countVersion(version.id, launcher),
        });
      },
    );

    app.get(
      '/api/software/download/:versionId/delta/:fromVersionCode',
      {
        schema: {
          tags: ['software'],
          summary:
            'Download the delta update to a version from an earlier one (zstd --patch-from); counted as a download of the version',
          params: Type.Object({ versionId: Type.String(), fromVersionCode: Type.String() }),
          querystring: DownloadQuery,
          response: { ...FileResponse, 400: ErrorResponse, 410: ErrorResponse },
        },
      },
      async (request, reply) => {
        const { fromVersionCode } = request.params;
        const from = Number(fromVersionCode);
        if (!/^-?\d{1,15}$/.test(fromVersionCode)) throw badRequest('params.fromVersionCode: must be an integer');
        const version = await software.downloadableVersion(request.params.versionId);
        const launcher = request.query.source === 'launcher';
        return downloads.serve(request, reply, await software.deltaTarget(version, from), {
          disposition: 'attachment',
          count: () => downloads.countVersion(version.id, launcher),
        });
      },
    );

    // Public JSON reads revalidate with ETags; the launcher's polling endpoints stay without the hook.
    await app.register(
      scoped(async (reads) => {
        installConditionalGet(reads);
        ctx.signer.install(reads);
        reads.get(
          '/api/software',
          {
            schema: {
              tags: ['software'],
              summary: 'Software packages, each with its current latest version',
              querystring: Type.Object(LangQuery),
              response: { 200: Type.Array(PackageSchema) },
            },
          },
          async (request) => software.list(requestLang(request)),
        );
        reads.get(
          '/api/software/changelog',
          {
            schema: {
              tags: ['software'],
              summary: "A package's versions and their changelogs, newest first",
              querystring: ChangelogQuery,
              response: { 200: ChangelogResponse, 400: ErrorResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            const { slug } = request.query;
            if (slug === undefined || slug === '') throw badRequest('querystring.slug: is required');
            return software.changelog(slug, requestLang(request));
          },
        );
        reads.get(
          '/api/software/latest',
          {
            schema: {
              tags: ['software'],
              summary: "The launcher full package's latest version: the file, or with info=1 its metadata",
              querystring: LatestQuery,
              response: { ...FileResponse, 200: LatestInfoResponse },
            },
          },
          async (request, reply) => {
            if (request.query.info !== '1') return serveLauncher(request, reply);
            const lang = requestLang(request);
            const latest = await software.launcherLatest();
            if (!latest) return reply.send({ available: false });
            if (request.query.track === '1') await downloads.countVersion(latest.id, false);
            return reply.send({
              available: true,
              version: latest.version,
              versionCode: latest.versionCode,
              ...localize('changelog', latest.changelogZh, latest.changelogEn, lang),
              fileSize: latest.fileSize,
              sha256: latest.sha256,
              createdAt: latest.createdAt,
              downloadUrl:
                latest.downloadType === 'url' && latest.externalUrl ? latest.externalUrl : downloadPath(latest.id),
              downloadType: latest.downloadType,
              ...fileSignatureFields(latest.fileSignature),
              lang,
            });
          },
        );
        reads.get(
          '/api/software/:idOrSlug',
          {
            schema: {
              tags: ['software'],
              summary: 'One package with all its versions (newest versionCode first)',
              params: Type.Object({ idOrSlug: Type.String() }),
              querystring: Type.Object(LangQuery),
              response: { 200: PackageSchema, 404: ErrorResponse },
            },
          },
          async (request) => software.detail(request.params.idOrSlug, requestLang(request)),
        );
      }),
    );

    await app.register(
      adminScope(ctx.auth, async (admin) => {
        admin.addHook('onRequest', changesBy('publisher'));
        const tags = ['software (admin)'];

        admin.post(
          '/api/software',
          {
            schema: {
              tags,
              body: PackageCreateBody,
              response: { 201: PackageSchema, 400: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request, reply) =>
            reply.code(201).send(await software.createPackage(request.body, requestLang(request))),
        );

        admin.put(
          '/api/software/:id',
          {
            schema: {
              tags,
              params: IdParams,
              body: PackageUpdateBody,
              response: { 200: PackageSchema, 404: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request) => software.updatePackage(request.params.id, request.body, requestLang(request)),
        );

        admin.delete(
          '/api/software/:id',
          { schema: { tags, params: IdParams, response: { 200: OkResponse, 404: ErrorResponse } } },
          async (request) => {
            await software.deletePackage(request.params.id);
            return { ok: true as const };
          },
        );

        admin.post(
          '/api/software/:id/versions',
          {
            schema: {
              tags,
              summary: 'Publish a version; it becomes the latest of its package',
              params: IdParams,
              body: VersionCreateBody,
              response: { 201: VersionWithLangSchema, 400: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request, reply) => {
            const lang = requestLang(request);
            const version = await software.createVersion(request.params.id, request.body, lang);
            return reply.code(201).send({ ...version, lang });
          },
        );

        admin.put(
          '/api/software/versions/:versionId',
          {
            schema: {
              tags,
              summary: 'Change a version; only the fields sent change; isLatest: true moves the flag',
              params: VersionParams,
              body: VersionUpdateBody,
              response: { 200: VersionWithLangSchema, 400: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse },
            },
          },
          async (request) => {
            const lang = requestLang(request);
            return { ...(await software.updateVersion(request.params.versionId, request.body, lang)), lang };
          },
        );

        admin.delete(
          '/api/software/versions/:versionId',
          {
            schema: {
              tags,
              params: VersionParams,
              response: { 200: OkResponse, 404: ErrorResponse },
            },
          },
          async (request) => {
            await software.deleteVersion(request.params.versionId);
            return { ok: true as const };
          },
        );

        admin.get(
          '/api/admin/software/:idOrSlug',
          {
            schema: {
              tags,
              summary: 'One package with every version, scheduled ones (publishAt in the future) included',
              params: Type.Object({ idOrSlug: Type.String() }),
              querystring: Type.Object(LangQuery),
              response: { 200: PackageSchema, 404: ErrorResponse },
            },
          },
          async (request) => software.detail(request.params.idOrSlug, requestLang(request), 'admin'),
        );

        for (const [action, revoked] of [
          ['revoke', true],
          ['unrevoke', false],
        ] as const) {
          admin.post(
            `/api/software/versions/:versionId/${action}`,
            {
              schema: {
                tags,
                summary: revoked
                  ? 'Withdraw a version: not offered until unrevoked, devices on it are sent back (downgrade), downloads 410'
                  : 'Offer a withdrawn version again',
                params: VersionParams,
                response: { 200: VersionWithLangSchema, 404: ErrorResponse },
              },
            },
            async (request) => {
              const lang = requestLang(request);
              return { ...(await software.setRevoked(request.params.versionId, revoked, lang)), lang };
            },
          );
        }

        admin.get(
          '/api/admin/software/versions/:versionId/rollout',
          {
            schema: {
              tags,
              summary: 'Rollout health from stored heartbeats (applies the automatic halt when it is due)',
              params: VersionParams,
              response: { 200: RolloutHealthSchema, 404: ErrorResponse },
            },
          },
          async (request) => rollout.health(request.params.versionId),
        );
      }),
    );
  };
}
