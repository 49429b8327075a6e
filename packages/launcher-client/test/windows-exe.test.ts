/**
 * The single executable for Windows (`npm run build:exe -- --target win-x64`) under Wine, driven as a
 * launcher in another language drives it: `--events`, every stream checked against
 * docs/launcher-protocol.md (test/events-harness.ts), against the real service on Linux.
 */
import { describe, expect, it } from 'vitest';
import { runWithEvents } from './events-harness.js';
import { buildWhenStale } from './exe-build.js';
import { gameUnderWine } from './windows-game-fixtures.js';
import { win, windowsTestsRun } from './wine.js';

describe.runIf(windowsTestsRun())('launcher-client-win-x64.exe under Wine, with --events', () => {
  const { suite, publish, folder, expectFiles } = gameUnderWine();

  it('game status, update and verify: every line an event, start first, one result last; the build installed exactly', async () => {
    const exe = buildWhenStale('win-x64');
    const { wine } = suite;
    const events = (args: string[]) =>
      runWithEvents([wine.loader, exe], args, { stdio: 'file', env: wine.env(), timeoutMs: 180_000 });
    const build = await publish();
    const x = folder('Acme Game');
    const state = ['--state', win(x.state), '--game-dir', win(x.game)];
    const online = ['--server', suite.s.proxy.url, '--trust', win(suite.keys), ...state, '--app', 'app'];

    const before = await events(['game', 'status', ...state]);
    expect(before.code, before.stderr).toBe(0);
    expect(before.events[0]).toMatchObject({ event: 'start', command: 'game status', protocol: 1 });
    expect(before.last).toMatchObject({ event: 'result', installed: null, underWay: null });

    const update = await events(['game', 'update', ...online]);
    expect(update.code, JSON.stringify(update.last)).toBe(0);
    expect(update.last).toMatchObject({ event: 'result', result: 'installed', to: build.code });
    expect(update.progress.some((p) => p.phase === 'download')).toBe(true);
    expectFiles(x.game, build);

    const verify = await events(['game', 'verify', ...online, '--full']);
    expect(verify.code, verify.stderr).toBe(0);
    expect(verify.last).toMatchObject({ event: 'result', ok: true, buildCode: build.code });

    const after = await events(['game', 'status', ...state]);
    expect(after.last).toMatchObject({ event: 'result', installed: { buildCode: build.code }, underWay: null });

    // A failure is one error event with its kind, and the exit status of the plain run: nothing installed.
    const empty = folder('Empty');
    const failed = await events([
      'game',
      'verify',
      ...online.slice(0, 4),
      '--state',
      win(empty.state),
      '--game-dir',
      win(empty.game),
      '--app',
      'app',
    ]);
    expect(failed.code).toBe(1);
    expect(failed.last).toMatchObject({ event: 'error', kind: 'state' });
  }, 600_000);
});
