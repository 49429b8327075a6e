#!/usr/bin/env node
/**
 * launcher-publish: publish launcher versions and addon releases from CI.
 * The token comes from LAUNCHER_TOKEN only. Success: one JSON line on stdout, exit 0.
 * Failure: {"error": "..."} on stderr, exit 1.
 */
import { createRequire } from 'node:module';
import { commands } from './commands.js';
import type { Context } from './context.js';
import { parseOptions, renderOptions, UsageError } from './options.js';

const PACKAGE_VERSION = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

function topHelp(): string {
  const width = Math.max(...Object.keys(commands).map((name) => name.length)) + 2;
  const lines = Object.entries(commands).map(([name, command]) => `  ${name.padEnd(width)}${command.summary}`);
  return [
    'Usage: launcher-publish <command> [options]',
    '',
    'Commands:',
    ...lines,
    '',
    'The API token is read from the LAUNCHER_TOKEN environment variable (never from a flag).',
    'Unfinished uploads are remembered (by server, file size and SHA-256) in $LAUNCHER_PUBLISH_STATE,',
    'else $XDG_STATE_HOME/launcher-publish/uploads.json (~/.local/state/launcher-publish/uploads.json):',
    'rerunning the same command resumes the upload where it stopped.',
    'Success: one JSON line on stdout, exit 0. Failure: {"error": ...} on stderr, exit 1.',
    "Every request (the uploads' too) answered 429, 502, 503 or 504, or unanswered (network errors, no answer",
    'within --timeout), is retried with backoff (Retry-After honoured, at most 5 retries, each told on stderr);',
    'a versionCode another version holds is a conflict; versions and releases are created with an',
    'Idempotency-Key made from the package, version and SHA-256, so concurrent runs make one entry.',
    "Run `launcher-publish <command> -h` for a command's options; `launcher-publish --version` for this one's.",
  ].join('\n');
}

export async function main(argv: string[], context: Context, out: NodeJS.WritableStream): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === '-V') {
    out.write(`${PACKAGE_VERSION}\n`);
    return 0;
  }
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    out.write(topHelp() + '\n');
    return name === undefined ? 1 : 0;
  }
  const command = commands[name];
  if (!command) throw new UsageError(`unknown command "${name}" (see launcher-publish --help)`);
  const options = parseOptions(rest, command.options);
  if (options.help) {
    out.write(
      `Usage: launcher-publish ${name} [options]\n\n${command.summary}\n\nOptions:\n${renderOptions(command.options)}\n`,
    );
    return 0;
  }
  const answer = await command.run(options, context);
  out.write(JSON.stringify(answer) + '\n');
  return 0;
}

/**
 * Once the command's answer (or error) is written, the process ends when nothing is left to do; a
 * connection or timer left behind (an idle keep-alive socket a library keeps open) may hold it at
 * most this long: a CI job never hangs on a finished command.
 */
const EXIT_GRACE_MS = 2_000;

main(process.argv.slice(2), { progress: process.stderr, env: process.env }, process.stdout)
  .then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      process.stderr.write(JSON.stringify({ error: message }) + '\n');
      process.exitCode = 1;
    },
  )
  .finally(() => setTimeout(() => process.exit(), EXIT_GRACE_MS).unref());
