/**
 * `waste serve` on an address it cannot listen on, run as a user runs it: one line naming the
 * address and what to change, a non-zero exit, no "internal error" — and before the model is
 * loaded (a damaged model dir is not even opened when the address is refused).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BIN, tmpDir } from './helpers.js';

/** The CLI to its end: exit code and what it wrote. */
function waste(...args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('close', (code) => resolve({ code, out, err }));
  });
}

/** One line on stderr, naming the address, no internal error and no stack. */
function assertOneLine(r: { code: number | null; err: string }, re: RegExp): void {
  assert.notEqual(r.code, 0, r.err);
  assert.equal(r.err.trimEnd().split('\n').length, 1, r.err);
  assert.match(r.err, re);
  assert.doesNotMatch(r.err, /internal error|please report|^\s+at /m);
}

describe('waste serve: the address is checked before the model loads', () => {
  let busy: net.Server;
  let port: number;
  // a model directory whose manifest is damaged: opening it would fail with a format error
  const damaged = path.join(tmpDir('serve-addr'), 'broken');
  fs.mkdirSync(damaged);
  fs.writeFileSync(path.join(damaged, 'manifest.json'), '{ not json');

  before(async () => {
    busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen({ host: '127.0.0.1', port: 0 }, resolve));
    port = (busy.address() as net.AddressInfo).port;
  });
  after(() => new Promise<void>((resolve) => busy.close(() => resolve())));

  it('a port in use: one line naming 127.0.0.1:PORT, exit non-zero, nothing loaded', async () => {
    const r = await waste('serve', '--port', String(port));
    assertOneLine(r, new RegExp(`^waste: cannot listen on 127\\.0\\.0\\.1:${port}: the port is in use \\(another server\\?\\); pick another --port$`, 'm'));
    // the damaged model is never opened: the address fails first
    const d = await waste('serve', damaged, '--port', String(port));
    assertOneLine(d, new RegExp(`127\\.0\\.0\\.1:${port}: the port is in use`));
  });

  it('a host that is no address: one line naming it, exit 2', async () => {
    const r = await waste('serve', damaged, '--host', '256.1.1.1', '--port', '0');
    assertOneLine(r, /^waste: cannot listen on 256\.1\.1\.1:0: "256\.1\.1\.1" is neither an address nor a name that resolves; pick another --host$/m);
    assert.equal(r.code, 2);
  });

  it('an address that is not this machine\'s: one line, exit 2', async () => {
    // TEST-NET-1 (RFC 5737): never assigned to a machine, so binding it fails with no traffic sent
    const r = await waste('serve', damaged, '--host', '192.0.2.1', '--port', '0');
    assertOneLine(r, /^waste: cannot listen on 192\.0\.2\.1:0: 192\.0\.2\.1 is not an address of this machine; pick another --host$/m);
    assert.equal(r.code, 2);
  });
});
