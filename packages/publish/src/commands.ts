/**
 * The commands of launcher-publish. Each is a name, a summary, the options it takes and a run function
 * that answers the JSON value printed on stdout.
 */
import type { OptionSpecs, ParsedOptions } from './options.js';

export interface Context {
  /** Where progress goes (stderr); stdout carries only the answer's JSON line. */
  progress: NodeJS.WritableStream & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
}

export interface Command {
  summary: string;
  options: OptionSpecs;
  run(options: ParsedOptions, context: Context): Promise<unknown>;
}

const server: OptionSpecs = {
  server: { value: 'URL', help: 'the service, e.g. https://dist.example.com', required: true },
};

const versionId: OptionSpecs = {
  'version-id': { value: 'ID', help: 'the launcher version', required: true },
};

function notYet(): Promise<unknown> {
  return Promise.reject(new Error('not implemented yet'));
}

export const commands: Record<string, Command> = {
  version: {
    summary: 'upload a launcher build (resumable) and create its version; rerunning is safe',
    options: {
      ...server,
      package: { value: 'SLUG', help: 'the launcher package', required: true },
      version: { value: 'V', help: 'the version name, e.g. 1.4.0', required: true },
      'version-code': { value: 'N', help: 'the integer version code', required: true },
      file: { value: 'F', help: 'the build to upload', required: true },
      'changelog-zh': { value: 'T', help: 'changelog (Chinese)' },
      'changelog-en': { value: 'T', help: 'changelog (English)' },
      force: { help: 'force the update on launchers below this version' },
      'min-version': { value: 'V', help: 'the lowest version allowed to keep running' },
      rollout: { value: 'P', help: 'staged rollout percentage (1-100)' },
      'publish-at': { value: 'ISO', help: 'publish at this time (ISO 8601)' },
    },
    run: notYet,
  },
  release: {
    summary: 'upload an addon build (resumable) and create its release; rerunning is safe',
    options: {
      ...server,
      addon: { value: 'SLUG', help: 'the addon', required: true },
      version: { value: 'V', help: 'the release version', required: true },
      file: { value: 'F', help: 'the build to upload', required: true },
      'changelog-zh': { value: 'T', help: 'changelog (Chinese)' },
      'changelog-en': { value: 'T', help: 'changelog (English)' },
      requires: { value: 'SLUG,...', help: 'addons this release requires' },
    },
    run: notYet,
  },
  rollout: {
    summary: "set a version's rollout percentage",
    options: { ...server, ...versionId, percent: { value: 'P', help: 'percentage (1-100)', required: true } },
    run: notYet,
  },
  halt: { summary: "halt a version's rollout", options: { ...server, ...versionId }, run: notYet },
  revoke: { summary: 'revoke a version', options: { ...server, ...versionId }, run: notYet },
  unrevoke: { summary: 'lift a revocation', options: { ...server, ...versionId }, run: notYet },
};
