import * as fs from 'node:fs';
import * as path from 'node:path';
import { encodeMxfp4 } from '../checkpoint/mxfp4.js';
import { type RawTensor, toBf16, writeSafetensors } from '../checkpoint/write.js';
import type { KimiConfig } from '../model/kimi/config.js';
import { parseModelConfig } from '../model/registry.js';
import type { JsonObject } from '../util/fields.js';
import { Fields } from '../util/fields.js';
import { Rng } from '../util/prng.js';
import { type SynthOptions, prepareDir, synthConfig } from './synth.js';
import { kimiTensors } from './tensors.js';
import { rankFileText } from '../tokenizer/ranks.js';
import { k3Specials, synthVocabulary } from './tokenizer.js';

export { KIMI_STYLE_TEMPLATE } from '../tokenizer/kimi-template.js';
import { KIMI_STYLE_TEMPLATE } from '../tokenizer/kimi-template.js';

/**
 * A random checkpoint in HuggingFace format — config.json, bf16 safetensors (one file or sharded
 * with an index) with the real tensor names, tiktoken.model, tokenizer_config.json — the
 * converter's test input. Matrices are bf16 with zero-mean values; A_log, dt_bias, the conv taps,
 * norms and the router bias are f32, as the released checkpoints keep them. The K3 shapes are laid
 * out as K3's release is: the config nested under `text_config` in its wrapper, the language model
 * under `language_model.`, its routed experts packed as MXFP4 (U8 `weight_packed` + E8M0
 * `weight_scale`), a small vision tower and projector beside it with their preprocessing config.
 */
export interface CheckpointOptions extends SynthOptions {
  shards?: number;
  /** K3 only: vision_config keys over the small tower's (e.g. the release's widths, for a benchmark). */
  vision?: JsonObject;
}

export function writeSyntheticCheckpoint(dir: string, opts: CheckpointOptions = {}): KimiConfig {
  const flat = synthConfig(opts);
  const k3 = flat._outer !== undefined;
  // the checkpoint nests what a container flattens
  const { _outer, ...text } = flat;
  const raw: JsonObject = k3 ? { ...(_outer as JsonObject), ...k3Wrapper(text.hidden_size as number, opts.vision), text_config: { ...text, bos_token_id: (_outer as JsonObject).bos_token_id, eos_token_id: (_outer as JsonObject).eos_token_id } } : flat;
  const prefix = k3 ? 'language_model.' : '';
  // every architecture this generator writes is of the Kimi family
  const cfg = parseModelConfig(Fields.root('synthetic config', raw)) as KimiConfig;
  const rng = new Rng(opts.seed ?? 0);
  prepareDir(dir, opts.force ?? false);
  const tensors: RawTensor[] = [];
  // Box-Muller normals, scaled: the shape of real weights rather than uniform noise
  const normal = () => Math.sqrt(-2 * Math.log(1 - rng.float())) * Math.cos(2 * Math.PI * rng.float());
  const values = (n: number, std: number) => {
    const v = new Float32Array(n);
    for (let i = 0; i < v.length; i++) v[i] = normal() * std;
    return v;
  };
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false) => {
    const v = values(rows * cols, std);
    if (k3 && expert) {
      const { packed, scales } = encodeMxfp4(v, rows, cols);
      const base = name.replace(/\.weight$/, '');
      tensors.push({ name: `${base}.weight_packed`, dtype: 'U8', shape: [rows, cols / 2], data: packed });
      tensors.push({ name: `${base}.weight_scale`, dtype: 'U8', shape: [rows, cols / 32], data: scales });
    } else tensors.push({ name, dtype: 'BF16', shape: [rows, cols], data: toBf16(v) });
  };
  const vector = (name: string, shape: number[], lo: number, hi: number, valid = Infinity) => {
    const v = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < Math.min(v.length, valid); i++) v[i] = rng.uniform(lo, hi);
    tensors.push({ name, dtype: 'F32', shape, data: new Uint8Array(v.buffer) });
  };
  for (const t of kimiTensors(cfg)) {
    if (t.kind === 'matrix') matrix(prefix + t.name, t.rows, t.cols, t.std, t.expert);
    else vector(prefix + t.name, t.shape, t.lo, t.hi, t.valid);
  }
  if (k3)
    for (const t of visionTensors(raw.vision_config as JsonObject, cfg.hidden)) {
      const v = values(t.shape.reduce((a, b) => a * b, 1), t.std);
      if (t.mean) for (let i = 0; i < v.length; i++) v[i] += t.mean;
      tensors.push({ name: t.name, dtype: 'BF16', shape: t.shape, data: toBf16(v) });
    }
  writeSafetensors(dir, tensors, opts.shards ?? 1);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(raw, null, 2) + '\n');
  if (k3) {
    fs.writeFileSync(path.join(dir, 'preprocessor_config.json'), JSON.stringify(K3_PREPROCESSOR, null, 2) + '\n');
    // the release's recommended sampling
    fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ temperature: 1.0, top_p: 0.95, eos_token_id: cfg.eosTokenIds[0] }, null, 2) + '\n');
  }
  const voc = synthVocabulary(cfg.vocab, k3 ? k3Specials() : undefined);
  fs.writeFileSync(path.join(dir, 'tiktoken.model'), rankFileText(voc.ranks));
  fs.writeFileSync(
    path.join(dir, 'tokenizer_config.json'),
    JSON.stringify(
      {
        added_tokens_decoder: Object.fromEntries(voc.specials.map((t) => [String(t.id), { content: t.text, special: true }])),
        // K3 ships no template: its format is XTML
        ...(k3 ? {} : { chat_template: KIMI_STYLE_TEMPLATE }),
      },
      null,
      2,
    ) + '\n',
  );
  return cfg;
}

