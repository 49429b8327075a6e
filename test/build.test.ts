import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { builtinModules } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..');

describe('npm start builds only when the sources changed (scripts/ensure-build.mjs)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lds-build-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  /** A tree shaped like this one whose builds just record that they ran. */
  function tree(): void {
    fs.mkdirSync(path.join(dir, 'scripts'), { recursive: true });
    for (const script of ['ensure-build.mjs', 'node-version.mjs']) {
      fs.copyFileSync(path.join(ROOT, 'scripts', script), path.join(dir, 'scripts', script));
    }
    const build = (out: string, log: string) =>
      `node -e "require('fs').mkdirSync('${path.dirname(out)}',{recursive:true});require('fs').writeFileSync('${out}','');require('fs').appendFileSync('builds.log','${log}\\n')"`;
    fs.writeFileSync(
      path.join(dir, 'package.json'),
      JSON.stringify({
        name: 'fake',
        private: true,
        scripts: {
          'build:server': build('dist/server.js', 'server'),
          'build:admin': build('admin/dist/index.html', 'admin'),
        },
      }),
    );
    fs.writeFileSync(path.join(dir, 'package-lock.json'), '{}');
    fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'src/server.ts'), 'one');
    fs.mkdirSync(path.join(dir, 'admin/src'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'admin/src/App.tsx'), 'one');
  }
  const ensure = () => execFileSync(process.execPath, ['scripts/ensure-build.mjs'], { cwd: dir, encoding: 'utf8' });
  const builds = () => fs.readFileSync(path.join(dir, 'builds.log'), 'utf8').trim().split('\n');

  it('builds once, rebuilds only the part whose sources changed, and uses a build without sources', () => {
    tree();
    // The first build says it is the first, not that sources changed.
    expect(ensure()).toMatch(/building the service \(the first build/);
    expect(builds()).toEqual(['server', 'admin']);
    expect(ensure()).toBe('');
    expect(builds()).toEqual(['server', 'admin']); // a restart builds nothing
    fs.writeFileSync(path.join(dir, 'src/server.ts'), 'two');
    expect(ensure()).toMatch(/building the service \(its sources changed since the last build\)/);
    expect(builds()).toEqual(['server', 'admin', 'server']);
    fs.writeFileSync(path.join(dir, 'admin/src/App.tsx'), 'two');
    ensure();
    expect(builds()).toEqual(['server', 'admin', 'server', 'admin']);
    // A production copy: built outputs, no sources, no build tools.
    fs.rmSync(path.join(dir, 'src'), { recursive: true });
    fs.rmSync(path.join(dir, 'admin/src'), { recursive: true });
    fs.rmSync(path.join(dir, 'admin/dist/.build-hash'));
    ensure();
    expect(builds()).toHaveLength(4);
  });
});

describe('a production install (npm ci --omit=dev)', () => {
  it('needs nothing from devDependencies at run time: every package src/ imports is a dependency', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    const imported = new Set<string>();
    const walk = (dirPath: string): void => {
      for (const entry of fs.readdirSync(dirPath, { withFileTypes: true })) {
        const full = path.join(dirPath, entry.name);
        if (entry.isDirectory()) walk(full);
        else if (entry.name.endsWith('.ts')) {
          const text = fs.readFileSync(full, 'utf8');
          // Type-only imports vanish when compiled; everything else is loaded at run time.
          for (const m of text.matchAll(/^import (?!type )[^;]*?from '([^'.][^']*)'/gms)) {
            const spec = m[1] ?? '';
            const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] ?? '');
            if (!spec.startsWith('node:') && !builtinModules.includes(name)) imported.add(name);
          }
        }
      }
    };
    walk(path.join(ROOT, 'src'));
    expect(imported.size).toBeGreaterThan(10);
    const missing = [...imported].filter((name) => !(name in pkg.dependencies));
    expect(missing).toEqual([]);
  });
});
