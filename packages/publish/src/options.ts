/**
 * The command-line vocabulary: each option is declared once (its parseArgs type and its help line),
 * each command lists the options it takes. Adding an option or a command is one entry here.
 */
import { parseArgs } from 'node:util';

export interface OptionSpec {
  /** Value placeholder in the help ("URL", "N"); absent for a flag. */
  value?: string;
  help: string;
  required?: boolean;
  /** Given any number of times (`--exclude A --exclude B`): read with `all`. */
  multiple?: boolean;
}

export type OptionSpecs = Record<string, OptionSpec>;

/** What a command sees: string options by name, flags as booleans. */
export interface ParsedOptions {
  get(name: string): string | undefined;
  require(name: string): string;
  flag(name: string): boolean;
  /** Every value of a `multiple` option, in the order given. */
  all(name: string): string[];
}

export class UsageError extends Error {}

export function parseOptions(argv: string[], specs: OptionSpecs): ParsedOptions & { help: boolean } {
  const config: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {
    help: { type: 'boolean', short: 'h' },
  };
  for (const [name, spec] of Object.entries(specs)) {
    config[name] = { type: spec.value ? 'string' : 'boolean', ...(spec.multiple ? { multiple: true } : {}) };
  }
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options: config, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const help = values.help === true;
  if (!help) {
    const missing = Object.entries(specs)
      .filter(([name, spec]) => spec.required && values[name] === undefined)
      .map(([name]) => `--${name}`);
    if (missing.length > 0) throw new UsageError(`missing required option(s): ${missing.join(', ')}`);
  }
  return {
    help,
    get: (name) => {
      const value = values[name];
      return typeof value === 'string' ? value : undefined;
    },
    require: (name) => {
      const value = values[name];
      if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
      return value;
    },
    flag: (name) => values[name] === true,
    all: (name) => {
      const value = values[name];
      return (Array.isArray(value) ? value : [value]).filter((item): item is string => typeof item === 'string');
    },
  };
}

export function renderOptions(specs: OptionSpecs): string {
  const rows = Object.entries(specs).map(([name, spec]) => {
    const left = `  --${name}${spec.value ? ` ${spec.value}` : ''}${spec.multiple ? ' …' : ''}`;
    return { left, right: `${spec.help}${spec.required ? ' (required)' : ''}` };
  });
  rows.push({ left: '  -h, --help', right: 'show this help' });
  const width = Math.max(...rows.map((row) => row.left.length)) + 2;
  return rows.map((row) => row.left.padEnd(width) + row.right).join('\n');
}
