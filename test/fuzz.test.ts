/**
 * Damaged containers: every case is classified — a clean error, the same answer, a changed answer
 * that `waste verify` reports as damage, a silently wrong answer, a hang, a crash, runaway memory —
 * and the last four fail the test. The answer is the token ids of a prompt and the logits after
 * them, bit for bit. Each case runs in a child process under a watchdog (test/fuzz-harness.ts).
 * Seeds are fixed so a failure reproduces; test/fuzz-files.test.ts damages the binary files.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { openModelContainer } from '../src/model/registry.js';
import { Rng } from '../src/util/prng.js';
import { type Outcome, Tally, Watchdog } from './fuzz-harness.js';
import { copyContainer, synth } from './helpers.js';

const PROMPT = 'It was a dark and stormy night';
/** The engine's memory budget in each case. */
const BUDGET = 64 << 20;

const ODD_VALUES: unknown[] = [0, -1, 1, 2, 3, 7, 8, 64, 128, 255, 256, 4096, 65535, 65536, 2 ** 31, 2 ** 32, 2 ** 53, 1e300, -1e300, 0.5, NaN, null, true, false, '', '8', 'VQ3R', [], [1], {}, { a: 1 }];

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

describe('the fuzz watchdog tells every outcome apart', () => {
  const dog = new Watchdog({ kind: 'selftest', memoryBytes: 128 << 20, hangMs: 5000, heapMb: 64 });
  after(() => dog.close());

  it('a clean error, an exception, a hang, a death, a memory hog, an exhausted heap — and the case after each', async (t) => {
    const seen: Record<string, Outcome> = {};
    for (const what of ['error', 'throw', 'hang', 'ok', 'die', 'memory', 'heap', 'ok']) seen[what] = (await dog.run(what)).outcome;
    assert.deepEqual(seen, { error: 'error', throw: 'crash', hang: 'hang', ok: 'ok', die: 'crash', memory: 'memory', heap: 'memory' });
  });
});

describe('fuzz: damaged manifests', () => {
  let good = '';
  let manifestText = '';
  let reference = '';
  // what a case may add to the process: the engine's budget, and room for the code and the JavaScript heap
  const dog = new Watchdog({ kind: 'container', memoryBytes: BUDGET + (128 << 20) });

  before(async () => {
    good = synth({ shape: 'tiny', seed: 31, tokenizer: true }, 'fuzz');
    manifestText = fs.readFileSync(path.join(good, 'manifest.json'), 'utf8');
    const v = await dog.run({ dir: good, text: PROMPT, reference: '', budget: BUDGET });
    assert.equal(v.outcome, 'same', v.detail);
    reference = v.detail;
  });
  after(() => dog.close());

  /** Write `manifest` into a copy of the container, run the case, classify it. */
  async function attempt(tally: Tally, label: string, manifest: string | Uint8Array): Promise<void> {
    const d = copyContainer(good);
    fs.writeFileSync(path.join(d, 'manifest.json'), manifest);
    tally.add(label, await dog.run({ dir: d, text: PROMPT, reference, budget: BUDGET }));
    fs.rmSync(d, { recursive: true });
  }

  it('odd values and removed keys anywhere in the manifest', async (t) => {
    const rng = new Rng(1234);
    const all = paths(JSON.parse(manifestText));
    const tally = new Tally();
    for (let i = 0; i < 100; i++) {
      const m = JSON.parse(manifestText);
      const changes: string[] = [];
      for (let j = 1 + rng.int(3); j > 0; j--) {
        const p = all[rng.int(all.length)];
        let o = m;
        for (const k of p.slice(0, -1)) o = o?.[k];
        if (o && typeof o === 'object') {
          const key = p[p.length - 1];
          if (rng.float() < 0.15) {
            delete o[key];
            changes.push(`${p.join('.')} removed`);
          } else {
            o[key] = ODD_VALUES[rng.int(ODD_VALUES.length)];
            changes.push(`${p.join('.')} = ${JSON.stringify(o[key])}`);
          }
        }
      }
      await attempt(tally, `case ${i} (${changes.join(', ')})`, JSON.stringify(m));
    }
    t.diagnostic(String(tally));
    assert.deepEqual(tally.failures, [], String(tally));
    assert.ok(tally.count('error') > 50, `most of these are refused: ${tally}`);
  });

  it('damaged bytes in the manifest text', async (t) => {
    const rng = new Rng(4321);
    const bytes = Buffer.from(manifestText);
    const tally = new Tally();
    for (let i = 0; i < 200; i++) {
      const b = Buffer.from(bytes);
      const changes: string[] = [];
      for (let j = 1 + rng.int(2); j > 0; j--) {
        const at = rng.int(b.length);
        const was = b[at];
        b[at] = rng.int(2) ? was ^ (1 << rng.int(8)) : 0x20 + rng.int(95);
        changes.push(`byte ${at} ${JSON.stringify(String.fromCharCode(was))}→${JSON.stringify(String.fromCharCode(b[at]))}`);
      }
      await attempt(tally, `case ${i} (${changes.join(', ')})`, b);
    }
    t.diagnostic(String(tally));
    assert.deepEqual(tally.failures, [], String(tally));
    assert.ok(tally.count('error') > 50, `${tally}`);
    // a damaged name or number that the parser accepts changes the answer: verify must say so
    assert.ok(tally.count('flagged') > 0, `some damage changes the answer: ${tally}`);
  });

  it('the reader never follows a bank file name out of the container', () => {
    const d = copyContainer(good);
    const m = JSON.parse(manifestText);
    m.layers['1'].file = '/etc/hostname';
    fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
    assert.throws(() => openModelContainer(d), /must be a plain file name/);
  });
});
