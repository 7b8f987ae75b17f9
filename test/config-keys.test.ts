/**
 * A config key whose absence would change what runs, and whose default is not every released
 * model's value, is required by name: missing keys used to fall back to Kimi-Linear's defaults
 * without a word (a K3 config without `hidden_act` ran SiLU instead of SiTU, `activation_situ_beta:
 * null` became 1 instead of 4, a removed `num_shared_experts` dropped the shared expert).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { openModelContainer, parseModelConfig } from '../src/model/registry.js';
import { WasteError } from '../src/util/errors.js';
import { Fields } from '../src/util/fields.js';
import { BIN, ROOT, checkpoint, copyContainer, synth } from './helpers.js';

type Json = Record<string, any>;

/** moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json as released (its keys and values; auto_map left out). */
const KIMI_LINEAR_RELEASED: Json = {
  architectures: ['KimiLinearForCausalLM'],
  bos_token_id: 163584,
  dtype: 'bfloat16',
  eos_token_id: 163586,
  first_k_dense_replace: 1,
  head_dim: 72,
  hidden_act: 'silu',
  hidden_size: 2304,
  initializer_range: 0.02,
  intermediate_size: 9216,
  kv_lora_rank: 512,
  linear_attn_config: {
    full_attn_layers: [4, 8, 12, 16, 20, 24, 27],
    head_dim: 128,
    kda_layers: [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
    num_heads: 32,
    short_conv_kernel_size: 4,
  },
  mla_use_nope: true,
  model_max_length: 1048576,
  model_type: 'kimi_linear',
  moe_intermediate_size: 1024,
  moe_layer_freq: 1,
  moe_renormalize: true,
  moe_router_activation_func: 'sigmoid',
  num_attention_heads: 32,
  num_expert_group: 1,
  num_experts: 256,
  num_experts_per_token: 8,
  num_hidden_layers: 27,
  num_key_value_heads: 32,
  num_nextn_predict_layers: 0,
  num_shared_experts: 1,
  pad_token_id: 163839,
  q_lora_rank: null,
  qk_nope_head_dim: 128,
  qk_rope_head_dim: 64,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  rope_theta: 10000.0,
  routed_scaling_factor: 2.446,
  tie_word_embeddings: false,
  topk_group: 1,
  use_cache: true,
  use_grouped_topk: true,
  v_head_dim: 128,
  vocab_size: 163840,
};

const manifestOf = (dir: string): Json => JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'));

/** A copy of `src` whose manifest's config went through `edit`. */
function edited(src: string, edit: (config: Json) => void): string {
  const d = copyContainer(src);
  const m = manifestOf(d);
  edit(m.config);
  fs.writeFileSync(path.join(d, 'manifest.json'), JSON.stringify(m));
  return d;
}

/** `dir` does not open, with one error naming `key` and the file. */
function refused(dir: string, key: string, why: RegExp = /is required/): void {
  assert.throws(
    () => openModelContainer(dir).close(),
    (e: unknown) => {
      assert.ok(e instanceof WasteError, String(e));
      assert.equal(e.code, 'E_FORMAT');
      assert.ok(e.message.startsWith(`manifest.json: config.${key} `), e.message);
      assert.match(e.message, why);
      return true;
    },
  );
}

describe('required config keys', () => {
  const k3 = synth({ shape: 'k3-tiny', seed: 71, tokenizer: true }, 'keys-k3');
  const kl = synth({ shape: 'tiny', seed: 72 }, 'keys-kl');
  const demo = path.join(ROOT, 'models', 'demo');

  it('the three of the report: a K3 config without hidden_act, with a null SiTU β; Kimi-Linear without num_shared_experts', async () => {
    refused(edited(k3, (c) => delete c.hidden_act), 'hidden_act', /is required \("silu" for Kimi-Linear, "situ" for Kimi K3\)/);
    refused(edited(k3, (c) => (c.activation_situ_beta = null)), 'activation_situ_beta');
    refused(edited(demo, (c) => delete c.num_shared_experts), 'num_shared_experts');
    // the library refuses the same way, before anything loads
    await assert.rejects(Model.open(edited(demo, (c) => delete c.num_shared_experts)), /manifest\.json: config\.num_shared_experts is required/);
  });

  it('waste run says so in one line and exits 1', () => {
    const d = edited(k3, (c) => delete c.hidden_act);
    const r = spawnSync(process.execPath, [BIN, 'run', d, '--raw', 'hello', '-n', '2'], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.equal(r.stderr, 'waste: manifest.json: config.hidden_act is required ("silu" for Kimi-Linear, "situ" for Kimi K3)\n');
  });

  it('every key whose absence would change the model, in either family', () => {
    const both = ['num_hidden_layers', 'hidden_size', 'vocab_size', 'rms_norm_eps', 'hidden_act', 'linear_attn_config', 'mla_use_nope', 'num_experts', 'num_shared_experts', 'first_k_dense_replace', 'routed_scaling_factor'];
    for (const key of both) {
      refused(edited(kl, (c) => delete c[key]), key);
      refused(edited(k3, (c) => delete c[key]), key);
    }
    for (const key of ['kda_layers', 'short_conv_kernel_size']) refused(edited(kl, (c) => delete c.linear_attn_config[key]), `linear_attn_config.${key}`);
    refused(edited(k3, (c) => delete c.activation_situ_linear_beta), 'activation_situ_linear_beta');
    // a config that names itself K3 states each K3 feature; absent, Kimi-Linear's form would run
    for (const key of ['attn_res_block_size', 'routed_expert_hidden_size', 'latent_moe_use_norm', 'q_lora_rank', 'mla_use_output_gate'])
      refused(edited(k3, (c) => delete c[key]), key, /is required in a Kimi K3 config/);
    for (const key of ['use_full_rank_gate', 'gate_lower_bound'])
      refused(edited(k3, (c) => delete c.linear_attn_config[key]), `linear_attn_config.${key}`, /is required in a Kimi K3 config/);
  });

  it('what stays defaulted is HuggingFace\'s default and every release\'s value: removing it changes nothing', async () => {
    const ids = [3, 4, 5, 6];
    const logits = async (d: string) => {
      const m = await Model.open(d, { threads: 1 });
      try {
        return await m.newSession().forward(ids);
      } finally {
        await m.close();
      }
    };
    const base = await logits(kl);
    const lean = edited(kl, (c) => {
      for (const key of ['moe_renormalize', 'moe_router_activation_func', 'num_expert_group', 'moe_layer_freq', 'q_lora_rank', 'bos_token_id', 'eos_token_id']) delete c[key];
    });
    assert.deepEqual(await logits(lean), base);
  });

  it('the released Kimi-Linear config, the demo model, synth\'s shapes and a checkpoint still open', () => {
    const cfg = parseModelConfig(Fields.root('config.json', KIMI_LINEAR_RELEASED));
    assert.equal(cfg.arch, 'kimi-linear');
    assert.equal(cfg.moe.shared, 1);
    assert.equal(cfg.moe.routedScale, 2.446);
    for (const d of [demo, kl, k3]) openModelContainer(d).close();
    // a checkpoint's config.json is named as such when a key is missing
    const ck = checkpoint({ shape: 'tiny', seed: 73 }, 'keys-ck');
    const file = path.join(ck, 'config.json');
    const raw = JSON.parse(fs.readFileSync(file, 'utf8'));
    delete raw.routed_scaling_factor;
    fs.writeFileSync(file, JSON.stringify(raw));
    return assert.rejects(Model.open(ck, { threads: 1 }), (e: unknown) => e instanceof WasteError && e.message === 'config.json: routed_scaling_factor is required (a number)');
  });
});
