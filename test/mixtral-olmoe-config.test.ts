/**
 * Mixtral's and OLMoE's config parsers: the releases' config.json read as HF reads them, and
 * untrusted keys refused with one clear error naming the key.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseModelConfig } from '../src/model/registry.js';
import type { TransformerConfig } from '../src/model/transformer/config.js';
import { WasteError } from '../src/util/errors.js';
import { Fields } from '../src/util/fields.js';

type Json = Record<string, any>;

/** mistralai/Mixtral-8x7B-Instruct-v0.1's config.json (its architectural keys). */
const MIXTRAL_8X7B: Json = {
  architectures: ['MixtralForCausalLM'],
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: 'silu',
  hidden_size: 4096,
  intermediate_size: 14336,
  max_position_embeddings: 32768,
  model_type: 'mixtral',
  num_attention_heads: 32,
  num_experts_per_tok: 2,
  num_hidden_layers: 32,
  num_key_value_heads: 8,
  num_local_experts: 8,
  rms_norm_eps: 1e-5,
  rope_theta: 1e6,
  router_aux_loss_coef: 0.02,
  sliding_window: null,
  tie_word_embeddings: false,
  vocab_size: 32000,
};

/** allenai/OLMoE-1B-7B-0125-Instruct's config.json (its architectural keys). */
const OLMOE_0125: Json = {
  architectures: ['OlmoeForCausalLM'],
  attention_bias: false,
  clip_qkv: null,
  eos_token_id: 50279,
  hidden_act: 'silu',
  hidden_size: 2048,
  intermediate_size: 1024,
  max_position_embeddings: 4096,
  model_type: 'olmoe',
  norm_topk_prob: false,
  num_attention_heads: 16,
  num_experts: 64,
  num_experts_per_tok: 8,
  num_hidden_layers: 16,
  num_key_value_heads: 16,
  pad_token_id: 1,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  tie_word_embeddings: false,
  vocab_size: 50304,
};

const parse = (cfg: Json) => parseModelConfig(Fields.root('config.json', cfg)) as TransformerConfig;

function refused(cfg: Json, pattern: RegExp): void {
  assert.throws(() => parse(cfg), (e: unknown) => e instanceof WasteError && pattern.test(e.message), `expected ${pattern}`);
}

describe('Mixtral config', () => {
  it('the 8x7B release: GQA 4:1, top 2 of 8 always renormalised, θ 1e6, no window, no norms or biases', () => {
    const c = parse(MIXTRAL_8X7B);
    assert.equal(c.arch, 'mixtral');
    assert.deepEqual([c.attention.heads, c.attention.kvHeads, c.attention.headDim, c.attention.qkNorm, c.attention.clip], [32, 8, 128, 'none', 0]);
    assert.deepEqual(c.router, { scoring: 'softmax', topK: 2, renormalize: true, scale: 1 });
    assert.equal(c.moe.inter, 14336);
    assert.ok(c.windows.every((w) => w === 0));
    assert.deepEqual(c.bias, { qkv: false, o: false });
    assert.equal(c.eps, 1e-5);
    assert.equal(c.bosTokenId, 1);
  });

  it("HF's defaults where keys are absent (θ 1e6, 8 experts, top 2), a window when one is given", () => {
    const { rope_theta, num_local_experts, num_experts_per_tok, ...rest } = MIXTRAL_8X7B;
    const c = parse({ ...rest, sliding_window: 4096 });
    assert.equal(c.moe.experts, 8);
    assert.equal(c.router.topK, 2);
    assert.ok(c.windows.every((w) => w === 4096));
    assert.deepEqual(c.rope, parse(MIXTRAL_8X7B).rope);
  });

  it('refuses what it cannot run, naming the key', () => {
    refused({ ...MIXTRAL_8X7B, hidden_act: 'gelu' }, /hidden_act/);
    refused({ ...MIXTRAL_8X7B, num_key_value_heads: 7 }, /num_key_value_heads/);
    refused({ ...MIXTRAL_8X7B, num_experts_per_tok: 9 }, /num_experts_per_tok/);
    refused({ ...MIXTRAL_8X7B, sliding_window: 0 }, /sliding_window/);
    refused({ ...MIXTRAL_8X7B, hidden_size: 4097 }, /hidden_size/);
    refused({ ...MIXTRAL_8X7B, rope_theta: 'big' }, /rope_theta/);
  });
});

describe('OLMoE config', () => {
  it('the 0125 release: MHA, q/k norm over the whole projection, no clip, top 8 of 64 not renormalised', () => {
    const c = parse(OLMOE_0125);
    assert.equal(c.arch, 'olmoe');
    assert.deepEqual([c.attention.heads, c.attention.kvHeads, c.attention.headDim, c.attention.qkNorm, c.attention.clip], [16, 16, 128, 'whole', 0]);
    assert.deepEqual(c.router, { scoring: 'softmax', topK: 8, renormalize: false, scale: 1 });
    assert.equal(c.moe.inter, 1024);
    assert.ok(c.windows.every((w) => w === 0));
    assert.equal(c.bosTokenId, undefined);
    assert.deepEqual(c.eosTokenIds, [50279]);
  });

  it('clip_qkv, biases and norm_topk_prob when set', () => {
    const c = parse({ ...OLMOE_0125, clip_qkv: 8, attention_bias: true, norm_topk_prob: true });
    assert.equal(c.attention.clip, 8);
    assert.deepEqual(c.bias, { qkv: true, o: true });
    assert.equal(c.router.renormalize, true);
  });

  it('refuses what it cannot run, naming the key', () => {
    refused({ ...OLMOE_0125, clip_qkv: 0 }, /clip_qkv/);
    refused({ ...OLMOE_0125, clip_qkv: -1 }, /clip_qkv/);
    refused({ ...OLMOE_0125, head_dim: 64 }, /head_dim/);
    refused({ ...OLMOE_0125, hidden_size: 2047 }, /hidden_size/);
    refused({ ...OLMOE_0125, num_experts: 0 }, /num_experts/);
    refused({ ...OLMOE_0125, norm_topk_prob: 'yes' }, /norm_topk_prob/);
    refused({ ...OLMOE_0125, hidden_act: 'relu' }, /hidden_act/);
  });
});
