import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..');

describe('README', () => {
  it('quotes docs/examples/verify.ts (the example the tests run) exactly', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const quoted = /<!-- docs\/examples\/verify\.ts -->\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(quoted).toBe(fs.readFileSync(path.join(ROOT, 'docs/examples/verify.ts'), 'utf8'));
  });
});
