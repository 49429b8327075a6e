import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generatedPublishSchema, PUBLISH_SCHEMA_FILE } from '../../../scripts/gen-publish-api.js';

describe("patchwell-publish's wire types", () => {
  it('are generated from the current /openapi.json (else run `npm run publish:api`)', async () => {
    const committed = fs.readFileSync(PUBLISH_SCHEMA_FILE, 'utf8');
    expect(committed === (await generatedPublishSchema()), 'packages/publish/src/schema.ts is out of date').toBe(true);
  });
});
