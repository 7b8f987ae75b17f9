/**
 * The README's library example, run as a user of another project runs it: in a project `npm init -y`
 * made, whose node_modules holds the package as `npm pack` ships it, the example saved and run as
 * the README says.
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

/**
 * A new project as `npm init -y` makes it (CommonJS: `"type": "commonjs"`), with the packed
 * package installed (runtime dependencies only, as npm would).
 */
function project(tarball: string): string {
  const app = tmpDir('app');
  const init = spawnSync('npm', ['init', '-y'], { cwd: app, encoding: 'utf8' });
  assert.equal(init.status, 0, init.stderr);
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
  return app;
}

/** The example run as the README says, from its project's directory: what a user sees. */
function runExample(app: string, file: string, code: string): void {
  for (const f of ['example.js', 'example.mjs', 'story.waste']) fs.rmSync(path.join(app, f), { force: true });
  fs.writeFileSync(path.join(app, file), code);
  const r = spawnSync(process.execPath, [file], { cwd: app, encoding: 'utf8' });
  assert.equal(r.status, 0, `${file}: ${r.stderr}`);
  assert.match(r.stdout, /^\[[\s\d,]+\]\n/, 'the token ids');
  assert.match(r.stdout, /\n (stop|length) \d+\n/, 'the chat reply ends and says why');
  assert.match(r.stdout, /\n 4096 [\d.]+\n$/, 'the logits after the loaded session, a vocabulary of the demo model');
  assert.ok(fs.existsSync(path.join(app, 'story.waste')));
}

describe('README', () => {
  it('the library example runs as written, in a new project (npm init -y) with the package installed, saved and run as the README says', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const m = /<!-- readme-example -->\n```js\n([\s\S]*?)```/.exec(readme);
    assert.ok(m, 'the README has its example');
    const how = /save it as `([^`]+)` and run `node ([^`]+)`/.exec(readme);
    assert.ok(how && how[1] === how[2], 'the README says how to save and run it');
    const app = project(pack());
    assert.equal(JSON.parse(fs.readFileSync(path.join(app, 'package.json'), 'utf8')).type, 'commonjs', 'npm init -y makes a CommonJS project');
    runExample(app, how[1], m[1]);
    // what the README warns of: the same code as example.js in that project does not load
    fs.writeFileSync(path.join(app, 'example.js'), m[1]);
    const cjs = spawnSync(process.execPath, ['example.js'], { cwd: app, encoding: 'utf8' });
    assert.notEqual(cjs.status, 0);
    assert.match(cjs.stderr, /SyntaxError/);
    // the other way the README gives: a .js file in a project that says "type": "module"
    assert.match(readme, /`example\.js` needs `"type": "module"` in the project's package\.json/);
    const pkg = JSON.parse(fs.readFileSync(path.join(app, 'package.json'), 'utf8'));
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ ...pkg, type: 'module' }, null, 2));
    runExample(app, 'example.js', m[1]);
  });
});
