/**
 * Qwen3-Next's and Qwen3.5 MoE's config (bounded, refusals by name), and what this build says it
 * does not read: Qwen3.5's own checkpoint layout and its images. Its forward pass is checked
 * against the float64 reference by the goldens (qwen3-next-checkpoint, qwen3-next-awkward,
 * qwen3.5-moe-checkpoint) and by test/families.test.ts on both tiny shapes.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { parseQwen3NextConfig } from '../src/model/qwen3-next/config.js';
import { qwen3Next } from '../src/model/qwen3-next/index.js';
import type { WeightSource } from '../src/model/sources/source.js';
import { Fields, type JsonObject } from '../src/util/fields.js';
import { checkpoint, synth, tmpDir } from './helpers.js';
import { convert } from '../src/convert/convert.js';
import { SafetensorsSet } from '../src/checkpoint/safetensors.js';
import { CheckpointWeights } from '../src/checkpoint/weights.js';

const flat = (): JsonObject => qwen3Next.synth!.config('qwen3.5-moe-tiny', {});
const next = (): JsonObject => qwen3Next.synth!.config('qwen3-next-tiny', {});
const without = (o: JsonObject, key: string): JsonObject => Object.fromEntries(Object.entries(o).filter(([k]) => k !== key));
const parse = (o: JsonObject) => parseQwen3NextConfig(Fields.root('config.json', o));

describe('qwen3-next config', () => {
  it("reads Qwen3.5's nested config (text_config beside a vision_config) as its text-only form", () => {
    const { model_type: _, architectures, ...text } = flat();
    const nested = { model_type: 'qwen3_5_moe', architectures, tie_word_embeddings: false, text_config: { ...text, model_type: 'qwen3_5_moe_text' }, vision_config: { depth: 2, hidden_size: 32 } };
    const a = parse(nested);
    const b = parse(flat());
    assert.deepEqual({ ...a, archName: '', unrunTower: false }, { ...b, archName: '', unrunTower: false });
    assert.equal(a.family, 'qwen3_5_moe');
    assert.equal(a.gdn.packing, 'split');
    assert.ok(a.layerKinds.every((k) => k.ffn === 'moe'));
    assert.ok(a.unrunTower && !b.unrunTower && parse({ ...flat(), _outer: { vision_config: {} } }).unrunTower && !parse(next()).unrunTower);
  });

  it('lays out the layers by full_attention_interval, or by layer_types (legacy names too)', () => {
    assert.deepEqual(parse(next()).layerKinds.map((k) => k.attn), ['gdn', 'gdn', 'gdn', 'attention']);
    const c = parse({ ...next(), layer_types: ['attention', 'mamba', 'full_attention', 'linear_attention'] });
    assert.deepEqual(c.layerKinds.map((k) => k.attn), ['attention', 'gdn', 'attention', 'gdn']);
    assert.equal(parse(next()).rope.dims, 4);
  });

  it('refuses what it does not compute, by name', () => {
    const bad: [JsonObject, RegExp][] = [
      [{ ...next(), linear_value_head_dim: 16 }, /linear_key_head_dim 8 ≠ linear_value_head_dim 16/],
      [{ ...next(), linear_num_value_heads: 5 }, /multiple of linear_num_key_heads/],
      [{ ...next(), layer_types: ['linear_attention', 'sliding_attention', 'full_attention', 'full_attention'] }, /layer_types/],
      [{ ...next(), layer_types: ['linear_attention'] }, /layer_types/],
      [without(next(), 'norm_topk_prob'), /norm_topk_prob/],
      [{ ...flat(), norm_topk_prob: false }, /always renormalises/],
      [{ ...next(), hidden_act: 'gelu' }, /hidden_act/],
      [{ ...flat(), attn_output_gate: false }, /attn_output_gate/],
      [without(next(), 'rope_theta'), /rope_theta/],
      [{ model_type: 'qwen3_5_moe', vision_config: {} }, /text_config/],
      [{ ...next(), num_experts_per_tok: 99 }, /num_experts_per_tok/],
    ];
    for (const [cfg, re] of bad) assert.throws(() => parse(JSON.parse(JSON.stringify(cfg))), re, JSON.stringify(re));
  });

  it("refuses stacked experts outside Qwen3.5's release layout, by name", () => {
    const cfg = parse(flat());
    const src = (names: string[]) => ({ label: 'ckpt', has: (n: string) => names.includes(n) }) as unknown as WeightSource;
    assert.throws(() => qwen3Next.planWeights(src(['model.embed_tokens.weight', 'model.layers.0.mlp.experts.gate_up_proj']), cfg, undefined), /stacked experts/);
  });

  it("reads Qwen3.5's release layout: model.language_model. as model., stacked experts one per matrix, the tower and MTP unlisted", () => {
    const dir = checkpoint({ shape: 'qwen3.5-moe-tiny', seed: 3 }, 'q35-release');
    const st = SafetensorsSet.open(dir);
    try {
      assert.ok(st.names().includes('model.language_model.layers.0.mlp.experts.gate_up_proj'));
      const w = new CheckpointWeights(st, CheckpointWeights.prefixOf(st));
      assert.equal(w.prefix, '');
      const names = w.names();
      assert.ok(names.includes('model.embed_tokens.weight') && names.includes('lm_head.weight'));
      assert.ok(!names.some((n) => n.startsWith('mtp.') || n.includes('visual') || n.includes('language_model') || n.endsWith('gate_up_proj')));
      assert.deepEqual(w.info('model.layers.1.mlp.experts.7.up_proj.weight').shape, [32, 64]);
      assert.deepEqual(w.info('model.layers.1.mlp.experts.7.down_proj.weight').shape, [64, 32]);
      // expert 7's up rows are rows 32..63 of its [64, 64] slab of gate_up_proj
      const a = new Float32Array(64);
      const b = new Float32Array(64);
      w.readRows('model.layers.1.mlp.experts.7.up_proj.weight', 3, 1, a);
      st.readRows('model.language_model.layers.1.mlp.experts.gate_up_proj', 7 * 64 + 32 + 3, 1, b);
      assert.deepEqual(a, b);
    } finally {
      st.close();
    }
  });

  it('a conversion of the release writes no vision settings: nothing runs its tower', async () => {
    const dir = checkpoint({ shape: 'qwen3.5-moe-tiny', seed: 3 }, 'q35-convert');
    assert.ok(JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')).vision_config, 'the release form carries a vision_config');
    const out = path.join(tmpDir('q35-out'), 'm');
    await convert(dir, out, { threads: 1 });
    assert.ok(!fs.existsSync(path.join(out, 'vision.json')) && !fs.existsSync(path.join(out, 'preprocessor_config.json')));
  });

  it("refuses images, saying the tower is not run", async () => {
    const m = await Model.open(synth({ shape: 'qwen3.5-moe-tiny', seed: 2 }, 'q35'), {});
    try {
      await assert.rejects(m.encodeImage(new Uint8Array(16)), /language model only/);
    } finally {
      await m.close();
    }
  });
});
