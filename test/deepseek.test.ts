/**
 * DeepSeek-V3's config (src/model/deepseek/config.ts) refuses what it does not compute, by name;
 * FP8 E4M3 (src/checkpoint/fp8.ts) decodes every code exactly; a checkpoint's MTP layer is left
 * out of a conversion. The forward pass is checked against the float64 reference by the goldens
 * (test/fixtures.ts) and by test/families.test.ts.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { E4M3, decodeFp8, encodeE4M3, encodeFp8 } from '../src/checkpoint/fp8.js';
import { decodeInt4, encodeInt4 } from '../src/checkpoint/int4.js';
import { measureQuality } from '../src/quality/quality.js';
import { GOLDEN_CASES } from './fixtures.js';
import { convert } from '../src/convert/convert.js';
import { parseDeepseekConfig } from '../src/model/deepseek/config.js';
import { parseModelConfig } from '../src/model/registry.js';
import { synthConfig } from '../src/synth/synth.js';
import { Fields, type JsonObject } from '../src/util/fields.js';
import { checkpoint, tmpDir } from './helpers.js';

const base = () => synthConfig({ shape: 'deepseek-v3-tiny' });
const parse = (over: JsonObject) => parseDeepseekConfig(Fields.root('config.json', { ...base(), ...over }));
const refused = (over: JsonObject, re: RegExp) => assert.throws(() => parse(over), (e: Error) => re.test(e.message));

describe('DeepSeek-V3 config', () => {
  it('DeepSeek-V3.2 is refused by name (model_type, or the indexer keys)', () => {
    assert.throws(() => parseModelConfig(Fields.root('config.json', { ...base(), model_type: 'deepseek_v32' })), /DeepSeek-V3\.2.*lightning indexer/);
    refused({ index_topk: 2048 }, /DeepSeek-V3\.2.*index_topk/);
  });

  it('q_lora_rank is required (null: one q_proj); absent would be HF 1536', () => {
    const c = { ...base() };
    delete c.q_lora_rank;
    assert.throws(() => parseDeepseekConfig(Fields.root('config.json', c)), /q_lora_rank is required/);
    assert.equal(parse({ q_lora_rank: null }).mla.qLoraRank, 0);
  });

  it('refuses routers, biases and quantizations it does not compute', () => {
    refused({ scoring_func: 'softmax' }, /scoring_func "softmax"/);
    refused({ topk_method: 'greedy' }, /topk_method "greedy"/);
    refused({ moe_layer_freq: 2 }, /moe_layer_freq/);
    refused({ quantization_config: { quant_method: 'compressed-tensors', format: 'float-quantized' } }, /float-quantized/);
    const int4 = (weights: JsonObject) => ({ quant_method: 'compressed-tensors', format: 'pack-quantized', config_groups: { group_0: { weights } } });
    refused({ quantization_config: int4({ num_bits: 4, type: 'int', symmetric: false, strategy: 'group', group_size: 32 }) }, /symmetric INT4/);
    refused({ quantization_config: int4({ num_bits: 8, type: 'int', symmetric: true, strategy: 'group', group_size: 32 }) }, /symmetric INT4/);
    parse({ quantization_config: int4({ num_bits: 4, type: 'int', symmetric: true, strategy: 'group', group_size: 32 }) });
    refused({ quantization_config: { quant_method: 'awq' } }, /awq/);
    refused({ quantization_config: { quant_method: 'fp8', weight_block_size: [64, 64] } }, /weight_block_size/);
    refused({ n_group: 3 }, /n_group/);
    refused({ n_group: 16 }, /groups of at least 2/);
    const noKeep: JsonObject = { ...base(), n_group: 2 };
    delete noKeep.topk_group;
    assert.throws(() => parseDeepseekConfig(Fields.root('config.json', noKeep)), /topk_group must be at most n_group/);
    refused({ num_experts_per_tok: 9 }, /num_experts_per_tok/);
    refused({ num_key_value_heads: 2 }, /num_key_value_heads/);
    refused({ qk_rope_head_dim: 7 }, /qk_rope_head_dim/);
    refused({ max_position_embeddings: 131072 }, /YaRN factor 40 is not max_position_embeddings/);
  });

  it('the softmax scale is (nope + rope)^-1/2 times mscale² under YaRN with mscale_all_dim', () => {
    const c = parse({});
    const m = 0.1 * Math.log(40) + 1;
    assert.ok(Math.abs(c.scale / ((1 / Math.sqrt(24)) * m * m) - 1) < 1e-15);
    assert.equal(parse({ rope_scaling: null }).scale, 1 / Math.sqrt(24));
    const y = parse({}).rope.scaling;
    assert.ok(y.type === 'yarn' && y.betaFast === 32 && y.betaSlow === 1 && y.attentionFactor === 1);
    const k2 = parseModelConfig(Fields.root('config.json', synthConfig({ shape: 'kimi-k2-tiny' }))) as ReturnType<typeof parseDeepseekConfig>;
    assert.ok(k2.rope.scaling.type === 'yarn' && k2.rope.scaling.betaFast === 1 && k2.rope.scaling.betaSlow === 1);
    assert.equal(k2.rope.pairs, 'interleaved');
  });
});

describe('FP8 E4M3 with 128 × 128 block scales', () => {
  it('every code decodes to its value; 0x7F and 0xFF are not numbers; encoding finds the nearest', () => {
    assert.equal(E4M3[0x7e], 448);
    assert.equal(E4M3[0x01], 2 ** -9);
    assert.equal(E4M3[0x38], 1);
    assert.ok(Number.isNaN(E4M3[0x7f]) && Number.isNaN(E4M3[0xff]));
    for (let b = 0; b < 256; b++) if (b !== 0x7f && b !== 0xff && b !== 0x80) assert.equal(encodeE4M3(E4M3[b]), b);
    assert.throws(() => decodeFp8(new Uint8Array([0x7f]), new Float32Array([1]), 0, 1, 1, new Float32Array(1), 'w'), /not-a-number/);
  });

  it('a matrix of partial blocks round-trips through its scales within E4M3 precision', () => {
    const R = 200;
    const C = 130;
    const v = Float32Array.from({ length: R * C }, (_, i) => Math.sin(i * 0.37) * (1 + (i % 7)));
    const { bytes, scales } = encodeFp8(v, R, C);
    assert.equal(scales.length, 4);
    const out = new Float32Array(70 * C);
    decodeFp8(bytes.subarray(120 * C, 190 * C), scales.subarray(0), 120, 70, C, out, 'w');
    for (let i = 0; i < out.length; i++) assert.ok(Math.abs(out[i] - v[120 * C + i]) <= Math.abs(v[120 * C + i]) / 16 + 1e-6 * 448, `value ${i}`);
  });
});

describe('INT4 pack-quantized (compressed-tensors)', () => {
  it('eight values a word from bit 0, stored as q + 8, times the scale of their group of 32', () => {
    const packed = new Uint8Array(4 * 8);
    const dv = new DataView(packed.buffer);
    // row of 64: column j holds (j mod 16) − 8
    for (let j = 0; j < 64; j++) dv.setUint32(4 * (j >> 3), (dv.getUint32(4 * (j >> 3), true) | ((j % 16) << (4 * (j & 7)))) >>> 0, true);
    const out = new Float32Array(64);
    decodeInt4(packed, new Float32Array([0.5, 2]), 1, 64, 32, out);
    for (let j = 0; j < 64; j++) assert.equal(out[j], ((j % 16) - 8) * (j < 32 ? 0.5 : 2));
    const v = Float32Array.from({ length: 3 * 64 }, (_, i) => Math.cos(i));
    const e = encodeInt4(v, 3, 64, 32);
    const back = new Float32Array(v.length);
    decodeInt4(e.packed, e.scales, 3, 64, 32, back);
    for (let i = 0; i < v.length; i++) assert.ok(Math.abs(back[i] - v[i]) <= e.scales[Math.floor(i / 32)] / 2 + 1e-7, `value ${i}`);
  });

  it("K2-Thinking's form converts: its f32 reference and its container agree to the quantization's error", async () => {
    const c = GOLDEN_CASES.find((g) => g.name === 'kimi-k2-thinking-checkpoint')!;
    const ck = checkpoint({ ...c.checkpoint!, seed: 13 }, 'k2t');
    const out = path.join(tmpDir('k2t-conv'), 'model');
    await convert(ck, out, { threads: 1 });
    const ids = Array.from({ length: 120 }, (_, i) => (i * 7919 + 13) % 256);
    const q = await measureQuality(ck, out, ids, { ctx: 64 });
    assert.ok(q.kl.mean < 0.05, `mean KL ${q.kl.mean}`);
  });
});

describe('DeepSeek-V3 checkpoints', () => {
  it('the MTP layer is never read: a conversion leaves its tensors out', async () => {
    const ck = checkpoint({ shape: 'deepseek-v3-tiny', seed: 3 }, 'ds-mtp');
    const idx = JSON.parse(fs.readFileSync(path.join(ck, 'model.safetensors'), 'latin1').slice(8, 8 + 200000).split('}}')[0] + '}}');
    assert.ok(Object.keys(idx).some((n) => n.startsWith('model.layers.3.')), 'the checkpoint has an MTP layer');
    const out = path.join(tmpDir('ds-mtp-conv'), 'model');
    await convert(ck, out, { threads: 1 });
    const manifest = fs.readFileSync(path.join(out, 'manifest.json'), 'utf8');
    assert.ok(!manifest.includes('model.layers.3.'), 'no MTP tensor in the container');
  });
});
