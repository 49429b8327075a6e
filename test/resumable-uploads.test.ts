import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, type TestApp } from './helpers/app.js';
import { apiToken, listen, tusUpload } from './helpers/tus.js';

let t: TestApp;
let base: string;
let token: string;
beforeAll(async () => {
  t = await buildTestApp({ MAX_UPLOAD_BYTES: String(8 * 1024 * 1024) });
  base = await listen(t);
  token = await apiToken(t);
});
afterAll(() => t.close());

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

describe('tus smoke', () => {
  it('uploads and answers the file', async () => {
    const data = Buffer.alloc(700_000, 7);
    const url = await tusUpload(base, token, data, 'game.zip');
    const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
    const body = await res.json();
    expect(body).toEqual({
      filePath: expect.stringMatching(/^\/uploads\//),
      originalName: 'game.zip',
      size: data.length,
      sha256: sha256(data),
    });
    expect(fs.readdirSync(path.join(t.dir, 'uploads', '.tus'))).toEqual([]);
  });
});
