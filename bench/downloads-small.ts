import { randomBytes } from 'node:crypto';
import { api, type ScenarioProvider, uploadFile, wrkInstalled } from './lib.js';

/**
 * A small installer download (64 KiB, counted each time): what every download costs besides its
 * bytes, against bare Node streaming the same file. Loaded with wrk: autocannon reads 64 KiB bodies
 * of random bytes at about a tenth of wrk's rate whatever the server (bare Node here: 1.2k against
 * 12.6k requests per second; 8.3k for a file of zeros), so it measured itself.
 */
export const scenarios: ScenarioProvider = async (target) => {
  if (!wrkInstalled()) {
    console.warn('wrk not found: skipping the small download scenario (apt-get install wrk)');
    return [];
  }
  const file = await uploadFile(target, 'small-setup.exe', randomBytes(64 * 1024));
  const pkg = await api<{ id: string }>(target, 'POST', '/api/software', { slug: 'bench-small', name: '小安装包' });
  const version = await api<{ id: string }>(target, 'POST', `/api/software/${pkg.id}/versions`, {
    version: '1.0.0',
    versionCode: 1,
    filePath: file.filePath,
  });
  return [
    {
      name: 'download 64 KiB',
      path: `/api/software/download/${version.id}`,
      wrk: true,
      baseline: { ...target.bare, url: `${target.bare.url}/file/${file.key}` },
    },
  ];
};
