import { randomBytes } from 'node:crypto';
import { api, type ScenarioProvider, uploadFile } from './lib.js';

/** A small installer download (64 KiB, counted each time): what every download costs besides its bytes. */
export const scenarios: ScenarioProvider = async (target) => {
  const file = await uploadFile(target, 'small-setup.exe', randomBytes(64 * 1024));
  const pkg = await api<{ id: string }>(target, 'POST', '/api/software', { slug: 'bench-small', name: '小安装包' });
  const version = await api<{ id: string }>(target, 'POST', `/api/software/${pkg.id}/versions`, {
    version: '1.0.0',
    versionCode: 1,
    filePath: file.filePath,
  });
  return [{ name: 'download 64 KiB', path: `/api/software/download/${version.id}` }];
};
