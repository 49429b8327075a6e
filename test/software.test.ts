import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, createPackage, createVersion, type TestApp, upload } from './helpers/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await buildTestApp();
});
afterAll(() => t.close());

describe('launcher flow', () => {
  it('check-update answers the latest version with an absolute launcher download URL', async () => {
    const file = await upload(t, 'launcher.exe', 'x'.repeat(1000));
    const pkg = await createPackage(t, { slug: 'app-launcher', name: '启动器', nameEn: 'Launcher' });
    await createVersion(t, pkg.id, { version: '1.0.0', versionCode: 100, filePath: file.filePath });
    const v2 = await createVersion(t, pkg.id, { version: '1.1.0', versionCode: 110, filePath: file.filePath, forceUpdate: true });
    const res = await t.inject({ url: '/api/software/check-update?slug=app-launcher&versionCode=100', headers: { host: 'dl.example.test' } });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ hasUpdate: true, forceUpdate: true, lang: 'zh', wowVersion: '1.18' });
    expect(body.latest.downloadUrl).toBe(`http://dl.example.test/api/software/download/${v2.id}?source=launcher`);
    expect(body.latest.fileSize).toBe(1000);
    expect(body.latest.sha256).toBe(file.sha256);
  });
});
