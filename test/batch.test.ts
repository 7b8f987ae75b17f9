/**
 * Batched decoding: several sequences advanced in one forward step (rows of shared chunks) get
 * logits bit-identical to what each gets alone, whatever the batch — sequences of different
 * lengths, joining with a prompt mid-stream, leaving — on every family.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Model, type OpenOptions } from '../src/api/model.js';
import type { SequenceState } from '../src/model/architecture.js';
import { copyContainer, familyTinyShapes, sameBits, synth } from './helpers.js';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { WasteError } from '../src/util/errors.js';

const argmax = (v: Float32Array) => v.reduce((b, x, i, a) => (x > a[b] ? i : b), 0);

/** Three prompts of different lengths; each then decodes greedily. */
const prompts = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [2, 7], [8, 8, 1, 9, 6, 4, 2, 1, 7, 7, 3, 3, 9, 5, 0, 2, 8, 4, 6, 1]];
const STEPS = 8;

/** Each prompt alone: its prompt's logits, then each greedy step's. */
async function alone(dir: string, opts: OpenOptions): Promise<Float32Array[][]> {
  const m = await Model.open(dir, opts);
  try {
    const out: Float32Array[][] = [];
    for (const p of prompts) {
      const s = m.newSession();
      const rows = [await s.forward(p)];
      for (let i = 0; i < STEPS; i++) rows.push(await s.forward([argmax(rows[rows.length - 1])]));
      out.push(rows);
      s.close();
    }
    return out;
  } finally {
    await m.close();
  }
}

/**
 * The same through Network.forwardBatch: sequence 0 and 1 start together (their prompts in one
 * batch), sequence 2 joins with its prompt at step 3 (its prompt rows beside the others' decode
 * rows), sequence 1 leaves after step 5 and rejoins (its state kept) at step 7.
 */
async function batched(dir: string, opts: OpenOptions): Promise<Float32Array[][]> {
  // room for three states beside the one the plan reserves
  const m = await Model.open(dir, { ...opts, budget: 256 << 20 });
  try {
    const net = m.net;
    const states: SequenceState[] = prompts.map(() => net.newState(net.maxContext));
    const out: Float32Array[][] = prompts.map(() => []);
    const next = (j: number) => [argmax(out[j][out[j].length - 1])];
    // sequence 1 leaves after step 5 and comes back at step 7 for the rest of its steps
    const active = (j: number, step: number) => (j === 2 ? step >= 3 : j === 1 ? step <= 5 || step >= 7 : true);
    for (let step = 0; out.some((r) => r.length < STEPS + 1); step++) {
      const live = [0, 1, 2].filter((j) => active(j, step) && out[j].length < STEPS + 1);
      const entries = live.map((j) => ({ state: states[j], tokens: out[j].length ? next(j) : prompts[j] }));
      const logits = await net.forwardBatch(entries);
      live.forEach((j, i) => out[j].push(logits[i]));
    }
    return out;
  } finally {
    await m.close();
  }
}

function sameRuns(a: Float32Array[][], b: Float32Array[][]): void {
  assert.equal(a.length, b.length);
  for (let j = 0; j < a.length; j++) {
    assert.equal(a[j].length, b[j].length, `sequence ${j}: steps`);
    for (let i = 0; i < a[j].length; i++) assert.ok(sameBits(a[j][i], b[j][i]), `sequence ${j}, step ${i}: not bit-identical`);
  }
}

describe('a batched step is each sequence alone, bit for bit', () => {
  for (const shape of ['tiny', 'k3-tiny', ...familyTinyShapes()]) {
    const dir = synth({ shape, seed: 5 }, `batch-${shape}`);
    for (const chunk of [4, 64])
      it(`${shape}, chunk ${chunk}: different lengths, a prompt joining mid-stream, a sequence leaving`, async () => {
        const opts = { chunk, threads: 2 };
        sameRuns(await batched(dir, opts), await alone(dir, opts));
      });
  }
});

