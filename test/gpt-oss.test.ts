/**
 * gpt-oss's own pieces beyond the goldens and the family tests: its config is bounded and checked
 * key by key, and a checkpoint's stacked experts (MXFP4 or bf16) are read as per-expert slices,
 * with a malformed stack refused by name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SafetensorsSet } from '../src/checkpoint/safetensors.js';
import { CheckpointWeights } from '../src/checkpoint/weights.js';
import { type RawTensor, writeSafetensors } from '../src/checkpoint/write.js';
import { encodeMxfp4 } from '../src/checkpoint/mxfp4.js';
import { gptOss } from '../src/model/gpt-oss/index.js';
import { GPT_OSS_STACKED, gptOssExpertLayerOf } from '../src/model/gpt-oss/names.js';
import type { TransformerConfig } from '../src/model/transformer/config.js';
import { WasteError } from '../src/util/errors.js';
import { Fields } from '../src/util/fields.js';
import { tmpDir } from './helpers.js';

const base = () => gptOss.synth!.config('gpt-oss-tiny', {}) as Record<string, unknown>;
const parse = (raw: Record<string, unknown>) => gptOss.parseConfig(Fields.root('config.json', raw)) as TransformerConfig;
const refused = (raw: Record<string, unknown>, what: RegExp) => assert.throws(() => parse(raw), (e: unknown) => e instanceof WasteError && what.test(e.message));

describe('gpt-oss config', () => {
  it("reads the release's details, HF's defaults where a key is absent", () => {
    const c = parse(base());
    assert.deepEqual(c.windows, [4, 0, 4, 0]);
    assert.equal(c.sinks, true);
    assert.equal(c.expertBias, true);
    assert.deepEqual(c.bias, { qkv: true, o: true });
    assert.deepEqual(c.act, { kind: 'clamped', alpha: 1.702, limit: 7 });
    assert.equal(c.router.scoring, 'softmax-topk');
    const bare = base();
    for (const k of ['layer_types', 'rope_scaling', 'rope_theta', 'sliding_window', 'swiglu_limit', 'attention_bias', 'head_dim', 'rms_norm_eps']) delete bare[k];
    const d = parse(bare);
    assert.deepEqual(d.windows, [128, 0, 128, 0]);
    assert.equal(d.attention.headDim, 64);
    assert.equal(d.eps, 1e-5);
    assert.deepEqual(d.rope.scaling, { type: 'yarn', factor: 32, originalMax: 4096, betaFast: 32, betaSlow: 1, truncate: false, attentionFactor: 0.1 * Math.log(32) + 1 });
    assert.equal(d.rope.theta, 150000);
  });

  it('refuses what it does not compute, and bounds every key', () => {
    refused({ ...base(), layer_types: ['sliding_attention'] }, /layer_types must list one type per layer \(4\), not 1/);
    refused({ ...base(), layer_types: ['sliding_attention', 'full_attention', 'chunked_attention', 'full_attention'] }, /layer_types\[2\]/);
    refused({ ...base(), hidden_act: 'gelu' }, /hidden_act/);
    refused({ ...base(), num_local_experts: undefined }, /num_local_experts is required/);
    refused({ ...base(), num_experts_per_tok: 9 }, /num_experts_per_tok/);
    refused({ ...base(), swiglu_limit: -1 }, /swiglu_limit/);
    refused({ ...base(), sliding_window: 0 }, /sliding_window/);
    refused({ ...base(), num_key_value_heads: 3 }, /multiple of num_key_value_heads/);
  });

  it('names the layer of an expert slice and of the stacked tensors, not of their biases', () => {
    assert.equal(gptOssExpertLayerOf('model.layers.7.mlp.experts.3.up_proj.weight'), 7);
    assert.equal(gptOssExpertLayerOf('model.layers.7.mlp.experts.gate_up_proj_blocks'), 7);
    assert.equal(gptOssExpertLayerOf('model.layers.7.mlp.experts.down_proj_scales'), 7);
    assert.equal(gptOssExpertLayerOf('model.layers.7.mlp.experts.down_proj'), 7);
    assert.equal(gptOssExpertLayerOf('model.layers.7.mlp.experts.gate_up_proj_bias'), undefined);
    assert.equal(gptOssExpertLayerOf('model.layers.7.mlp.router.weight'), undefined);
  });
});

describe('stacked experts in a checkpoint', () => {
  const E = 3;
  const I = 2;
  const H = 32;
  // expert e's fused row r, column c: a value that says where it came from (exact in MXFP4: 0, ±0.5…±6)
  const at = (e: number, r: number, c: number) => [0, 0.5, 1, 1.5, 2, 3, 4, 6][(e * 5 + r * 3 + c) % 8] * (c % 2 ? -1 : 1) + 0;

  function write(tensors: RawTensor[]): CheckpointWeights {
    const dir = tmpDir('stacked');
    writeSafetensors(dir, tensors, 1);
    return new CheckpointWeights(SafetensorsSet.open(dir), '', GPT_OSS_STACKED);
  }
  const fused = () => Float32Array.from({ length: E * 2 * I * H }, (_, i) => at(Math.floor(i / (2 * I * H)), Math.floor(i / H) % (2 * I), i % H));

  it("reads MXFP4 blocks and scales as each expert's gate (even rows) and up (odd rows)", () => {
    const { packed, scales } = encodeMxfp4(fused(), E * 2 * I, H);
    const w = write([
      { name: 'model.layers.0.mlp.experts.gate_up_proj_blocks', dtype: 'U8', shape: [E, 2 * I, H / 32, 16], data: packed },
      { name: 'model.layers.0.mlp.experts.gate_up_proj_scales', dtype: 'U8', shape: [E, 2 * I, H / 32], data: scales },
      { name: 'model.layers.0.mlp.experts.gate_up_proj_bias', dtype: 'F32', shape: [E, 2 * I], data: new Uint8Array(4 * E * 2 * I) },
    ]);
    assert.ok(!w.has('model.layers.0.mlp.experts.gate_up_proj_blocks'));
    assert.ok(w.has('model.layers.0.mlp.experts.gate_up_proj_bias'));
    for (let e = 0; e < E; e++)
      for (const kind of [0, 1] as const) {
        const name = `model.layers.0.mlp.experts.${e}.${kind ? 'up' : 'gate'}_proj.weight`;
        assert.deepEqual(w.info(name).shape, [I, H]);
        const got = w.readF32(name);
        for (let i = 0; i < I; i++) for (let c = 0; c < H; c++) assert.equal(got[i * H + c], at(e, 2 * i + kind, c), `${name} [${i}, ${c}]`);
      }
  });

  it('reads the bf16 form [E, in, out] transposed, the same matrices', () => {
    const x = fused();
    const t = new Uint16Array(E * H * 2 * I);
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    for (let e = 0; e < E; e++)
      for (let r = 0; r < 2 * I; r++)
        for (let c = 0; c < H; c++) {
          f[0] = x[(e * 2 * I + r) * H + c];
          t[(e * H + c) * 2 * I + r] = u[0] >>> 16;
        }
    const w = write([{ name: 'model.layers.0.mlp.experts.gate_up_proj', dtype: 'BF16', shape: [E, H, 2 * I], data: new Uint8Array(t.buffer) }]);
    const up = w.readF32('model.layers.0.mlp.experts.2.up_proj.weight');
    for (let i = 0; i < I; i++) for (let c = 0; c < H; c++) assert.equal(up[i * H + c], at(2, 2 * i + 1, c));
  });

  it('refuses blocks without scales, and a stack of the wrong shape', () => {
    const { packed, scales } = encodeMxfp4(fused(), E * 2 * I, H);
    const bad = (tensors: RawTensor[], what: RegExp) => assert.throws(() => write(tensors), (e: unknown) => e instanceof WasteError && what.test(e.message));
    bad([{ name: 'model.layers.0.mlp.experts.gate_up_proj_blocks', dtype: 'U8', shape: [E, 2 * I, H / 32, 16], data: packed }], /but not model\.layers\.0\.mlp\.experts\.gate_up_proj_scales/);
    bad([{ name: 'model.layers.0.mlp.experts.gate_up_proj_scales', dtype: 'U8', shape: [E, 2 * I, H / 32], data: scales }], /but not its _blocks/);
    bad(
      [
        { name: 'model.layers.0.mlp.experts.gate_up_proj_blocks', dtype: 'U8', shape: [E, 2 * I, H / 32, 16], data: packed },
        { name: 'model.layers.0.mlp.experts.gate_up_proj_scales', dtype: 'U8', shape: [E, 2 * I * (H / 32)], data: scales },
      ],
      /not stacked MXFP4 experts/,
    );
    bad([{ name: 'model.layers.0.mlp.experts.down_proj', dtype: 'F32', shape: [E, 4], data: new Uint8Array(4 * E * 4) }], /not a stack of experts' matrices/);
  });
});
