import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CLIENT_SCHEMA_FILE, generatedClientSchema } from '../../../scripts/gen-client-api.js';

describe("launcher-client's wire types", () => {
  it('are generated from the current /openapi.json (else run `npm run client:api`)', async () => {
    const committed = fs.readFileSync(CLIENT_SCHEMA_FILE, 'utf8');
    expect(committed === (await generatedClientSchema()), 'packages/launcher-client/src/api.ts is out of date').toBe(
      true,
    );
  });
});
