import { openModelContainer } from '../src/model/registry.js';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, copyContainer, synth } from './helpers.js';

/**
 * trunk.bin and codebooks.bin carry no CRC32 of their own in format v0; the manifest's
 * `checksums` key (which the C engine never reads) records their SHA-256 and length. A bit flipped
 * in either used to change the logits while `waste verify` said "ok".
 */
const good = synth({ shape: 'tiny', seed: 61 }, 'sums');

type Json = Record<string, any>;
const manifestOf = (dir: string): Json => JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'));
const sha256 = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

function verify(dir: string) {
  const r = spawnSync(process.execPath, [BIN, 'verify', dir, '-q'], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** Flip the lowest bit of byte `at` of `file` in a copy of the good container. */
function flipped(file: string, at: (m: Json) => number): string {
  const d = copyContainer(good);
  const f = path.join(d, file);
  const b = fs.readFileSync(f);
  b[at(manifestOf(d))] ^= 1;
  fs.writeFileSync(f, b);
  return d;
}
// low bits of values, so no other check (finite weights, codebook headers) can notice
const inTrunk = (m: Json) => m.trunk.find((t: Json) => t.name === 'model.layers.0.self_attn.q_proj.weight' && t.fmt === 0).off + 40;
const inCodebooks = () => 16 + 2 * 100;

async function openFails(dir: string, re: RegExp): Promise<void> {
  await assert.rejects(Model.open(dir, { verify: true, threads: 1 }), (e: unknown) => e instanceof WasteError && e.code === 'E_IO' && re.test(e.message));
}

describe('checksums of trunk.bin and codebooks.bin', () => {
  it('synth writes them: the SHA-256 and length of each file', () => {
    const m = manifestOf(good);
    assert.deepEqual(Object.keys(m.checksums), ['trunk.bin', 'codebooks.bin']);
    for (const f of ['trunk.bin', 'codebooks.bin'])
      assert.deepEqual(m.checksums[f], { sha256: sha256(path.join(good, f)), bytes: fs.statSync(path.join(good, f)).size });
  });

  it('waste verify checks them and names the file whose bytes changed', () => {
    const ok = verify(good);
    assert.equal(ok.code, 0, ok.err);
    assert.equal(ok.out, 'ok: trunk.bin and codebooks.bin match their SHA-256; 24 expert records in 3 banks (192.0 KiB) have valid headers and checksums\n');
    for (const [file, at] of [['trunk.bin', inTrunk], ['codebooks.bin', inCodebooks]] as const) {
      const r = verify(flipped(file, at));
      assert.equal(r.code, 1, r.out);
      assert.equal(r.out, `FAILED: ${file}: SHA-256 mismatch with manifest.json's checksums (the file is damaged)\n`);
    }
  });

  it('--verify checks them at open; without it a flipped bit opens (the check is on request, like the records\' CRC32)', async () => {
    for (const [file, at] of [['trunk.bin', inTrunk], ['codebooks.bin', inCodebooks]] as const) {
      const d = flipped(file, at);
      await openFails(d, new RegExp(`^${file.replace('.', '\\.')}: SHA-256 mismatch`));
      const m = await Model.open(d, { threads: 1 });
      await m.close();
    }
    const m = await Model.open(good, { verify: true, threads: 1 });
    await m.close();
  });

  it('a file of another length than recorded is refused at every open', () => {
    const longer = copyContainer(good);
    fs.appendFileSync(path.join(longer, 'trunk.bin'), Buffer.alloc(8));
    assert.throws(() => openModelContainer(longer), /^WasteError: trunk\.bin: \d+ bytes, but manifest\.json's checksums say \d+; the file is longer than written$/);
    const shorter = copyContainer(good);
    const cb = path.join(shorter, 'codebooks.bin');
    // one whole codebook fewer: still a well-formed codebooks.bin
    fs.truncateSync(cb, fs.statSync(cb).size - (16 + 256 * 8 * 2));
    assert.throws(() => openModelContainer(shorter), /^WasteError: codebooks\.bin: \d+ bytes, but manifest\.json's checksums say \d+; the file is truncated$/);
  });

  it('a container without them is unverified, not ok: verify says what it could not check and exits 1, damaged or not', () => {
    const drop = (d: string, keep: string[] = []) => {
      const m = manifestOf(d);
      m.checksums = Object.fromEntries(Object.entries(m.checksums).filter(([f]) => keep.includes(f)));
      if (!keep.length) delete m.checksums;
      // a writer without checksums wrote no manifest_sha256 either (and this edit would not match it)
      delete m.manifest_sha256;
      fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
      return d;
    };
    const records = '24 expert records in 3 banks (192.0 KiB) have valid headers and checksums';
    for (const d of [drop(copyContainer(good)), drop(flipped('codebooks.bin', inCodebooks))]) {
      const r = verify(d);
      assert.equal(r.code, 1, r.err);
      assert.equal(r.out, `UNVERIFIED: manifest.json has no checksum for trunk.bin and codebooks.bin, so their bytes could not be checked, and no manifest_sha256, so its own values could not be checked (${records})\n`);
    }
    // one of the two summed: that one is checked, the other named
    const r = verify(drop(flipped('codebooks.bin', inCodebooks), ['trunk.bin']));
    assert.equal(r.code, 1, r.err);
    assert.equal(r.out, `UNVERIFIED: manifest.json has no checksum for codebooks.bin, so its bytes could not be checked, and no manifest_sha256, so its own values could not be checked (trunk.bin matches its SHA-256; ${records})\n`);
  });

  it('a container whose manifest has no manifest_sha256 is unverified too: its values could be damaged without a trace', () => {
    const d = copyContainer(good);
    const m = manifestOf(d);
    delete m.manifest_sha256;
    fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
    const r = verify(d);
    assert.equal(r.code, 1, r.err);
    assert.match(r.out, /^UNVERIFIED: manifest\.json has no manifest_sha256, so its own values could not be checked \(trunk\.bin and codebooks\.bin match their SHA-256; 24 expert records/);
  });

  it('--verify on a container without them says what it could not check (it used to run as if verified)', async () => {
    const d = copyContainer(good);
    const m = manifestOf(d);
    delete m.checksums;
    delete m.manifest_sha256;
    fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
    const warned: string[] = [];
    const model = await Model.open(d, { verify: true, threads: 1, warn: (w) => warned.push(w) });
    await model.close();
    assert.deepEqual(warned, [`${d}: --verify could not check trunk.bin and codebooks.bin (manifest.json has no checksum for them), nor manifest.json's own values (it has no manifest_sha256); waste verify reports it UNVERIFIED`]);
    // without --verify nothing was promised, so nothing is said; a container with them checks them all, and says nothing either
    const quiet: string[] = [];
    await (await Model.open(d, { threads: 1, warn: (w) => quiet.push(w) })).close();
    await (await Model.open(good, { verify: true, threads: 1, warn: (w) => quiet.push(w) })).close();
    assert.deepEqual(quiet, []);
    // the CLI: a warning line on stderr, and the run goes on
    const r = spawnSync(process.execPath, [BIN, 'logits', d, '--ids', '1,2,3', '--out', path.join(d, 'logits.bin'), '--verify'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /^waste: warning: .*: --verify could not check trunk\.bin and codebooks\.bin .*waste verify reports it UNVERIFIED\n/);
  });

  it('malformed entries name the field', () => {
    const cases: [(s: Json) => void, RegExp][] = [
      [(s) => (s['trunk.bin'].sha256 = 'ABC'), /manifest\.json: checksums\.trunk\.bin\.sha256 must be 64 lower-case hex digits \(got "ABC"\)/],
      [(s) => (s['trunk.bin'].bytes = -1), /manifest\.json: checksums\.trunk\.bin\.bytes must be an integer/],
      [(s) => (s['../trunk.bin'] = s['trunk.bin']), /manifest\.json: checksums\.\.\.\/trunk\.bin is not a plain file name inside the container/],
      [(s) => (s['codebooks.bin'] = 'x'), /manifest\.json: checksums\.codebooks\.bin is required \(an object\)/],
    ];
    for (const [edit, re] of cases) {
      const d = copyContainer(good);
      const m = manifestOf(d);
      edit(m.checksums);
      fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
      assert.throws(() => openModelContainer(d), (e: unknown) => e instanceof WasteError && e.code === 'E_FORMAT' && re.test(e.message));
    }
  });
});
