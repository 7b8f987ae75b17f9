import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { WasteError } from '../src/util/errors.js';
import { GOLDEN_CASES } from './fixtures.js';
import { ROOT, containerDigest, goldenDir, readF32, relErr, sameBits, synth, testPicture } from './helpers.js';
import { expandPads } from '../src/model/media.js';

describe('forward pass against the Python reference (golden files)', () => {
  // exact activations: f32 arithmetic against float64 (a16 has its own reference: test/activations.test.ts)
  for (const c of GOLDEN_CASES) {
    for (const kernels of ['wasm', 'typescript'] as const) {
      const tol = c.tolerance ?? 1e-4;
      it(`${c.name}, ${kernels} kernels, exact activations: every position within ${tol} of the float64 reference`, async () => {
        const dir = goldenDir(c);
        const meta = JSON.parse(fs.readFileSync(path.join(ROOT, 'test', 'golden', `${c.name}.json`), 'utf8'));
        assert.equal(containerDigest(dir), meta.containerSha256, 'the synthetic generator changed; regenerate the goldens (tools/make-goldens.ts)');
        const ref = readF32(path.join(ROOT, 'test', 'golden', `${c.name}.bin`));
        const m = await Model.open(dir, { kernels, activations: 'exact' });
        try {
          let logits: Float32Array;
          if (c.image) {
            const img = await m.encodeImage(testPicture(c.image.width, c.image.height, c.image.seed));
            const ids = expandPads(c.ids, m.vision!.mediaToken, [img]);
            logits = await m.newSession().forward(ids, { allLogits: true, images: [img] });
          } else logits = await m.newSession().forward(c.ids, { allLogits: true });
          const err = relErr(logits, ref);
          assert.ok(err <= tol, `max |Δ| / max |ref| = ${err}`);
        } finally {
          await m.close();
        }
      });
    }
  }
});

describe('prefill and decode are the same computation', () => {
  const dir = synth({ shape: 'tiny', seed: 11 }, 'invariance');
  const ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9];

  async function run(chunk: number, feed: number[][]): Promise<Float32Array[]> {
    const m = await Model.open(dir, { chunk });
    try {
      const s = m.newSession();
      const out: Float32Array[] = [];
      for (const part of feed) out.push(await s.forward(part));
      return out;
    } finally {
      await m.close();
    }
  }

  it('prefill of T tokens then one step equals T+1 single steps, bit for bit', async () => {
    for (const T of [1, 2, 5, 16, 17, 30]) {
      const [, stepped] = await run(16, [ids.slice(0, T), [ids[T]]]);
      const singles = await run(16, ids.slice(0, T + 1).map((id) => [id]));
      assert.ok(sameBits(stepped, singles[T]), `T=${T}`);
    }
  });

  it('the chunk size does not change a single bit of any position', async () => {
    const all = async (chunk: number) => {
      const m = await Model.open(dir, { chunk });
      try {
        return await m.newSession().forward(ids, { allLogits: true });
      } finally {
        await m.close();
      }
    };
    const ref = await all(16);
    for (const chunk of [1, 3, 7, 64]) assert.ok(sameBits(await all(chunk), ref), `chunk ${chunk}`);
  });

  it('the last row of all-position logits is the last-token logits', async () => {
    const m = await Model.open(dir, { sessions: 2 });
    try {
      const all = await m.newSession().forward(ids, { allLogits: true });
      const last = await m.newSession().forward(ids);
      const V = m.config.vocab;
      assert.ok(sameBits(all.subarray((ids.length - 1) * V), last));
    } finally {
      await m.close();
    }
  });

  it('a reset session starts over exactly', async () => {
    const m = await Model.open(dir);
    try {
      const s = m.newSession();
      const first = await s.forward(ids.slice(0, 9));
      await s.forward([1, 2, 3]);
      s.reset();
      assert.equal(s.position, 0);
      assert.ok(sameBits(await s.forward(ids.slice(0, 9)), first));
    } finally {
      await m.close();
    }
  });
});

describe('threads never change a bit', () => {
  // wide enough that the products really are split across threads
  const dir = synth({ shape: 'tiny', seed: 13, config: GOLDEN_CASES[2].synth!.config }, 'threads');
  const ids = [1, 500, 22, 3, 300, 45, 6, 7, 88, 9, 10, 111, 12, 13, 140, 15, 16, 17, 180];

  it('logits of every position are bit-identical for 1, 2, 3 and 4 threads', async () => {
    const results: Float32Array[] = [];
    for (const threads of [1, 2, 3, 4]) {
      const m = await Model.open(dir, { threads, chunk: 8 });
      try {
        const s = m.newSession();
        const all = await s.forward(ids, { allLogits: true });
        const next = await s.forward([5]);
        results.push(new Float32Array([...all, ...next]));
      } finally {
        await m.close();
      }
    }
    for (let i = 1; i < results.length; i++) assert.ok(sameBits(results[i], results[0]), `${i + 1} threads differ from 1`);
  });

  it('spreading the trunk over many arenas changes nothing', async () => {
    const run = async (arenaBytes?: number) => {
      // 4 MiB arenas hold a layer and the scratch of a 16-token chunk
      const m = await Model.open(dir, { arenaBytes, threads: 2, chunk: 16 });
      try {
        return { n: m.arenas.length, logits: await m.newSession().forward(ids, { allLogits: true }) };
      } finally {
        await m.close();
      }
    };
    const one = await run();
    const many = await run(4 << 20);
    assert.equal(one.n, 2, 'one arena for the trunk, one for the expert cache');
    assert.ok(many.n >= 3, `${many.n} arenas`);
    assert.ok(sameBits(many.logits, one.logits));
  });

  it('the WebAssembly kernels agree with the TypeScript reference (exact activations: a16 logits are compared product by product, test/activations.test.ts)', async () => {
    const run = async (kernels: 'wasm' | 'typescript') => {
      const m = await Model.open(dir, { kernels, activations: 'exact' });
      try {
        return await m.newSession().forward(ids, { allLogits: true });
      } finally {
        await m.close();
      }
    };
    const err = relErr(await run('wasm'), await run('typescript'));
    assert.ok(err <= 1e-5, `max |Δ| / max |ref| = ${err}`);
  });
});

describe('forward input checks', () => {
  const dir = synth({ shape: 'tiny', seed: 12 }, 'checks');

  it('refuses token ids outside the vocabulary', async () => {
    const m = await Model.open(dir);
    try {
      const s = m.newSession();
      for (const bad of [-1, 300, 1.5, NaN]) {
        await assert.rejects(s.forward([1, bad]), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG' && /outside the vocabulary/.test(e.message));
      }
      assert.equal(s.position, 0, 'a refused call consumes nothing');
    } finally {
      await m.close();
    }
  });

  it('refuses to run past the context length and keeps the state usable', async () => {
    const m = await Model.open(dir);
    try {
      const s = m.newSession({ maxContext: 4 });
      await s.forward([1, 2, 3]);
      await assert.rejects(s.forward([4, 5]), (e: unknown) => e instanceof WasteError && e.code === 'E_STATE' && /context is full/.test(e.message));
      assert.equal(s.position, 3);
      const ok = await s.forward([4]);
      assert.equal(ok.length, m.config.vocab);
    } finally {
      await m.close();
    }
  });
});
