/**
 * What every family beyond Kimi must do, run on each one's small synthetic shape: its container
 * gives the same bits whatever the chunk, the threads or the budget (experts streamed at the
 * floor or all cached); a saved session continues bit for bit; a checkpoint converted into a
 * container stays within the quantization error the quality report states; and text goes in and
 * out through its chat format.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model, type OpenOptions } from '../src/api/model.js';
import { convert } from '../src/convert/convert.js';
import { measureQuality } from '../src/quality/quality.js';
import { BIN, checkpoint, familyTinyShapes, sameBits, synth, tmpDir } from './helpers.js';

const argmax = (v: Float32Array) => v.reduce((b, x, i, a) => (x > a[b] ? i : b), 0);
const prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7];

/** The prompt's logits, then 6 greedy steps'. */
async function run(dir: string, opts: OpenOptions): Promise<Float32Array[]> {
  const m = await Model.open(dir, opts);
  try {
    const s = m.newSession();
    const out = [await s.forward(prompt)];
    for (let i = 0; i < 6; i++) out.push(await s.forward([argmax(out[out.length - 1])]));
    return out;
  } finally {
    await m.close();
  }
}

function same(a: Float32Array[], b: Float32Array[], what: string): void {
  assert.equal(a.length, b.length);
  a.forEach((x, i) => assert.ok(sameBits(x, b[i]), `${what}: step ${i} differs`));
}

for (const shape of familyTinyShapes()) {
  describe(`family ${shape}`, () => {
    const dir = synth({ shape, seed: 21, tokenizer: true }, shape);

    it('the same bits whatever the chunk (1, 7, 64) and the threads (1, 2)', async () => {
      const base = await run(dir, { chunk: 64, threads: 1 });
      same(await run(dir, { chunk: 7, threads: 1 }), base, 'chunk 7');
      same(await run(dir, { chunk: 1, threads: 2 }), base, 'chunk 1, 2 threads');
      same(await run(dir, { chunk: 64, threads: 2 }), base, '2 threads');
    });

    it('the same bits with the experts streamed through a cache at the floor as with every expert cached', async () => {
      const probe = await Model.open(dir);
      const floor = probe.plan.floorBytes;
      await probe.close();
      const roomy = await run(dir, { budget: floor + (64 << 20) });
      const m = await Model.open(dir, { budget: floor });
      try {
        assert.ok(m.stats().slots < m.config.moe.experts * m.config.layerKinds.filter((k) => k.ffn === 'moe').length, 'at the floor the cache cannot hold every expert');
      } finally {
        await m.close();
      }
      same(await run(dir, { budget: floor }), roomy, 'at the floor');
    });

    it('a saved session continues bit for bit', async () => {
      const m = await Model.open(dir, { sessions: 2 });
      try {
        const a = m.newSession();
        await a.forward(prompt.slice(0, 17));
        const file = path.join(tmpDir('session'), 's.waste');
        a.save(file);
        const straight = await a.forward(prompt.slice(17));
        const b = m.newSession();
        b.load(file);
        assert.ok(sameBits(await b.forward(prompt.slice(17)), straight));
      } finally {
        await m.close();
      }
    });

    it("a converted checkpoint: its f32 reference and its container agree to the quantization's error", async () => {
      const ck = checkpoint({ shape, seed: 22 }, `${shape}-ck`);
      const out = path.join(tmpDir('conv'), 'model');
      await convert(ck, out, { threads: 1 });
      const ids = Array.from({ length: 200 }, (_, i) => (i * 7919 + 13) % 256);
      const q = await measureQuality(ck, out, ids, { ctx: 64 });
      // random weights are harder to quantize than trained ones: the demo model's KL is 0.0074
      assert.ok(q.kl.mean < 0.05, `mean KL ${q.kl.mean}`);
      assert.ok(q.top1 > 0.5, `same top-1 ${q.top1}`);
    });

    it('text in, text out through its chat format (waste run, as a user types it)', () => {
      const r = spawnSync(process.execPath, [BIN, 'run', dir, 'Hello there', '-n', '8', '--seed', '1'], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      assert.match(r.stderr, /\[\d+ tokens, /);
    });
  });
}