/** What K3's wrapper says besides its language model's config: its quantization and a small vision tower (norm weights near 1, as trained ones are). */
const K3_WRAPPER: JsonObject = {
  dtype: 'bfloat16',
  quantization_config: {
    quant_method: 'compressed-tensors',
    format: 'mxfp4-pack-quantized',
    config_groups: { group_0: { weights: { num_bits: 4, type: 'float', group_size: 32, symmetric: true, scale_dtype: 'torch.uint8' }, input_activations: null } },
    ignore: ['re:.*self_attn.*', 're:.*shared_experts.*', 're:.*mlp\\.(gate|up|gate_up|down)_proj.*', 're:.*lm_head.*', 're:.*vision_tower.*', 're:.*mm_projector.*'],
  },
  vision_config: {
    // wide enough that most of the tower is stored at 8 bits (as at K3's scale), heads of 64
    vt_hidden_size: 128,
    vt_num_hidden_layers: 2,
    vt_num_attention_heads: 2,
    qkv_hidden_size: 128,
    vt_intermediate_size: 512,
    patch_size: 14,
    init_pos_emb_height: 8,
    init_pos_emb_width: 8,
    init_pos_emb_time: 4,
    pos_emb_type: 'divided_fixed',
    pos_emb_interpolation_mode: 'bilinear',
    norm_type: 'rmsnorm',
    activation_func: 'gelu_pytorch_tanh',
    mlp_type: 'mlp2',
    merge_kernel_size: [2, 2],
    merge_type: 'sd2_tpool',
    mm_projector_type: 'patchmergerv2',
    mm_hidden_size: 128,
    projector_hidden_act: 'gelu',
    projector_ln_eps: 1e-5,
  },
};

/** The vision config of a K3 wrapper around a language model of `hidden` (the projector's output width). */
function k3Wrapper(hidden: number, vision: JsonObject = {}): JsonObject {
  return { ...K3_WRAPPER, vision_config: { ...(K3_WRAPPER.vision_config as JsonObject), ...vision, text_hidden_size: hidden } };
}

const K3_PREPROCESSOR: JsonObject = {
  media_proc_cfg: { image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.5], patch_size: 14, merge_kernel_size: 2, in_patch_limit: 65536, patch_limit_on_one_side: 512, fixed_output_tokens: null },
};

/** A vision tower's and projector's tensors by their release names, for a `vision_config` and a text width. */
function* visionTensors(vc: JsonObject, textHidden: number): Generator<{ name: string; shape: number[]; std: number; mean?: number }> {
  const D = vc.vt_hidden_size as number;
  const Q = vc.qkv_hidden_size as number;
  const M = vc.vt_intermediate_size as number;
  const p = vc.patch_size as number;
  const inv = (n: number) => 1 / Math.sqrt(n);
  yield { name: 'vision_tower.patch_embed.proj.weight', shape: [D, 3, p, p], std: inv(3 * p * p) };
  yield { name: 'vision_tower.patch_embed.pos_emb.weight', shape: [vc.init_pos_emb_height as number, vc.init_pos_emb_width as number, D], std: 0.02 };
  for (let b = 0; b < (vc.vt_num_hidden_layers as number); b++) {
    const k = `vision_tower.encoder.blocks.${b}.`;
    yield { name: `${k}norm0.weight`, shape: [D], std: 0.1, mean: 1 };
    yield { name: `${k}norm1.weight`, shape: [D], std: 0.1, mean: 1 };
    yield { name: `${k}wqkv.weight`, shape: [3 * Q, D], std: inv(D) };
    yield { name: `${k}wo.weight`, shape: [D, Q], std: inv(Q) };
    yield { name: `${k}mlp.fc0.weight`, shape: [M, D], std: inv(D) };
    yield { name: `${k}mlp.fc1.weight`, shape: [D, M], std: inv(M) };
  }
  yield { name: 'vision_tower.encoder.final_layernorm.weight', shape: [D], std: 0.1, mean: 1 };
  yield { name: 'mm_projector.proj.0.weight', shape: [4 * D, 4 * D], std: inv(4 * D) };
  yield { name: 'mm_projector.proj.2.weight', shape: [textHidden, 4 * D], std: inv(4 * D) };
  yield { name: 'mm_projector.post_norm.weight', shape: [textHidden], std: 0.1, mean: 1 };
}
