/*
 * The addon manager's safety net, in process against the real service (one engine per run):
 *   TEST_ENGINE=sqlite npx tsx bench/addon-safety.mts
 * A settings snapshot of a WTF of 2,000 files / 10 MB (bound 1 s), the same call when nothing changed
 * (bound 50 ms), and `scan` of 300 folders unpacked by hand / 60 MB, 30 addons of 10 folders each
 * (bound 5 s, one POST /api/addons/fingerprints).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildTestApp } from '../test/helpers/app.js';
import { publishAddon, zip } from '../packages/launcher-client/test/addons-fixtures.js';
import { AddonManager, snapshotBeforeChange, UpdateManager } from '../packages/launcher-client/src/index.js';

const t = await buildTestApp();
const server = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-safety-'));
const trustedKeys = (await t.inject('/api/signing-keys'))
  .json<{ keyId: string; publicKey: string }[]>()
  .map((k) => ({ keyId: k.keyId, publicKey: k.publicKey }));

const timed = async <T,>(work: () => Promise<T>): Promise<[T, number]> => {
  const started = performance.now();
  const result = await work();
  return [result, performance.now() - started];
};

try {
  const game = path.join(work, 'game');
  for (let i = 0; i < 2000; i++) {
    const dir = path.join(game, 'WTF', 'Account', `Char${i % 40}`, 'SavedVariables');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, `Addon${i}.lua`), `data = "${randomBytes(3840).toString('base64')}"\n`);
  }
  const updates = new UpdateManager({
    serverUrl: server,
    trustedKeys,
    stateDir: path.join(work, 'state'),
  });
  const [taken, first] = await timed(() => snapshotBeforeChange(updates.state, game, 'addons-update'));
  const [again, unchanged] = await timed(() => snapshotBeforeChange(updates.state, game, 'addons-update'));
  console.log(
    `| snapshot, ${taken?.files} files, ${((taken?.bytes ?? 0) / 1e6).toFixed(1)} MB | ${first.toFixed(0)} ms |`,
  );
  console.log(`| no snapshot, unchanged (${again === null ? 'none taken' : 'TAKEN'}) | ${unchanged.toFixed(1)} ms |`);

  const addons = path.join(game, 'Interface', 'AddOns');
  for (let a = 0; a < 30; a++) {
    const entries = [];
    for (let f = 0; f < 10; f++) {
      for (let n = 0; n < 10; n++) {
        const data = randomBytes(20_000);
        entries.push({ name: `Bench${a}_${f}/file${n}.lua`, data, method: 0 as const });
        fs.mkdirSync(path.join(addons, `Bench${a}_${f}`), { recursive: true });
        fs.writeFileSync(path.join(addons, `Bench${a}_${f}`, `file${n}.lua`), data);
      }
    }
    await publishAddon(t, `bench-${a}`, '1.0', zip(entries));
  }
  const manager = new AddonManager({ updates, gameDir: game });
  const [report, scan] = await timed(() => manager.scan());
  console.log(
    `| scan, 300 folders, 60 MB: ${report.adopted.length} adopted, ${report.unknown.length} unknown | ${scan.toFixed(0)} ms |`,
  );
} finally {
  await t.close();
  fs.rmSync(work, { recursive: true, force: true });
}
