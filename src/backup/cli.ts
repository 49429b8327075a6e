/**
 * npm run backup -- --to <file>      one consistent archive of the installation, while it serves
 * npm run restore -- --from <file>   into an empty installation (no database rows, no files)
 *
 * Both act on the installation the service's settings name (DATA_DIR, DATABASE_URL, STORAGE).
 */
// First: on a Node that package.json's engines exclude, one line and exit 1 before anything loads.
import '../../scripts/node-version.mjs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../config.js';
import { backup, restore } from './archive.js';

const USAGE = `Usage:
  npm run backup -- --to <file>       (a name ending in .gz or .tgz is gzip-compressed)
  npm run restore -- --from <file>

Both use the service's settings (DATA_DIR, DATABASE_URL, STORAGE) to find the installation.
A backup is taken while the service runs: SQLite's online backup API, or PostgreSQL's tables read
in one REPEATABLE READ transaction, plus every file of the local store, with a manifest of row
counts and sha256 sums. A restore needs an empty target: no SQLite file (or a PostgreSQL database
without rows) and an empty local store; it checks everything against the manifest before it puts
the database and the files in place.`;

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  let values;
  try {
    ({ values } = parseArgs({
      args: rest,
      options: { to: { type: 'string' }, from: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const file = command === 'backup' ? values.to : command === 'restore' ? values.from : undefined;
  if (file === undefined || file === '') {
    console.error(USAGE);
    return 2;
  }
  const started = Date.now();
  try {
    const config = loadConfig();
    const log = (line: string) => console.log(`${command}: ${line}`);
    const manifest = command === 'backup' ? await backup(config, file, log) : await restore(config, file, log);
    const rows = Object.values(manifest.tables).reduce((a, b) => a + b, 0);
    console.log(
      `${command}: done, ${path.resolve(file)}: ${Object.keys(manifest.tables).length} tables, ${rows} rows, ` +
        `${manifest.files.length} files verified, in ${Date.now() - started} ms`,
    );
    return 0;
  } catch (err) {
    console.error(`${command} failed: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
