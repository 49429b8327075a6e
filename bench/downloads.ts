import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { NGINX, startNginx } from '../test/helpers/nginx.js';
import { api, type Scenario, type ScenarioProvider, uploadFile, wrkInstalled } from './lib.js';

/**
 * Downloads of a 1 MiB and a 100 MiB installer at 1 and 32 connections: streamed by the service
 * against a bare node:http + fs.createReadStream server, and (where nginx is installed) offloaded
 * through nginx (DOWNLOAD_OFFLOAD=x-accel-redirect) against nginx sending the same file by itself.
 */
export const scenarios: ScenarioProvider = async (target) => {
  if (!wrkInstalled()) {
    console.warn('wrk not found: skipping the download scenarios (apt-get install wrk)');
    return [];
  }
  const pkg = await api<{ id: string }>(target, 'POST', '/api/software', { slug: 'bench-downloads', name: '下载' });
  const files: Array<{ label: string; key: string; versionId: string }> = [];
  for (const [label, size] of [
    ['1 MiB', 1024 * 1024],
    ['100 MiB', 100 * 1024 * 1024],
  ] as const) {
    const file = await uploadFile(target, `setup-${size}.exe`, randomBytes(size));
    const version = await api<{ id: string }>(target, 'POST', `/api/software/${pkg.id}/versions`, {
      version: `1.0.${files.length}`,
      versionCode: files.length + 1,
      filePath: file.filePath,
    });
    files.push({ label, key: file.key, versionId: version.id });
  }
  const each = (make: (file: (typeof files)[number], connections: number) => Scenario) =>
    files.flatMap((file) => [1, 32].map((connections) => make(file, connections)));

  const scenarios = each((file, connections) => ({
    name: `download ${file.label}`,
    path: `/api/software/download/${file.versionId}`,
    connections,
    wrk: true,
    aim: 0.8,
    baseline: { ...target.bare, url: `${target.bare.url}/file/${file.key}` },
  }));
  if (!fs.existsSync(NGINX)) {
    console.warn(`nginx not found at ${NGINX}: skipping the offload scenarios (apt-get install nginx)`);
    return scenarios;
  }
  const offloading = await target.startService({ DOWNLOAD_OFFLOAD: 'x-accel-redirect' });
  const nginx = await startNginx({
    upstream: `127.0.0.1:${offloading.port}`,
    storeRoot: path.join(target.dataDir, 'uploads'),
    offloadPrefix: '/internal-uploads/',
  });
  target.cleanup(() => nginx.stop());
  const offload = (file: (typeof files)[number], connections: number): Scenario => ({
    name: `offload ${file.label}`,
    path: `/api/software/download/${file.versionId}`,
    url: `${nginx.url}/api/software/download/${file.versionId}`,
    process: offloading.child,
    connections,
    wrk: true,
    aim: 0.8,
    baseline: { name: 'nginx sendfile', url: nginx.directUrl + file.key, process: null },
  });
  const small = files[0]!;
  return [
    ...scenarios,
    ...each(offload),
    {
      // The same at one connection, resumed from byte 1 (counted by nobody), and nginx answering the
      // same range: what the proxied request costs with no count at all.
      ...offload(small, 1),
      name: `offload ${small.label} resumed (not counted)`,
      headers: { range: 'bytes=1-' },
      aim: undefined,
    },
  ];
};
