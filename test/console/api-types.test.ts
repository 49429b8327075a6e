import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generatedSchema, SCHEMA_FILE } from '../../scripts/gen-admin-api.js';

describe("the console's typed API client", () => {
  it('is generated from the current /openapi.json (else run `npm run admin:api` and fix what tsc -p admin reports)', async () => {
    const expected = await generatedSchema();
    const committed = fs.readFileSync(SCHEMA_FILE, 'utf8');
    expect(committed === expected, 'admin/src/api/schema.d.ts is out of date: run `npm run admin:api`').toBe(true);
  });
});
