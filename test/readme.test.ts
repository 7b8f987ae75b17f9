/**
 * The README's library example, run as a user of another project runs it: in an empty directory
 * whose node_modules holds the package as `npm pack` ships it, the example pasted into a file.
 * The install is done by hand (the tarball unpacked, the locked runtime dependencies linked from
 * this checkout) because `npm install` of the tarball needs the registry, which tests may not use.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { ROOT, tmpDir } from './helpers.js';

/** The package as `npm pack` makes it (the build is the one `npm test` just made). */
function pack(): string {
  const dest = tmpDir('pack');
  const r = spawnSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dest], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const [info] = JSON.parse(r.stdout) as { filename: string }[];
  return path.join(dest, path.basename(info.filename));
}

/** An empty project with the packed package installed (runtime dependencies only, as npm would). */
function project(tarball: string): string {
  const app = tmpDir('app');
  const into = path.join(app, 'node_modules', 'waste');
  fs.mkdirSync(into, { recursive: true });
  const r = spawnSync('tar', ['xzf', tarball, '-C', into, '--strip-components', '1'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
  for (const [where, p] of Object.entries(lock.packages)) {
    if (!where || p.dev) continue;
    const link = path.join(app, where);
    fs.mkdirSync(path.dirname(link), { recursive: true });
    fs.symlinkSync(path.join(ROOT, where), link);
  }
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module', dependencies: { waste: 'file:waste.tgz' } }));
  return app;
}

describe('README', () => {
  it('the library example runs as written, in an empty project with the package installed', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const m = /<!-- readme-example -->\n```js\n([\s\S]*?)```/.exec(readme);
    assert.ok(m, 'the README has its example');
    const app = project(pack());
    fs.writeFileSync(path.join(app, 'example.mjs'), m[1]);
    const r = spawnSync(process.execPath, ['example.mjs'], { cwd: app, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^\[[\s\d,]+\]\n/, 'the token ids');
    assert.match(r.stdout, /\n (stop|length) \d+\n/, 'the chat reply ends and says why');
    assert.match(r.stdout, /\n 4096 [\d.]+\n$/, 'the logits after the loaded session, a vocabulary of the demo model');
    assert.ok(fs.existsSync(path.join(app, 'story.waste')));
  });
});
