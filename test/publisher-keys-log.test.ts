import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateKeyPair, parseSecretKey } from '../packages/publish/src/minisign.js';
import { loadConfig, startupNotes } from '../src/config.js';

/** The start-up log names the publisher keys loaded (issue 38). */
describe('start-up notes', () => {
  it('name the PUBLISHER_KEYS loaded by key id; nothing without the setting', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-keys-log-'));
    try {
      const pairs = [await generateKeyPair(''), await generateKeyPair('')];
      const file = path.join(dir, 'publishers');
      fs.writeFileSync(file, pairs.map((p) => p.publicKeyFile).join('\n'));
      const ids = await Promise.all(pairs.map(async (p) => (await parseSecretKey(p.secretKeyFile, '')).keyId));
      const [note, ...rest] = startupNotes(loadConfig({ PUBLISHER_KEYS: file }));
      expect(rest).toEqual([]);
      expect(note).toContain('2 publisher key(s) loaded');
      for (const id of ids) expect(note).toContain(id);
      expect(startupNotes(loadConfig({}))).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it(
    'an encrypted secret key without LAUNCHER_SIGN_PASSWORD is named as such, not a wrong password',
    { timeout: 240_000 },
    async () => {
      const pair = await generateKeyPair('secret');
      await expect(parseSecretKey(pair.secretKeyFile, '')).rejects.toThrow(
        /encrypted: set its password in LAUNCHER_SIGN_PASSWORD/,
      );
      await expect(parseSecretKey(pair.secretKeyFile, 'other')).rejects.toThrow(/wrong password/);
    },
  );
});
