/**
 * Writes launcher-client's wire types (`packages/launcher-client/src/api.ts`) from the service's own
 * OpenAPI document, as `gen-admin-api.ts` does for the console, keeping only the public paths a
 * launcher calls: `npm run client:api`. `--check` fails when the committed file differs.
 */
import path from 'node:path';
import { generatedPathsSchema, writeOrCheck } from './gen-admin-api.js';

const ROOT = path.resolve(import.meta.dirname, '..');
export const CLIENT_SCHEMA_FILE = path.join(ROOT, 'packages/launcher-client/src/api.ts');

/** The service paths the launcher client calls. */
const CLIENT_PATHS = [
  '/api/software/check-update',
  '/api/launcher/heartbeat',
  '/api/signing-keys',
  '/api/addons/updates',
  '/api/releases/by-hash/{sha256}',
  '/api/addons/{idOrSlug}',
  '/api/game/check-update',
  '/api/game/builds/{buildCode}/manifest',
];

/** The text `packages/launcher-client/src/api.ts` must have for the service as it is now. */
export function generatedClientSchema(): Promise<string> {
  return generatedPathsSchema('scripts/gen-client-api.ts', CLIENT_PATHS);
}

async function main() {
  writeOrCheck(CLIENT_SCHEMA_FILE, await generatedClientSchema(), 'npm run client:api');
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
