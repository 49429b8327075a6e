/*
 * The launcher's addon manager against the real service (in-process, one engine per run):
 *   TEST_ENGINE=sqlite npx tsx bench/addon-manager.mts   (npm run build -w patchwell-client first)
 * Installs a 50 MB addon (50 files of 1 MiB, incompressible; BIG_MB=200 for another size) and updates 100 installed addons, each
 * with the built `launcher-client addons` command in a child process: wall time and the child's peak
 * RSS (VmHWM). Baseline in the same run: `curl` then `unzip` of the same files, which verify nothing
 * and swap nothing (for 100 addons: one `curl` + `unzip` per addon in one shell).
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { highWaterKb } from '../src/modules/deltas/zstd.js';
import { buildTestApp } from '../test/helpers/app.js';
import { addonZip, publishAddon, zip } from '../packages/launcher-client/test/addons-fixtures.js';

const CLI = path.resolve(import.meta.dirname, '../packages/launcher-client/dist/cli.js');
const ADDONS = 100;
/** The large addon's size in MiB (BIG_MB, default 50): memory must not grow with it. */
const BIG_MB = Number(process.env.BIG_MB ?? 50);

const t = await buildTestApp();
const server = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-addons-'));
const keys = path.join(work, 'keys.json');
fs.writeFileSync(keys, (await t.inject('/api/signing-keys')).body);

/** Runs a command to its end: wall ms and its peak RSS in MiB (sampled from /proc while it runs). */
async function measured(command: string, args: string[]): Promise<{ ms: number; peakMiB: number }> {
  const started = performance.now();
  const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  let peakKb = 0;
  const sample = setInterval(() => (peakKb = Math.max(peakKb, highWaterKb(child.pid ?? 0))), 5);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearInterval(sample);
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${code}`);
  return { ms: performance.now() - started, peakMiB: peakKb / 1024 };
}

function gameAndState(name: string) {
  const game = path.join(work, name, 'game');
  fs.mkdirSync(path.join(game, 'Interface', 'AddOns'), { recursive: true });
  return ['--server', server, '--trust', keys, '--state', path.join(work, name, 'state'), '--game-dir', game];
}

const row = (what: string, m: { ms: number; peakMiB: number }, base: { ms: number; peakMiB: number }) =>
  `| ${what} | ${m.ms.toFixed(0)} | ${m.peakMiB.toFixed(0)} | ${base.ms.toFixed(0)} | ${base.peakMiB.toFixed(0)} | ${(m.ms / base.ms).toFixed(2)} |`;

try {
  const big = zip(
    Array.from({ length: BIG_MB }, (_, i) => ({
      name: `Big/part${i}.bin`,
      data: randomBytes(1 << 20),
      method: 0 as const,
    })),
  );
  const bigId = await publishAddon(t, 'bench-big', '1.0', big);
  const install = await measured(process.execPath, [CLI, 'addons', 'install', 'bench-big', ...gameAndState('big')]);
  const bigBase = path.join(work, 'big-base');
  fs.mkdirSync(bigBase);
  const installBase = await measured('sh', [
    '-c',
    `curl -sf -o ${bigBase}/a.zip ${server}/api/download/${bigId} && unzip -q ${bigBase}/a.zip -d ${bigBase}/out`,
  ]);

  const slugs = Array.from({ length: ADDONS }, (_, i) => `bench-${i}`);
  for (const slug of slugs) await publishAddon(t, slug, '1.0', addonZip([`Bench${slug.slice(6)}`], '1.0'));
  const many = gameAndState('many');
  await promisify(execFile)(process.execPath, [CLI, 'addons', 'install', ...slugs, ...many]);
  const ids = [];
  for (const slug of slugs) ids.push(await publishAddon(t, slug, '2.0', addonZip([`Bench${slug.slice(6)}`], '2.0')));
  const update = await measured(process.execPath, [CLI, 'addons', 'update', ...many]);
  const manyBase = path.join(work, 'many-base');
  fs.mkdirSync(manyBase);
  const updateBase = await measured('sh', [
    '-c',
    ids
      .map(
        (id, i) =>
          `curl -sf -o ${manyBase}/${i}.zip ${server}/api/download/${id} && unzip -qo ${manyBase}/${i}.zip -d ${manyBase}/out`,
      )
      .join(' && '),
  ]);
  console.log(
    '| launcher-client addons | ms | peak RSS MiB | baseline curl + unzip ms | baseline peak RSS MiB | time ratio |',
  );
  console.log('|---|---|---|---|---|---|');
  console.log(row(`install a ${BIG_MB} MB addon`, install, installBase));
  console.log(row(`update ${ADDONS} addons (one request)`, update, updateBase));
} finally {
  await t.close();
  fs.rmSync(work, { recursive: true, force: true });
}
