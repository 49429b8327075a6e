/**
 * Writes patchwell-publish's wire types (`packages/publish/src/schema.ts`) from the service's own
 * OpenAPI document, as `gen-client-api.ts` does for the launcher client, keeping only the paths
 * `launcher-publish` calls: `npm run publish:api`. `--check` fails when the committed file differs.
 */
import path from 'node:path';
import { generatedPathsSchema, writeOrCheck } from './gen-admin-api.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const PUBLISH_SCHEMA_FILE = path.join(ROOT, 'packages/publish/src/schema.ts');

/** The service paths `launcher-publish` calls. */
const PUBLISH_PATHS = [
  '/api/admin/me',
  '/api/software',
  '/api/admin/uploads',
  '/api/admin/uploads/{id}',
  '/api/admin/software/{idOrSlug}',
  '/api/software/{id}/versions',
  '/api/software/versions/{versionId}',
  '/api/software/versions/{versionId}/revoke',
  '/api/software/versions/{versionId}/unrevoke',
  '/api/admin/addons/{idOrSlug}',
  '/api/releases',
  '/api/admin/game/chunks/missing',
  '/api/admin/game/chunks/{sha256}',
  '/api/admin/game/builds',
];

/** The text `packages/publish/src/schema.ts` must have for the service as it is now. */
export function generatedPublishSchema(): Promise<string> {
  return generatedPathsSchema('scripts/gen-publish-api.ts', PUBLISH_PATHS);
}

async function main() {
  writeOrCheck(PUBLISH_SCHEMA_FILE, await generatedPublishSchema(), 'npm run publish:api');
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
