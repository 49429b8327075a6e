/**
 * Stops a process on a Node.js that package.json's `engines.node` excludes, before anything else
 * loads, with one line naming the Node found and the versions needed: on Node 20 the service would
 * otherwise build for a minute and die with a segmentation fault (better-sqlite3 13 needs Node-API 10).
 * Imported first by every entry of the service (the server, backup and restore, `npm start`'s build
 * check, `npm run dev`, db:copy, the bench); `npm install` refuses the same Node (`.npmrc`:
 * engine-strict). Run alone (`node scripts/node-version.mjs`) it checks and exits.
 *
 * Plain JavaScript with only Node's built-ins, on purpose: it must run on the Node it refuses.
 */
/* global process, URL */
import fs from 'node:fs';

/** `major.minor.patch` as numbers (a prerelease or build suffix ignored; missing parts 0), and whether all three were given. */
function parse(version) {
  const match = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?$/.exec(version);
  if (!match) return null;
  return { parts: [1, 2, 3].map((i) => Number(match[i] ?? 0)), whole: match[3] !== undefined };
}

function compare(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/**
 * Whether `version` is in one comparator of a semver range: `^` (the same major, Node's are never 0),
 * `~` (the same minor), `>=`, `>`, `<=`, `<`, `=` or bare. Missing minor and patch parts (`>=20.19`) are
 * read as 0 where that is what they mean (`^`, `~`, `>=`, `<`) and refused elsewhere.
 */
function inComparator(version, comparator) {
  const match = /^(\^|~|>=|>|<=|<|=)?(.+)$/.exec(comparator);
  const bound = match && parse(match[2]);
  const operator = match?.[1] ?? '=';
  if (!bound || (!bound.whole && !['^', '~', '>=', '<'].includes(operator))) {
    throw new Error(`engines.node: cannot read the comparator ${JSON.stringify(comparator)}`);
  }
  const [major, minor] = bound.parts;
  const order = compare(version, bound.parts);
  switch (operator) {
    case '^':
      return order >= 0 && version[0] === major;
    case '~':
      return order >= 0 && version[0] === major && version[1] === minor;
    case '>=':
      return order >= 0;
    case '>':
      return order > 0;
    case '<=':
      return order <= 0;
    case '<':
      return order < 0;
    default:
      return order === 0;
  }
}

/** Whether the Node version `node` satisfies the semver range `range` (`||` of space-separated comparators). */
export function satisfies(node, range) {
  const version = parse(node)?.parts;
  if (!version) throw new Error(`cannot read the Node.js version ${node}`);
  return range.split('||').some((set) =>
    set
      .trim()
      .split(/\s+/)
      .every((comparator) => inComparator(version, comparator)),
  );
}

/** The nearest package.json above this file (the repository's, or the image's above a bundled copy in dist/). */
function manifestFile() {
  for (let dir = new URL('./', import.meta.url); ; dir = new URL('../', dir)) {
    const file = new URL('package.json', dir);
    if (fs.existsSync(file)) return file;
    if (new URL('../', dir).href === dir.href) throw new Error('no package.json above scripts/node-version.mjs');
  }
}

const manifest = JSON.parse(fs.readFileSync(manifestFile(), 'utf8'));
const needed = manifest.engines?.node;
if (typeof needed === 'string' && !satisfies(process.versions.node, needed)) {
  process.stderr.write(
    `${manifest.name} needs Node.js ${needed}; this is Node.js ${process.versions.node} (${process.execPath})\n`,
  );
  process.exit(1);
}
