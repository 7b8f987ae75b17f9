/**
 * Damaged binary files of a container — trunk.bin, codebooks.bin, the expert banks, the tokenizer
 * files: every case is a clean error, the same answer, or a changed answer that `waste verify`
 * reports; a silently wrong answer, a hang, a crash or runaway memory fails (test/fuzz.test.ts has
 * the manifest and the classification). Seeds are fixed so a failure reproduces.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Rng } from '../src/util/prng.js';
import { Tally, Watchdog } from './fuzz-harness.js';
import { copyContainer, synth } from './helpers.js';

const PROMPT = 'It was a dark and stormy night';
/** The engine's memory budget in each case. */
const BUDGET = 64 << 20;

describe('fuzz: damaged container files', () => {
  let good = '';
  let reference = '';
  // what a case may add to the process: the engine's budget, and room for the code and the JavaScript heap
  const dog = new Watchdog({ kind: 'container', memoryBytes: BUDGET + (128 << 20) });

  before(async () => {
    good = synth({ shape: 'tiny', seed: 31, tokenizer: true }, 'fuzz-files');
    const v = await dog.run({ dir: good, text: PROMPT, reference: '', budget: BUDGET });
    assert.equal(v.outcome, 'same', v.detail);
    reference = v.detail;
  });
  after(() => dog.close());

  /** Damage one file of a copy with `damage`, run the case, classify it. */
  async function attempt(tally: Tally, file: string, damage: (b: Buffer) => { bytes: Buffer; what: string }): Promise<void> {
    const d = copyContainer(good);
    const { bytes, what } = damage(fs.readFileSync(path.join(d, file)));
    fs.writeFileSync(path.join(d, file), bytes);
    tally.add(`${file}: ${what}`, await dog.run({ dir: d, text: PROMPT, reference, budget: BUDGET }));
    fs.rmSync(d, { recursive: true });
  }

  const files = () => fs.readdirSync(good).filter((f) => f !== 'manifest.json').sort();

  it('flipped bits and bytes anywhere in every file', async (t) => {
    const rng = new Rng(77);
    const tally = new Tally();
    for (let i = 0; i < 90; i++) {
      const all = files();
      const file = all[i % all.length];
      await attempt(tally, file, (b) => {
        const what: string[] = [];
        for (let k = 1 + rng.int(3); k > 0; k--) {
          // half of them in the first 64 bytes, where headers are
          const at = rng.int(2) ? rng.int(Math.min(64, b.length)) : rng.int(b.length);
          const was = b[at];
          b[at] = rng.int(2) ? was ^ (1 << rng.int(8)) : rng.int(256);
          what.push(`byte ${at} ${was}→${b[at]}`);
        }
        return { bytes: b, what: what.join(', ') };
      });
    }
    t.diagnostic(String(tally));
    assert.deepEqual(tally.failures, [], String(tally));
    assert.ok(tally.count('flagged') > 10 && tally.count('error') > 10, `${tally}`);
  });

  it('every file cut short or made longer', async (t) => {
    const rng = new Rng(78);
    const tally = new Tally();
    for (let i = 0; i < 40; i++) {
      const all = files();
      const file = all[i % all.length];
      await attempt(tally, file, (b) => {
        if (rng.int(3) === 0) {
          const extra = Buffer.alloc(1 + rng.int(5000));
          rng.fillBytes(extra);
          return { bytes: Buffer.concat([b, extra]), what: `${extra.length} bytes appended` };
        }
        const n = rng.int(b.length);
        return { bytes: b.subarray(0, n), what: `cut to ${n} of ${b.length} bytes` };
      });
    }
    t.diagnostic(String(tally));
    assert.deepEqual(tally.failures, [], String(tally));
    assert.ok(tally.count('error') > 20, `${tally}`);
  });
});
