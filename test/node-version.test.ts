/**
 * Node 20 is past its end of life and not supported: the CLI and the library refuse it at start
 * with one line naming the version and what is needed, never a stack trace.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { unsupportedNode } from '../src/util/node-version.js';
import { BIN, ROOT } from './helpers.js';

// a preload that makes this Node report itself as an older one, so the refusal is tested on any
const AS_NODE_20 = `data:text/javascript,Object.defineProperty(process.versions,"node",{value:"20.20.2"})`;
const INDEX = pathToFileURL(path.join(ROOT, 'dist', 'src', 'index.js')).href;

describe('supported Node versions', () => {
  it('names 22 as the oldest supported release', () => {
    assert.match(unsupportedNode('20.20.2') ?? '', /needs Node\.js 22 or newer; this is Node\.js 20\.20\.2/);
    assert.match(unsupportedNode('18.0.0') ?? '', /needs Node\.js 22/);
    assert.equal(unsupportedNode('22.0.0'), undefined);
    assert.equal(unsupportedNode('26.12.1'), undefined);
  });

  it('the CLI on Node 20: one line, exit 1, nothing run', () => {
    const r = spawnSync(process.execPath, ['--import', AS_NODE_20, BIN, 'run', 'It was'], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr, 'waste needs Node.js 22 or newer; this is Node.js 20.20.2 (install a current release: https://nodejs.org)\n');
  });

  it('the library on Node 20: importing it throws that one line, which the caller can catch', () => {
    const code = `import(${JSON.stringify(INDEX)}).then(() => console.log('loaded'), (e) => console.log('refused: ' + e.message))`;
    const r = spawnSync(process.execPath, ['--import', AS_NODE_20, '--input-type=module', '-e', code], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'refused: waste needs Node.js 22 or newer; this is Node.js 20.20.2 (install a current release: https://nodejs.org)');
  });

  it('the CLI and the library run on this Node', () => {
    const r = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const l = spawnSync(process.execPath, ['--input-type=module', '-e', `import(${JSON.stringify(INDEX)}).then((m) => console.log(typeof m.Model.open))`], { encoding: 'utf8' });
    assert.equal(l.stdout.trim(), 'function', l.stderr);
  });

  // a real Node 20 where the machine has one (Debian's /usr/bin/node on the development VM)
  const node20 = spawnSync('/usr/bin/node', ['--version'], { encoding: 'utf8' });
  const real20 = node20.status === 0 && /^v20\./.test(node20.stdout);
  it('a real Node 20 gets the same one line', { skip: real20 ? false : 'no Node 20 at /usr/bin/node' }, () => {
    const r = spawnSync('/usr/bin/node', [BIN, 'run', 'It was'], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /^waste needs Node\.js 22 or newer; this is Node\.js 20\.\d+\.\d+ \(install a current release: https:\/\/nodejs\.org\)\n$/);
  });
});

describe('npm run bench -- relaxed', () => {
  it('runs on this Node, passing the relaxed-SIMD flag only where the feature is off (Node 22+ refuse the flag)', () => {
    const r = spawnSync(process.execPath, [path.join(ROOT, 'dist', 'src', 'bench', 'main.js'), 'relaxed', '--quick', '--json'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { node: string; rows: { compiler: string; flags: string[]; probe: { available: boolean; calls: number } }[] };
    assert.equal(out.node, process.version);
    assert.ok(out.rows.length >= 3);
    // every supported Node compiles relaxed SIMD without a flag, under each compiler
    for (const row of out.rows) {
      assert.ok(!row.flags.includes('--experimental-wasm-relaxed-simd'), `${row.compiler}: ${row.flags.join(' ')}`);
      assert.equal(row.probe.available, true, row.compiler);
      assert.equal(row.probe.calls, 20_000);
    }
  });
});
