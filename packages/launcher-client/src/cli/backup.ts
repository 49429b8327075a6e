/**
 * `launcher-client backup create|list|restore|remove`: settings snapshots (`backups/snapshots.ts`) as a
 * command. The last line on stdout is JSON; a failure prints `{error, kind}` on stderr and exits 2
 * (a snapshot refused, kind archive) or 1.
 */
import { parseArgs } from 'node:util';
import { createSnapshot, listSnapshots, removeSnapshot, restoreSnapshot } from '../backups/snapshots.js';
import { keepOption } from './addons.js';
import type { Output } from './output.js';
import { UsageError } from '../errors.js';
import { StateFolder } from '../disk/state.js';

const HELP = `Usage:
  launcher-client backup create  --state DIR --game-dir GAME [--label TEXT] [--with-addons]
  launcher-client backup list    --state DIR
  launcher-client backup restore ID --state DIR --game-dir GAME [--keep N]
  launcher-client backup remove  ID --state DIR
      Snapshots of GAME/WTF (with --with-addons also GAME/Interface/AddOns and the addon
      manifests), kept in DIR/backups. Every addon install, update and remove first takes an
      automatic one when WTF changed since the last; the newest 20 (--keep N) automatic ones are
      kept, manual ones (create) until removed. restore checks every file against the hashes
      recorded when it was taken, keeps the current state as an automatic snapshot, then swaps
      the folders in whole (a restore cut off is finished or undone by the next command). A
      folder it replaces that another program holds (WTF or a file in it while the game runs)
      stops it before anything is written, after trying again for up to 10 s (kind in-use).
      Last line on stdout: create {"backup": {id, createdAt, reason, label, files, bytes,
      withAddons}}; list {"backups": [...]} newest first; restore {"restored": ID}; remove
      {"removed": ID}.

Exit status: 0 success; 2 a snapshot was refused (kind archive: a file missing, changed or outside
WTF; nothing changed); 1 any other failure (kind usage, not-found, state, in-use, ...).
`;

const OPTIONS = {
  state: { type: 'string' },
  'game-dir': { type: 'string' },
  label: { type: 'string' },
  'with-addons': { type: 'boolean' },
  keep: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export async function backupCommand(argv: string[], out: Output): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    return out.finish({ error: new UsageError((err as Error).message) });
  }
  const [command, ...ids] = parsed.positionals;
  const { values } = parsed;
  if (values.help || command === undefined) return out.finish({ text: HELP, field: 'help', code: values.help ? 0 : 1 });
  out.start(`backup ${command}`);
  const required = (name: 'state' | 'game-dir'): string => {
    const value = values[name];
    if (value === undefined || value === '') throw new UsageError(`--${name} is required`);
    return value;
  };
  const oneId = (): string => {
    if (ids.length !== 1) throw new UsageError(`backup ${command} takes one snapshot id`);
    return ids[0]!;
  };
  try {
    const state = new StateFolder(required('state'), out.warn);
    let answer: object;
    if (command === 'create') {
      if (ids.length > 0) throw new UsageError('backup create takes no id');
      const label = values.label;
      answer = {
        backup: await createSnapshot(state, required('game-dir'), {
          ...(label === undefined ? {} : { label }),
          withAddons: values['with-addons'] === true,
        }),
      };
    } else if (command === 'list') {
      if (ids.length > 0) throw new UsageError('backup list takes no id');
      answer = { backups: await listSnapshots(state) };
    } else if (command === 'restore') {
      const id = oneId();
      await restoreSnapshot(state, required('game-dir'), id, keepOption(values.keep));
      answer = { restored: id };
    } else if (command === 'remove') {
      const id = oneId();
      await removeSnapshot(state, id);
      answer = { removed: id };
    } else {
      throw new UsageError(`unknown command backup ${command}`);
    }
    return out.finish({ answer });
  } catch (err) {
    return out.finish({ error: err });
  }
}
