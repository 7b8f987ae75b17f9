/**
 * The build `npm install` runs: its kernel step prints nothing, so a new user never reads a
 * warning that looks like a failed install.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { ROOT, tmpDir } from './helpers.js';

describe('the build', () => {
  it('npm run build:wasm (AssemblyScript to dist/kernels.wasm) prints no warning', () => {
    const script = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['build:wasm'];
    const [tool, ...args] = script.split(' ');
    assert.equal(tool, 'asc');
    // the same command, its output written aside: the tests beside this one use dist/kernels.wasm
    const out = path.join(tmpDir('wasm'), 'kernels.wasm');
    const at = args.indexOf('-o');
    assert.equal(args[at + 1], 'dist/kernels.wasm');
    args[at + 1] = out;
    const r = spawnSync(process.execPath, [path.join(ROOT, 'node_modules', 'assemblyscript', 'bin', 'asc.js'), ...args], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout + r.stderr, '', 'the build says nothing');
    assert.ok(fs.statSync(out).size > 0);
  });
});
