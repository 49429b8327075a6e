import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { api, type ScenarioProvider, uploadFile } from './lib.js';

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** Game client builds 100–120, each a small client of 20 files in chunks of 64 KiB (a few shared by all). */
async function seedGame(target: Parameters<ScenarioProvider>[0]): Promise<void> {
  const shared = randomBytes(256 * 1024);
  for (let code = 100; code <= 120; code += 1) {
    const files = Array.from({ length: 20 }, (_, i) => {
      const content = i === 0 ? randomBytes(128 * 1024) : shared;
      const chunks: [string, Buffer][] = [];
      for (let at = 0; at < content.length; at += 64 * 1024) {
        const piece = content.subarray(at, at + 64 * 1024);
        chunks.push([sha256(piece), piece]);
      }
      return { path: `Data/file-${i}.mpq`, content, chunks };
    });
    for (const [name, piece] of files.flatMap((f) => f.chunks)) {
      const res = await fetch(`${target.url}/api/admin/game/chunks/${name}`, {
        method: 'PUT',
        headers: { cookie: target.cookie, 'content-type': 'application/octet-stream' },
        body: new Uint8Array(piece),
      });
      if (res.status !== 201 && res.status !== 200) throw new Error(`chunk → ${res.status}: ${await res.text()}`);
    }
    const manifest = JSON.stringify({
      format: 1,
      app: 'app',
      version: `1.18.${code}`,
      buildCode: code,
      files: files.map((f) => ({
        path: f.path,
        size: f.content.length,
        sha256: sha256(f.content),
        chunks: f.chunks.map(([name, piece]) => [name, piece.length]),
      })),
    });
    await api(target, 'POST', '/api/admin/game/builds', {
      version: `1.18.${code}`,
      buildCode: code,
      changelog: `第 ${code} 版：修复若干问题。`,
      changelogEn: `Build ${code}: fixes.`,
      forceUpdate: code % 5 === 0,
      manifest,
    });
  }
}

/** Launcher distribution: check-update (the launcher's hot path) and heartbeats. */
export const scenarios: ScenarioProvider = async (target) => {
  const slug = 'app-launcher';
  const file = await uploadFile(target, 'launcher-setup.exe', randomBytes(64 * 1024));
  /** Versions 100–120 of a new package; the latest (120) at `latestPercent`. */
  const seed = async (packageSlug: string, latestPercent: number) => {
    const pkg = await api<{ id: string }>(target, 'POST', '/api/software', { slug: packageSlug, name: '启动器' });
    for (let code = 100; code <= 120; code += 1) {
      await api(target, 'POST', `/api/software/${pkg.id}/versions`, {
        version: `1.0.${code}`,
        versionCode: code,
        changelog: `第 ${code} 版：修复若干问题，提升下载速度。`,
        changelogEn: `Build ${code}: fixes and faster downloads.`,
        filePath: file.filePath,
        forceUpdate: code % 5 === 0,
        rolloutPercent: code === 120 ? latestPercent : 100,
      });
    }
  };
  await seed(slug, 100);
  await seedGame(target);
  // The same versions in a second package whose latest is at a 20% staged rollout.
  await seed('staged', 20);
  // Both built per request by the load generator (which costs it CPU on the same machine): the
  // plain one varies a parameter the service ignores, the staged one the deviceId of 10,000 launchers.
  const plainPath = (n: number) => `/api/software/check-update?slug=${slug}&versionCode=110&lang=en&n=${n % 10_000}`;
  const stagedPath = (n: number) =>
    `/api/software/check-update?slug=staged&versionCode=110&lang=en&deviceId=device-${n % 10_000}`;
  const fixedPath = `/api/software/check-update?slug=${slug}&versionCode=110&lang=en`;
  // Fastify alone answers constant JSON of the same size as the fixed-URL answer.
  const size = (await (await fetch(target.url + fixedPath)).arrayBuffer()).byteLength;
  const fastifyAlone = { ...target.fastify, url: `${target.fastify.url}/?bytes=${size}` };
  // The same service without its signing hook (a bench-only preload): what signing costs the hot path.
  // Against a twin started beside it, signed, rather than the service of the whole run: that one has
  // served every other scenario (its heap and caches grown), which alone cost it a third of its rate.
  const unsigned = await target.startService({}, ['--import', path.join(import.meta.dirname, 'unsigned.mjs')]);
  const unsignedBaseline = { name: 'the service unsigned', url: unsigned.url + fixedPath, process: unsigned.child };
  const signed = await target.startService({});
  const signedHere = (await fetch(signed.url + fixedPath)).headers.has('signature');
  if (!signedHere || (await fetch(unsignedBaseline.url)).headers.has('signature')) {
    throw new Error('check-update should be signed by the service and unsigned by its bench-only twin');
  }
  return [
    { name: 'check-update', path: fixedPath, aim: 0.5 },
    // How the aim above divides: the framework's own ceiling against bare node, and the service against it.
    { name: 'Fastify alone (reference)', path: fixedPath, url: fastifyAlone.url, process: fastifyAlone.process },
    { name: 'check-update against Fastify alone', path: fixedPath, baseline: fastifyAlone },
    // Signed within 10 % of unsigned (release-safety.md: signing must not cost the hot path).
    {
      name: 'check-update signed against unsigned',
      path: fixedPath,
      url: signed.url + fixedPath,
      process: signed.child,
      baseline: unsignedBaseline,
      aim: 0.9,
    },
    // The game client's check-update: the same class of answer (one rendered, signed answer per decision).
    {
      name: 'game check-update',
      path: '/api/game/check-update?buildCode=110&lang=en',
      against: { name: 'check-update', aim: 0.8 },
    },
    { name: 'check-update plain', path: plainPath(0), makePath: plainPath },
    {
      // A latest at 20%: each answer is signed once when rendered, as in the plain scenario.
      name: 'check-update staged',
      path: stagedPath(0),
      makePath: stagedPath,
      against: { name: 'check-update plain', aim: 0.9 },
    },
    {
      name: 'heartbeat',
      method: 'POST',
      path: '/api/launcher/heartbeat',
      headers: { 'content-type': 'application/json' },
      makeBody: (n) =>
        JSON.stringify({
          deviceId: `bench-device-${n % 20_000}`,
          os: 'Windows',
          osVersion: '10.0.19045',
          appVersion: '1.0.120',
        }),
      aim: 0.4,
    },
  ];
};
