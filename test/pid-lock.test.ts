import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PidLock } from '../src/util/pid-lock.js';
import { checkStoreName } from '../src/store/home.js';

const LOCK_MODULE = fileURLToPath(new URL('../src/util/pid-lock.js', import.meta.url));

/** A process that tries the lock when `go` appears, holds it a while if it got it, and says which. */
function taker(file: string, go: string): Promise<string> {
  const src = `
    const { PidLock } = await import(${JSON.stringify(LOCK_MODULE)});
    const fs = await import('node:fs');
    while (!fs.existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 1));
    try { const l = PidLock.take(${JSON.stringify(file)}, (p) => 'busy ' + p); await new Promise((r) => setTimeout(r, 400)); l.release(); console.log('took'); }
    catch (e) { console.log('refused ' + e.message); }`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', src], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  return new Promise((res) => child.on('exit', () => res(out.trim())));
}

describe('PidLock', () => {
  it('of several processes starting at once, exactly one holds it; a stale lock is taken over', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'waste-lock-'));
    try {
      const file = path.join(dir, 'x.lock');
      for (const stale of [false, true]) {
        // a lock left by a process that no longer runs
        if (stale) fs.writeFileSync(file, '999999999');
        const go = path.join(dir, `go-${stale}`);
        const runs = Array.from({ length: 6 }, () => taker(file, go));
        await new Promise((r) => setTimeout(r, 400));
        fs.writeFileSync(go, '');
        const said = await Promise.all(runs);
        assert.equal(said.filter((s) => s === 'took').length, 1, said.join('\n'));
        assert.equal(said.filter((s) => s.startsWith('refused busy ')).length, 5, said.join('\n'));
        assert.ok(!fs.existsSync(file), 'released');
        assert.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('x.lock')), [], 'no temporaries left');
      }
      // in this process: a second taker is refused naming us and the lock file
      const l = PidLock.take(file, (p) => `held by ${p}`);
      assert.throws(() => PidLock.take(file, (p) => `held by ${p}`), new RegExp(`held by ${process.pid} \\(its lock: .*x\\.lock\\)`));
      l.release();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("store names cannot be a pull's side files", () => {
    for (const bad of ['x.partial', 'x.partial.identity', 'x.identity', '.x.lock']) assert.throws(() => checkStoreName(bad), /a model name is/);
    assert.equal(checkStoreName('x.lock'), 'x.lock'); // its lock is downloads/.x.lock.lock: no collision
  });
});