describe('sessions generating at once share the passes and each gets what it gets alone', () => {
  const dir = synth({ shape: 'tiny', seed: 7, tokenizer: true }, 'batch-lib');
  const jobs = [
    { prompt: [5, 6, 7, 8, 9, 10, 11, 12, 13], opts: { maxTokens: 24, temperature: 0 } },
    { prompt: [40, 41], opts: { maxTokens: 16, temperature: 0.9, seed: 3 } },
    { prompt: Array.from({ length: 150 }, (_, i) => (i * 7) % 200), opts: { maxTokens: 20, temperature: 1, topP: 0.9, seed: 11 } },
  ];

  type Run = { tokens: number[]; last: Float32Array; finish: string };
  async function one(m: Model, j: (typeof jobs)[number], signal?: AbortSignal, onToken?: (n: number) => void): Promise<Run> {
    const s = m.newSession();
    const it = s.generate(j.prompt, { ...j.opts, signal });
    let n = 0;
    let r = await it.next();
    while (!r.done) {
      onToken?.(++n);
      r = await it.next();
    }
    const out = { tokens: r.value.tokens, last: s.lastLogits!, finish: r.value.finish };
    s.close();
    return out;
  }

  it('greedy and seeded sampling, different lengths, one joining late, bit-identical; decode steps ran together', async () => {
    const m = await Model.open(dir, { chunk: 16, sessions: 3 });
    try {
      const alone: Run[] = [];
      for (const j of jobs) alone.push(await one(m, j));
      let passes = 0;
      let rows = 0;
      m.observeRoutes((L, _route, T) => {
        if (L === firstMoe) passes++, (rows += T);
      });
      const firstMoe = m.config.layerKinds.findIndex((k) => k.ffn === 'moe');
      // the third (a prompt of ten chunks) joins once the first has four tokens
      let late!: Promise<Run>;
      const first = one(m, jobs[0], undefined, (n) => {
        if (n === 4) late = one(m, jobs[2]);
      });
      const second = one(m, jobs[1]);
      const together = [await first, await second, await late];
      m.observeRoutes(undefined);
      for (let i = 0; i < jobs.length; i++) {
        assert.deepEqual(together[i].tokens, alone[i].tokens, `job ${i}: tokens`);
        assert.ok(sameBits(together[i].last, alone[i].last), `job ${i}: last logits not bit-identical`);
      }
      // alone each token (and each prompt chunk) is a pass of its own
      const solo = jobs.reduce((n, j, i) => n + Math.ceil(j.prompt.length / 16) + alone[i].tokens.length, 0);
      assert.ok(passes < solo * 0.8, `${passes} passes for ${rows} rows: the sessions did not share them (${solo} alone)`);
      assert.equal(rows, solo + jobs.reduce((n, j) => n + j.prompt.length, 0) - jobs.reduce((n, j) => n + Math.ceil(j.prompt.length / 16), 0), 'every token ran once');
    } finally {
      await m.close();
    }
  });

  it('a session aborted by a timer leaves the batch; the others are unchanged', async () => {
    const m = await Model.open(dir, { chunk: 16, sessions: 3 });
    try {
      const long = { prompt: [9, 9, 9], opts: { maxTokens: 100000, temperature: 0.7, seed: 5 } };
      const alone = [await one(m, jobs[0]), await one(m, long), await one(m, jobs[1])];
      const together = await Promise.all([one(m, jobs[0]), one(m, long, AbortSignal.timeout(15)), one(m, jobs[1])]);
      assert.equal(together[1].finish, 'aborted');
      assert.deepEqual(together[1].tokens, alone[1].tokens.slice(0, together[1].tokens.length));
      for (const i of [0, 2]) {
        assert.deepEqual(together[i].tokens, alone[i].tokens, `job ${i}: tokens`);
        assert.ok(sameBits(together[i].last, alone[i].last), `job ${i}: last logits`);
      }
    } finally {
      await m.close();
    }
  });
});

describe('a forward pass that fails part-way', () => {
  it('leaves its sessions refusing to continue (E_STATE, naming reset) until reset() or load()', async () => {
    const dir = copyContainer(synth({ shape: 'tiny', seed: 12 }, 'lost-state'));
    // damage every page of the first expert bank past its first: whatever layer 1 reads fails its CRC
    const bank = fs.readdirSync(dir).filter((f) => /^experts-L\d+\.bin$/.test(f)).sort()[0];
    const file = path.join(dir, bank);
    const bytes = fs.readFileSync(file);
    for (let at = 4096 + 100; at < bytes.length; at += 512) bytes[at] ^= 0x5a;
    fs.writeFileSync(file, bytes);
    const m = await Model.open(dir, { verify: true, threads: 1 });
    try {
      const s = m.newSession({ maxContext: 32 });
      const code = async (p: Promise<unknown>) => {
        try {
          await p;
          return 'ok';
        } catch (e) {
          assert.ok(e instanceof WasteError, String(e));
          return `${e.code}: ${e.message}`;
        }
      };
      const first = await code(s.forward([1, 2, 3]));
      assert.match(first, /^E_IO: /);
      const second = await code(s.forward([4]));
      assert.match(second, /^E_STATE: the session's state was lost when a forward pass failed .*reset\(\)/);
      s.reset();
      // after reset() it runs again (and meets the same damaged record, not the lost state)
      assert.match(await code(s.forward([1, 2, 3])), /^E_IO: /);
      // a session the failure did not touch is unaffected
      const other = m.newSession({ maxContext: 32 });
      assert.match(await code(other.forward([1, 2, 3])), /^E_IO: /);
    } finally {
      await m.close();
    }
  });
});
