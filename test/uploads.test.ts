import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, multipartBody, type TestApp, upload } from './helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp({ MAX_UPLOAD_BYTES: '4096' });
});
afterAll(() => t.close());

const PNG = Buffer.from(
  '89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005000201ad2a1a2f0000000049454e44ae426082',
  'hex',
);

describe('POST /api/upload', () => {
  it('stores the part `file` and answers 201 {filePath, originalName, size, sha256}', async () => {
    const { payload, headers } = multipartBody('图标 icon.png', PNG);
    const res = await t.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { ...headers, cookie: t.cookie },
      payload,
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(body).toEqual({
      filePath: expect.stringMatching(/^\/uploads\/\d{4}-\d{2}\/[0-9a-f-]{36}-icon\.png$/),
      originalName: '图标 icon.png',
      size: PNG.length,
      sha256: createHash('sha256').update(PNG).digest('hex'),
    });
    const onDisk = path.join(t.dir, 'uploads', body.filePath.slice('/uploads/'.length));
    expect(fs.readFileSync(onDisk).equals(PNG)).toBe(true);
  });

  it('serves images inline with their type, everything else as an octet-stream attachment, always nosniff', async () => {
    const image = await upload(t, 'banner.png', PNG);
    const img = await t.inject(image.filePath);
    expect(img.statusCode).toBe(200);
    expect(img.headers['content-type']).toBe('image/png');
    expect(img.headers['content-disposition']).toMatch(/^inline; filename="banner.png"/);
    expect(img.headers['x-content-type-options']).toBe('nosniff');
    expect(img.rawPayload.equals(PNG)).toBe(true);
    for (const name of ['page.html', 'vector.svg', 'script.js', 'noext']) {
      const other = await upload(t, name, '<script>alert(1)</script>');
      const res = await t.inject(other.filePath);
      expect(res.headers['content-type'], name).toBe('application/octet-stream');
      expect(res.headers['content-disposition'], name).toMatch(/^attachment;/);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    }
    const ranged = await t.inject({ url: image.filePath, headers: { range: 'bytes=0-7' } });
    expect(ranged.statusCode).toBe(206);
    expect(ranged.rawPayload.equals(PNG.subarray(0, 8))).toBe(true);
  });

  it('answers 413 over MAX_UPLOAD_BYTES and keeps nothing of the file', async () => {
    const before = fs.readdirSync(path.join(t.dir, 'uploads'), { recursive: true }).length;
    const { payload, headers } = multipartBody('big.bin', Buffer.alloc(5000, 1));
    const res = await t.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { ...headers, cookie: t.cookie },
      payload,
    });
    expect(res.statusCode).toBe(413);
    expect(res.json()).toEqual({ error: expect.any(String) });
    const after = fs.readdirSync(path.join(t.dir, 'uploads'), { recursive: true }).length;
    expect(after).toBe(before);
    expect(fs.readdirSync(path.join(t.dir, 'uploads', '.tmp'))).toEqual([]);
  });

  it('answers 400 without a part named file, 415 for a non-multipart body, 401 without a session', async () => {
    const wrongField = multipartBody('a.txt', 'x', 'document');
    const res = await t.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { ...wrongField.headers, cookie: t.cookie },
      payload: wrongField.payload,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toMatch(/file/);
    const json = await t.inject({
      method: 'POST',
      url: '/api/upload',
      headers: { cookie: t.cookie },
      payload: { file: 'x' },
    });
    expect(json.statusCode).toBe(415);
    expect(json.json()).toEqual({ error: expect.any(String) });
    const anonymous = multipartBody('a.txt', 'x');
    expect((await t.inject({ method: 'POST', url: '/api/upload', ...anonymous })).statusCode).toBe(401);
  });
});

describe('GET /uploads/*', () => {
  it('answers 404 for a missing file and refuses paths that leave the store', async () => {
    expect((await t.inject('/uploads/2026-01/none.png')).statusCode).toBe(404);
    fs.writeFileSync(path.join(t.dir, 'secret.txt'), 'TOP-SECRET-CONTENT');
    for (const url of [
      '/uploads/../secret.txt',
      '/uploads/%2e%2e/secret.txt',
      '/uploads/..%2fsecret.txt',
      '/uploads/.tmp/x',
    ]) {
      const res = await t.inject(url);
      expect([400, 404], url).toContain(res.statusCode);
      expect(res.body).not.toContain('TOP-SECRET-CONTENT');
    }
  });
});
