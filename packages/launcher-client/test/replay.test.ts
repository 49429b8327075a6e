import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { StaleAnswerError } from '../src/errors.js';
import { StateFolder } from '../src/disk/state.js';
import { ReplayMemory } from '../src/trust/verify.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lc-replay-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('the replay memory: a floor on the time, never a refusal of another instance', () => {
  const now = Math.floor(Date.now() / 1000);
  const signed = (created: number) => ({ keyId: 'k', created, expires: created + 3600 });

  it('accepts older genuine answers (another instance signed earlier) and refuses one expired before an accepted answer was signed', async () => {
    const state = new StateFolder(dir);
    const memory = new ReplayMemory(state);
    await memory.accept(signed(now));
    await memory.accept(signed(now - 1800));
    await memory.accept(signed(now - 3599));
    await expect(memory.accept(signed(now - 3600))).rejects.toBeInstanceOf(StaleAnswerError);
    // Kept in the state folder: a new process remembers the floor (a device clock set back cannot move it).
    await expect(new ReplayMemory(new StateFolder(dir)).accept(signed(now - 7200))).rejects.toBeInstanceOf(
      StaleAnswerError,
    );
    await new ReplayMemory(new StateFolder(dir)).accept(signed(now - 60));
  });

  it("reads an earlier version's per-URL file as its newest entry", async () => {
    const old = fs.mkdtempSync(path.join(dir, 'old-'));
    fs.writeFileSync(path.join(old, 'answers.json'), JSON.stringify({ 'http://a/x': now - 10, 'http://a/y': now }));
    const memory = new ReplayMemory(new StateFolder(old));
    await expect(memory.accept(signed(now - 3600))).rejects.toBeInstanceOf(StaleAnswerError);
    await memory.accept(signed(now - 100));
  });
});
