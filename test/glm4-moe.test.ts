/**
 * GLM-4.5's own details the shared family tests do not reach: the MTP layers a checkpoint holds
 * past num_hidden_layers are neither converted nor copied, and its config is refused with one
 * clear error where the groups cannot hold the top k or a key the releases disagree on is missing.
 * A pull streams the same container as a conversion of the whole download, its MTP layer's shard
 * deleted like the others.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SafetensorsSet } from '../src/checkpoint/safetensors.js';
import { convert } from '../src/convert/convert.js';
import { glm4MoeSynth } from '../src/model/glm4-moe/synth.js';
import { parseModelConfig } from '../src/model/registry.js';
import { WasteError } from '../src/util/errors.js';
import { Fields } from '../src/util/fields.js';
import { pull } from '../src/pull/pull.js';
import { checkpoint, tmpDir } from './helpers.js';
import { HubServer } from './hub-server.js';

describe('GLM-4.5 (glm4_moe)', () => {
  it('a checkpoint\'s MTP layer (model.layers.{num_hidden_layers}) is neither converted nor copied into the trunk', async () => {
    const ck = checkpoint({ shape: 'glm4-moe-tiny', seed: 5 }, 'glm4-mtp');
    const st = SafetensorsSet.open(ck);
    const mtp = st.names().filter((n) => n.startsWith('model.layers.4.'));
    st.close();
    assert.ok(mtp.some((n) => n.endsWith('eh_proj.weight')) && mtp.some((n) => n.includes('.mlp.experts.')), 'the synthetic checkpoint has an MTP layer');
    const out = path.join(tmpDir('glm4-conv'), 'model');
    await convert(ck, out, { threads: 1 });
    const manifest = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8'));
    const trunk: string[] = manifest.trunk.map((t: { name: string }) => t.name);
    assert.ok(trunk.some((n) => n.startsWith('model.layers.3.')));
    assert.deepEqual(trunk.filter((n) => /layers\.4\./.test(n)), []);
    assert.deepEqual(Object.keys(manifest.layers).sort(), ['1', '2', '3']);
  });

  const base = () => glm4MoeSynth.config('glm4-moe-tiny', {});
  const refused = (edit: (c: Record<string, unknown>) => void, pattern: RegExp) => {
    const c = base() as Record<string, unknown>;
    edit(c);
    assert.throws(() => parseModelConfig(Fields.root('config.json', c as never)), (e: unknown) => e instanceof WasteError && pattern.test(e.message));
  };

  it('refuses groups that do not divide the experts, or kept groups too few for the top k', () => {
    refused((c) => (c.n_group = 3), /n_group \(3\)/);
    refused((c) => ((c.topk_group = 1), (c.num_experts_per_tok = 3)), /topk_group \(1\)/);
    refused((c) => (c.topk_group = 5), /topk_group/);
  });

  it('requires by name the keys whose HF default is not every release\'s', () => {
    for (const key of ['rope_theta', 'attention_bias', 'use_qk_norm', 'routed_scaling_factor', 'first_k_dense_replace', 'head_dim', 'num_key_value_heads'])
      refused((c) => delete c[key], new RegExp(key));
  });

  it('parses GLM-4.5-Air\'s config as released (as transformers 4.54 prints it): no q/k norm, scale 1, one dense layer, one MTP layer; the glm-4.5-air shape is that model', () => {
    const air = {
      architectures: ['Glm4MoeForCausalLM'],
      attention_bias: true,
      attention_dropout: 0.0,
      eos_token_id: [151329, 151336, 151338],
      first_k_dense_replace: 1,
      head_dim: 128,
      hidden_act: 'silu',
      hidden_size: 4096,
      initializer_range: 0.02,
      intermediate_size: 10944,
      max_position_embeddings: 131072,
      model_type: 'glm4_moe',
      moe_intermediate_size: 1408,
      n_group: 1,
      n_routed_experts: 128,
      n_shared_experts: 1,
      norm_topk_prob: true,
      num_attention_heads: 96,
      num_experts_per_tok: 8,
      num_hidden_layers: 46,
      num_key_value_heads: 8,
      num_nextn_predict_layers: 1,
      pad_token_id: 151329,
      partial_rotary_factor: 0.5,
      rms_norm_eps: 1e-5,
      rope_scaling: null,
      rope_theta: 1000000,
      routed_scaling_factor: 1.0,
      tie_word_embeddings: false,
      topk_group: 1,
      torch_dtype: 'bfloat16',
      transformers_version: '4.54.1',
      use_cache: true,
      use_qk_norm: false,
      vocab_size: 151552,
    };
    const cfg = parseModelConfig(Fields.root('config.json', air as never)) as ReturnType<typeof parseModelConfig> & Record<string, any>;
    assert.equal(cfg.arch, 'glm4-moe');
    assert.deepEqual(cfg.eosTokenIds, [151329, 151336, 151338]);
    assert.equal(cfg.attention.qkNorm, 'none');
    assert.equal(cfg.rope.dims, 64);
    assert.equal(cfg.router.scale, 1);
    assert.equal(cfg.layerKinds.filter((k: { ffn: string }) => k.ffn === 'dense').length, 1);
    assert.equal(cfg.skippedLayers, 1);
    const synth = parseModelConfig(Fields.root('synth', glm4MoeSynth.config('glm-4.5-air', {}) as never)) as Record<string, any>;
    for (const k of ['layers', 'hidden', 'vocab', 'eps', 'layerKinds', 'moe', 'attention', 'rope', 'denseInter', 'router', 'sharedInter', 'bias', 'skippedLayers', 'eosTokenIds']) assert.deepEqual(synth[k], (cfg as Record<string, any>)[k], k);
  });

  it('reads the release\'s settings: 8 of 16 dims rotated in halves, groups, scale, a shared expert, MTP layers skipped', () => {
    const cfg = parseModelConfig(Fields.root('config.json', base() as never)) as ReturnType<typeof parseModelConfig> & Record<string, any>;
    assert.equal(cfg.rope.dims, 8);
    assert.equal(cfg.rope.pairs, 'half');
    assert.deepEqual(cfg.router, { scoring: 'sigmoid', topK: 2, renormalize: true, scale: 2.5, groups: { count: 4, keep: 2 } });
    assert.equal(cfg.sharedInter, 32);
    assert.deepEqual(cfg.bias, { qkv: true, o: false });
    assert.equal(cfg.skippedLayers, 1);
    assert.deepEqual(cfg.layerKinds.map((k: { ffn: string }) => k.ffn), ['dense', 'moe', 'moe', 'moe']);
  });
});

describe('GLM-4.5: waste pull of a sharded checkpoint with an MTP layer, from a local hub', () => {
  const src = checkpoint({ shape: 'glm4-moe-tiny', seed: 9, shards: 3 }, 'glm4-hub-src');
  const ref = path.join(tmpDir('glm4-ref'), 'model');
  let hub: HubServer;
  before(async () => {
    hub = await new HubServer('test-org/glm-tiny', src).start();
    await convert(src, ref, { threads: 1 });
  });
  after(() => hub.stop());

  it('streams a container byte-identical to waste convert on the full download, copies no MTP tensor aside, deletes every shard', async () => {
    const home = tmpDir('glm4-home');
    const old = process.env.WASTE_HOME;
    process.env.WASTE_HOME = home;
    try {
      const r = await pull('test-org/glm-tiny', { threads: 1, stallMs: 2000, retryMs: 10, attempts: 4, hub: { endpoint: hub.url } });
      // the trunk copied aside leaves the MTP layer out: less than every non-expert tensor's bytes (the copies' headers included)
      const st = SafetensorsSet.open(src);
      const trunkAll = st.names().filter((n) => !/\.mlp\.experts\.\d+\./.test(n)).reduce((a, n) => a + st.info(n).bytes, 0);
      const mtp = st.names().filter((n) => n.startsWith('model.layers.4.') && !/\.mlp\.experts\.\d+\./.test(n)).reduce((a, n) => a + st.info(n).bytes, 0);
      st.close();
      assert.ok(r.plan.trunkSourceBytes < trunkAll - mtp / 2, `${r.plan.trunkSourceBytes} bytes copied aside of ${trunkAll}, ${mtp} of them the MTP layer's`);
      const files = (d: string) => fs.readdirSync(d).filter((f) => f !== 'store.json').sort();
      assert.deepEqual(files(r.dir), files(ref));
      for (const f of files(ref)) assert.ok(fs.readFileSync(path.join(r.dir, f)).equals(fs.readFileSync(path.join(ref, f))), `${f} differs`);
      assert.ok(!fs.existsSync(path.join(home, 'downloads', 'glm-tiny')), 'the downloaded shards are gone');
    } finally {
      if (old === undefined) delete process.env.WASTE_HOME;
      else process.env.WASTE_HOME = old;
    }
  });
});
