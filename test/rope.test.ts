/**
 * Rotary position embeddings (src/model/blocks/rope.ts): the frequencies of every rope type the
 * families use against the float64 reference (test/golden/rope.json, from
 * tools/reference/rope_golden.py), and the rotation against its definition.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Rope, parseRope, ropeFrequencies } from '../src/model/blocks/rope.js';
import { Fields } from '../src/util/fields.js';
import { ROOT } from './helpers.js';

interface Case {
  name: string;
  family: string;
  config: Record<string, unknown>;
  headDim: number;
  dims: number;
  invFreq: number[];
  attentionFactor: number;
}
const golden = JSON.parse(fs.readFileSync(path.join(ROOT, 'test', 'golden', 'rope.json'), 'utf8')) as { cases: Case[] };

// the defaults each family's HF config class has (theta, partial rotary, gpt-oss's YaRN)
const DEFAULTS: Record<string, { theta: number; partialRotary?: number }> = {
  qwen3_moe: { theta: 10000 },
  glm4_moe: { theta: 10000, partialRotary: 0.5 },
  gpt_oss: { theta: 150000 },
  deepseek_v3: { theta: 10000 },
  kimi_k2: { theta: 10000 },
};

describe('rope', () => {
  for (const c of golden.cases)
    it(`${c.name}: frequencies and attention factor as the float64 reference`, () => {
      const cfg = parseRope(Fields.root('config.json', c.config), c.headDim, DEFAULTS[c.family]);
      assert.equal(cfg.dims, c.dims);
      const f = ropeFrequencies(cfg);
      assert.equal(f.invFreq.length, c.invFreq.length);
      for (let i = 0; i < c.invFreq.length; i++) assert.ok(Math.abs(f.invFreq[i] - c.invFreq[i]) <= 1e-12 * c.invFreq[i], `${c.name}: frequency ${i}: ${f.invFreq[i]} against ${c.invFreq[i]}`);
      assert.ok(Math.abs(f.attentionFactor - c.attentionFactor) < 1e-12, `${c.name}: attention factor ${f.attentionFactor} against ${c.attentionFactor}`);
    });

  it("gpt-oss's YaRN: truncate false keeps fractional bounds, which truncating changes", () => {
    const raw = golden.cases.find((c) => c.name === 'gpt-oss')!.config as { rope_scaling: Record<string, unknown> };
    const exact = ropeFrequencies(parseRope(Fields.root('c', raw), 64, DEFAULTS.gpt_oss)).invFreq;
    const rounded = ropeFrequencies(parseRope(Fields.root('c', { ...raw, rope_scaling: { ...raw.rope_scaling, truncate: true } }), 64, DEFAULTS.gpt_oss)).invFreq;
    assert.ok(exact.some((x, i) => x !== rounded[i]), 'truncating the correction range changes some frequency');
  });

  it('rotates pairs as complex numbers, in halves or interleaved, and leaves the rest', () => {
    const headDim = 10;
    for (const pairs of ['half', 'interleaved'] as const) {
      const rope = new Rope({ dims: 6, theta: 500, pairs, scaling: { type: 'default' } });
      const x = Float32Array.from({ length: 2 * headDim }, (_, i) => Math.sin(i + 1));
      const y = x.slice();
      const pos = 37;
      rope.apply(y, 0, 2, headDim, pos);
      for (let h = 0; h < 2; h++)
        for (let i = 0; i < 3; i++) {
          const a = h * headDim + (pairs === 'half' ? i : 2 * i);
          const b = pairs === 'half' ? a + 3 : a + 1;
          const ang = pos / Math.pow(500, (2 * i) / 6);
          const re = x[a] * Math.cos(ang) - x[b] * Math.sin(ang);
          const im = x[b] * Math.cos(ang) + x[a] * Math.sin(ang);
          assert.ok(Math.abs(y[a] - re) < 1e-6 && Math.abs(y[b] - im) < 1e-6, `${pairs}: head ${h} pair ${i}`);
        }
      for (let h = 0; h < 2; h++) for (let d = 6; d < headDim; d++) assert.equal(y[h * headDim + d], x[h * headDim + d], `${pairs}: dimension ${d} past the rotated ones stays`);
      const z = x.slice();
      rope.apply(z, 0, 2, headDim, 0);
      assert.deepEqual(z, x, 'position 0 rotates nothing');
    }
  });

  it('refuses a rope type it does not compute, and odd rotary sizes, by name', () => {
    assert.throws(() => parseRope(Fields.root('config.json', { rope_scaling: { rope_type: 'longrope', factor: 4 } }), 64, { theta: 1e4 }), /config\.json: rope type "longrope"/);
    assert.throws(() => parseRope(Fields.root('config.json', { partial_rotary_factor: 0.3 }), 10, { theta: 1e4 }), /rotary dimensions .* must be even/);
  });
});
