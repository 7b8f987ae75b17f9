import { openModelContainer } from '../src/model/registry.js';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/engine/model.js';
import { WasteError } from '../src/util/errors.js';
import { Rng } from '../src/util/prng.js';
import { copyContainer, synth } from './helpers.js';

/**
 * Untrusted input never crashes the engine: a randomly damaged manifest or record header either
 * still works or fails with one WasteError of one line. Anything else (a TypeError, a RangeError, a hang) is
 * a bug. Seeds are fixed so a failure reproduces.
 */
const good = synth({ shape: 'tiny', seed: 31 }, 'fuzz');
const manifestText = fs.readFileSync(path.join(good, 'manifest.json'), 'utf8');

const ODD_VALUES: unknown[] = [0, -1, 1, 2, 3, 7, 8, 64, 128, 255, 256, 4096, 65535, 65536, 2 ** 31, 2 ** 32, 2 ** 53, 1e300, -1e300, 0.5, NaN, null, true, false, '', '8', 'VQ3R', [], [1], {}, { a: 1 }];

async function attempt(dir: string): Promise<'ok' | 'refused'> {
  try {
    const m = await Model.open(dir, { verify: true });
    try {
      await m.newSession({ maxContext: 8 }).forward([1, 2, 3]);
    } finally {
      await m.close();
    }
    return 'ok';
  } catch (e) {
    if (!(e instanceof WasteError)) throw e;
    assert.doesNotMatch(e.message, /[\n\r]/, 'an error is one line');
    return 'refused';
  }
}

function paths(v: unknown, prefix: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      const p = [...prefix, Array.isArray(v) ? Number(k) : k];
      out.push(p);
      paths(x, p, out);
    }
  }
  return out;
}

describe('fuzz: damaged containers fail cleanly', () => {
  it('random manifest mutations', async () => {
    const rng = new Rng(1234);
    const all = paths(JSON.parse(manifestText));
    const tally = { ok: 0, refused: 0 };
    for (let i = 0; i < 250; i++) {
      const d = copyContainer(good);
      const m = JSON.parse(manifestText);
      const n = 1 + rng.int(3);
      for (let j = 0; j < n; j++) {
        const p = all[rng.int(all.length)];
        let o = m;
        for (const k of p.slice(0, -1)) o = o?.[k];
        if (o && typeof o === 'object') {
          const key = p[p.length - 1];
          if (rng.float() < 0.15) delete o[key];
          else o[key] = ODD_VALUES[rng.int(ODD_VALUES.length)];
        }
      }
      fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
      tally[await attempt(d)]++;
      fs.rmSync(d, { recursive: true });
    }
    assert.ok(tally.refused > 100, `most mutations should be refused (${JSON.stringify(tally)})`);
  });

  it('random bytes in expert record headers', async () => {
    const rng = new Rng(99);
    let refused = 0;
    for (let i = 0; i < 60; i++) {
      const d = copyContainer(good);
      for (const L of [1, 2, 3]) {
        const f = path.join(d, `experts-L${L}.bin`);
        const bank = fs.readFileSync(f);
        const rec = bank.length / 8;
        for (let e = 0; e < 8; e++) bank[e * rec + rng.int(48)] ^= 1 + rng.int(255);
        fs.writeFileSync(f, bank);
      }
      if ((await attempt(d)) === 'refused') refused++;
      fs.rmSync(d, { recursive: true });
    }
    // the crc and the reserved fields are not header checks; everything else is
    assert.ok(refused > 40, `refused ${refused} of 60`);
  });

  it('random bytes in codebooks.bin headers and truncations anywhere', async () => {
    const rng = new Rng(7);
    for (let i = 0; i < 40; i++) {
      const d = copyContainer(good);
      const files = fs.readdirSync(d);
      const f = path.join(d, files[rng.int(files.length)]);
      const size = fs.statSync(f).size;
      if (rng.float() < 0.5) fs.truncateSync(f, rng.int(size));
      else {
        const b = fs.readFileSync(f);
        for (let k = 0; k < 8; k++) b[rng.int(Math.min(b.length, 64))] ^= 1 + rng.int(255);
        fs.writeFileSync(f, b);
      }
      await attempt(d);
      fs.rmSync(d, { recursive: true });
    }
  });

  it('the reader never follows a bank file name out of the container', () => {
    const d = copyContainer(good);
    const m = JSON.parse(manifestText);
    m.layers['1'].file = '/etc/hostname';
    fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
    assert.throws(() => openModelContainer(d), /must be a plain file name/);
  });
});
