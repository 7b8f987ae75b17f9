import type { JsonObject } from '../../util/fields.js';
import { KIMI_STYLE_TEMPLATE } from '../../chat/kimi-template.js';
import type { FamilySynth, SynthExtraTensor, SynthShapeOptions, SynthTensor } from '../synth.js';
import type { KimiConfig } from './config.js';

/**
 * Synthetic Kimi models: Kimi-Linear's and K3's shapes (small ones for the tests, the releases'
 * real widths), their configs, and every tensor by its HuggingFace name, in the order the writers
 * draw them. K3's tensors come after the Kimi-Linear ones they sit next to, so a Kimi-Linear
 * config draws exactly what it always drew.
 */

/** Kimi's chat control tokens, which a small synthetic tokenizer puts at the top of its vocabulary. */
export const KIMI_SPECIALS = ['[BOS]', '[EOS]', '<|im_end|>', '<|im_user|>', '<|im_assistant|>', '<|im_system|>', '<|im_middle|>'];

/** The attention-residual, latent-MoE, SiTU and gate settings of Kimi K3 (over COMMON). */
const K3_COMMON: JsonObject = {
  routed_scaling_factor: 1.0,
  latent_moe_use_norm: true,
  mla_use_output_gate: true,
  hidden_act: 'situ',
  activation_situ_beta: 4.0,
  activation_situ_linear_beta: 25.0,
  attn_res_block_size: 12,
};

const SHAPES: Record<string, JsonObject> = {
  tiny: {
    vocab_size: 300,
    hidden_size: 96,
    num_hidden_layers: 4,
    intermediate_size: 160,
    moe_intermediate_size: 48,
    num_experts: 8,
    num_experts_per_token: 3,
    num_shared_experts: 1,
    num_attention_heads: 3,
    num_key_value_heads: 3,
    kv_lora_rank: 40,
    qk_nope_head_dim: 16,
    qk_rope_head_dim: 8,
    v_head_dim: 16,
    linear_attn_config: { num_heads: 3, head_dim: 16, short_conv_kernel_size: 4 },
  },
  'kimi-linear': {
    vocab_size: 163840,
    hidden_size: 2304,
    num_hidden_layers: 27,
    intermediate_size: 9216,
    moe_intermediate_size: 1024,
    num_experts: 256,
    num_experts_per_token: 8,
    num_shared_experts: 1,
    num_attention_heads: 32,
    num_key_value_heads: 32,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    linear_attn_config: { num_heads: 32, head_dim: 128, short_conv_kernel_size: 4 },
  },
  // several attention-residual blocks and a partial one (boundaries 0, 3, 6), MLA last, every K3
  // feature on at sizes a test runs in milliseconds
  'k3-tiny': {
    ...K3_COMMON,
    vocab_size: 1024,
    hidden_size: 128,
    num_hidden_layers: 7,
    intermediate_size: 256,
    moe_intermediate_size: 64,
    routed_expert_hidden_size: 64,
    num_experts: 8,
    num_experts_per_token: 3,
    num_shared_experts: 2,
    num_attention_heads: 4,
    num_key_value_heads: 4,
    q_lora_rank: 48,
    kv_lora_rank: 32,
    qk_nope_head_dim: 16,
    qk_rope_head_dim: 8,
    v_head_dim: 16,
    attn_res_block_size: 3,
    linear_attn_config: { num_heads: 3, head_dim: 32, short_conv_kernel_size: 4, use_full_rank_gate: true, gate_lower_bound: -5.0 },
  },
  // Kimi K3's real widths (93 layers, 896 experts of 3072 × 3584 latent, top-16)
  k3: {
    ...K3_COMMON,
    vocab_size: 163840,
    hidden_size: 7168,
    num_hidden_layers: 93,
    intermediate_size: 33792,
    moe_intermediate_size: 3072,
    routed_expert_hidden_size: 3584,
    num_experts: 896,
    num_experts_per_token: 16,
    num_shared_experts: 2,
    num_attention_heads: 96,
    num_key_value_heads: 96,
    q_lora_rank: 1536,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    max_position_embeddings: 1048576,
    linear_attn_config: { num_heads: 96, head_dim: 128, short_conv_kernel_size: 4, use_full_rank_gate: true, gate_lower_bound: -5.0 },
  },
};

const isK3 = (shape: string) => shape === 'k3-tiny' || shape === 'k3';

/** What K3's wrapper adds around its language model's config (`_outer` in a manifest): its name and its ids, at the top of its vocabulary. */
function k3Outer(vocab: number): JsonObject {
  const base = vocab - 256;
  return {
    architectures: ['KimiK3ForConditionalGeneration'],
    model_type: 'kimi_k3',
    bos_token_id: base,
    eos_token_id: base + 2,
    pad_token_id: base + 255,
    media_placeholder_token_id: base + 21,
    image_placeholder: '<|kimi_image_placeholder|>',
    tie_word_embeddings: false,
  };
}

/**
 * K3's turns for chat.json, as the C engine's CLI template writes them: XTML messages, the
 * assistant's reply in a response element (thinking off). The full XTML format is richer.
 */
const K3_CHAT = {
  system: ['<|open|>message role="system"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  user: ['<|open|>message role="user"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  assistant: ['<|open|>message role="assistant"<|sep|><|open|>response<|sep|>', '<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>'],
  open: '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>',
};

const COMMON: JsonObject = {
  model_type: 'kimi_linear',
  architectures: ['KimiLinearForCausalLM'],
  first_k_dense_replace: 1,
  moe_layer_freq: 1,
  moe_renormalize: true,
  moe_router_activation_func: 'sigmoid',
  routed_scaling_factor: 2.446,
  use_grouped_topk: true,
  num_expert_group: 1,
  topk_group: 1,
  q_lora_rank: null,
  mla_use_nope: true,
  rms_norm_eps: 1e-5,
  hidden_act: 'silu',
  tie_word_embeddings: false,
  bos_token_id: 1,
  eos_token_id: 2,
};

/** Kimi's pattern: every fourth layer is MLA, and so is the last one. */
export function layerPattern(layers: number): { kda: number[]; full: number[] } {
  const kda: number[] = [];
  const full: number[] = [];
  for (let i = 0; i < layers; i++) (i % 4 === 3 || i === layers - 1 ? full : kda).push(i + 1);
  return { kda, full };
}

function kimiConfig(shape: string, opts: SynthShapeOptions): JsonObject {
  const base = SHAPES[shape];
  const cfg: JsonObject = { ...COMMON, ...structuredClone(base) };
  if (opts.layers !== undefined) cfg.num_hidden_layers = opts.layers;
  if (opts.experts !== undefined) {
    cfg.num_experts = opts.experts;
    cfg.num_experts_per_token = Math.min(cfg.num_experts_per_token as number, opts.experts);
  }
  const extra = structuredClone(opts.config ?? {});
  const lac = { ...(cfg.linear_attn_config as JsonObject), ...((extra.linear_attn_config as JsonObject) ?? {}) };
  Object.assign(cfg, extra);
  const { kda, full } = layerPattern(cfg.num_hidden_layers as number);
  cfg.linear_attn_config = { kda_layers: kda, full_attn_layers: full, ...lac };
  if (isK3(shape)) {
    cfg._outer = k3Outer(cfg.vocab_size as number);
    // a block longer than the model is one block, but the C engine refuses it: a model of fewer
    // layers than K3's block gets blocks of its whole length
    if (typeof cfg.attn_res_block_size === 'number' && !(extra.attn_res_block_size !== undefined)) cfg.attn_res_block_size = Math.min(cfg.attn_res_block_size, cfg.num_hidden_layers as number);
  }
  return cfg;
}

/** Every tensor of a Kimi-family model by its HuggingFace name (without a prefix), in draw order. */
function* kimiTensors(cfg: KimiConfig): Generator<SynthTensor> {
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false): SynthTensor => ({ kind: 'matrix', name, rows, cols, std, expert });
  const vector = (name: string, shape: number[], lo: number, hi: number, valid?: number): SynthTensor => ({ kind: 'vector', name, shape, lo, hi, valid });
  const H = cfg.hidden;
  const inv = (n: number) => 1 / Math.sqrt(n);
  // an attention-residual projection row: scores of order one, so the mixes neither average nor pick one
  const resProj = (name: string) => vector(name, [1, H], -2 * inv(H), 2 * inv(H));
  yield matrix('model.embed_tokens.weight', cfg.vocab, H, 1);
  for (let L = 0; L < cfg.layers; L++) {
    const p = `model.layers.${L}.`;
    const a = `${p}self_attn.`;
    yield vector(`${p}input_layernorm.weight`, [H], 0.8, 1.2);
    yield vector(`${p}post_attention_layernorm.weight`, [H], 0.8, 1.2);
    if (cfg.attnResBlock) {
      yield vector(`${p}self_attention_res_norm.weight`, [H], 0.8, 1.2);
      yield resProj(`${p}self_attention_res_proj.weight`);
      yield vector(`${p}mlp_res_norm.weight`, [H], 0.8, 1.2);
      yield resProj(`${p}mlp_res_proj.weight`);
    }
    if (cfg.layerKinds[L].attn === 'kda') {
      const { heads: NH, headDim: D, convKernel: K } = cfg.kda;
      const C = NH * D;
      for (const x of ['q', 'k', 'v']) yield matrix(`${a}${x}_proj.weight`, C, H, inv(H));
      for (const x of ['q', 'k', 'v']) yield vector(`${a}${x}_conv1d.weight`, [C, 1, K], -0.6, 0.6);
      yield matrix(`${a}f_a_proj.weight`, D, H, inv(H));
      yield matrix(`${a}f_b_proj.weight`, C, D, inv(D));
      yield vector(`${a}dt_bias`, [C], -1, 1);
      // K3 stores one per head in a vector of head_dim (its release: 96 in [128])
      if (cfg.kda.fullRankGate) yield vector(`${a}A_log`, [Math.max(NH, D)], -1.5, 0.5, NH);
      else yield vector(`${a}A_log`, [1, 1, NH, 1], -1.5, 0.5);
      yield matrix(`${a}b_proj.weight`, NH, H, inv(H));
      if (cfg.kda.fullRankGate) yield matrix(`${a}g_proj.weight`, C, H, inv(H));
      else {
        yield matrix(`${a}g_a_proj.weight`, D, H, inv(H));
        yield matrix(`${a}g_b_proj.weight`, C, D, inv(D));
      }
      yield vector(`${a}o_norm.weight`, [D], 0.8, 1.2);
      yield matrix(`${a}o_proj.weight`, H, C, inv(C));
    } else {
      const m = cfg.mla;
      const qOut = m.heads * (m.qkNope + m.qkRope);
      if (m.qLoraRank) {
        yield matrix(`${a}q_a_proj.weight`, m.qLoraRank, H, inv(H));
        yield vector(`${a}q_a_layernorm.weight`, [m.qLoraRank], 0.8, 1.2);
        yield matrix(`${a}q_b_proj.weight`, qOut, m.qLoraRank, inv(m.qLoraRank));
      } else yield matrix(`${a}q_proj.weight`, qOut, H, inv(H));
      yield matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H, inv(H));
      yield vector(`${a}kv_a_layernorm.weight`, [m.kvLoraRank], 0.8, 1.2);
      yield matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank, inv(m.kvLoraRank));
      if (m.outputGate) yield matrix(`${a}g_proj.weight`, m.heads * m.vHead, H, inv(H));
      yield matrix(`${a}o_proj.weight`, H, m.heads * m.vHead, inv(m.heads * m.vHead));
    }
    if (cfg.layerKinds[L].ffn === 'dense') {
      const I = cfg.denseInter;
      yield matrix(`${p}mlp.gate_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.up_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.down_proj.weight`, H, I, inv(I));
    } else {
      const m = `${p}block_sparse_moe.`;
      const E = cfg.moe.experts;
      const I = cfg.moe.inter;
      const W = cfg.expertWidth;
      yield matrix(`${m}gate.weight`, E, H, inv(H));
      yield vector(`${m}gate.e_score_correction_bias`, [E], -0.1, 0.1);
      if (cfg.latent) {
        yield matrix(`${m}routed_expert_down_proj.weight`, W, H, inv(H));
        if (cfg.latent.norm) yield vector(`${m}routed_expert_norm.weight`, [W], 0.8, 1.2);
        yield matrix(`${m}routed_expert_up_proj.weight`, H, W, inv(W));
      }
      for (let e = 0; e < E; e++) {
        yield matrix(`${m}experts.${e}.w1.weight`, I, W, inv(W), true);
        yield matrix(`${m}experts.${e}.w3.weight`, I, W, inv(W), true);
        yield matrix(`${m}experts.${e}.w2.weight`, W, I, inv(I), true);
      }
      const S = I * cfg.moe.shared;
      if (S > 0) {
        yield matrix(`${m}shared_experts.gate_proj.weight`, S, H, inv(H));
        yield matrix(`${m}shared_experts.up_proj.weight`, S, H, inv(H));
        yield matrix(`${m}shared_experts.down_proj.weight`, H, S, inv(S));
      }
    }
  }
  yield vector('model.norm.weight', [H], 0.8, 1.2);
  if (cfg.attnResBlock) {
    yield vector('model.output_attn_res_norm.weight', [H], 0.8, 1.2);
    yield resProj('model.output_attn_res_proj.weight');
  }
  yield matrix('lm_head.weight', cfg.vocab, H, inv(H));
}

/**
 * Kimi K3's 256 reserved ids, by offset from the first (163584 in the release): the names its
 * tokenizer_config.json gives them — the XTML brackets, the end of a message (the stop token), the
 * media block — and `<|reserved_token_{id}|>` for the rest.
 */
export function k3Specials(count = 256): string[] {
  const named: Record<number, string> = {
    0: '[BOS]',
    1: '[EOS]',
    2: '<|end_of_msg|>',
    3: '<|open|>',
    4: '<|close|>',
    5: '<|sep|>',
    6: '[start_header_id]',
    7: '[end_header_id]',
    9: '[EOT]',
    18: '<|media_begin|>',
    19: '<|media_content|>',
    20: '<|media_end|>',
    21: '<|media_pad|>',
    65: '<osagent_mode>',
    254: '[UNK]',
    255: '[PAD]',
  };
  return Array.from({ length: count }, (_, i) => named[i] ?? `<|reserved_token_${i}|>`);
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
function* visionTensors(vc: JsonObject, textHidden: number): Generator<SynthExtraTensor> {
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

/** Kimi-Linear's and K3's synthetic models. */
export const kimiSynth: FamilySynth<KimiConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['kimi-linear', 'k3'],
  config: (shape, o) => kimiConfig(shape, o),
  prefix: (flat) => (flat._outer !== undefined ? 'language_model.' : ''),
  tensors: kimiTensors,
  specials: (flat) => (flat._outer !== undefined ? k3Specials() : KIMI_SPECIALS),
  ids(flat, id) {
    if (flat._outer !== undefined) {
      // the language model's ids are its wrapper's: the end of a message stops a reply
      const outer = flat._outer as JsonObject;
      flat.bos_token_id = outer.bos_token_id;
      flat.eos_token_id = outer.eos_token_id;
      flat.pad_token_id = outer.pad_token_id;
    } else if (id) {
      flat.bos_token_id = id('[BOS]');
      flat.eos_token_id = id('[EOS]');
    }
  },
  containerFiles: (flat): Record<string, string> => (flat._outer !== undefined ? { 'chat.json': JSON.stringify(K3_CHAT, null, 1) + '\n' } : {}),
  normalBooks: (flat) => flat._outer !== undefined,
  smallFormats: (flat) => (flat._outer !== undefined ? 'quantized' : 'mixed'),
  manifestArch: (flat) => (flat._outer !== undefined ? 'kimi-k3' : 'kimi_linear'),
  checkpoint(flat, o) {
    const k3 = flat._outer !== undefined;
    // the checkpoint nests what a container flattens
    const { _outer, ...text } = flat;
    const outer = _outer as JsonObject;
    const config: JsonObject = k3 ? { ...outer, ...k3Wrapper(text.hidden_size as number, o.vision), text_config: { ...text, bos_token_id: outer.bos_token_id, eos_token_id: outer.eos_token_id } } : flat;
    const files: Record<string, string> = {};
    if (k3) {
      files['preprocessor_config.json'] = JSON.stringify(K3_PREPROCESSOR, null, 2) + '\n';
      // the release's recommended sampling
      files['generation_config.json'] = JSON.stringify({ temperature: 1.0, top_p: 0.95, eos_token_id: outer.eos_token_id }, null, 2) + '\n';
    }
    return {
      config,
      prefix: k3 ? 'language_model.' : '',
      experts: k3 ? 'mxfp4-packed' : 'bf16',
      extra: k3 ? visionTensors(config.vision_config as JsonObject, text.hidden_size as number) : [],
      files,
      // K3 ships no template: its format is XTML
      chatTemplate: k3 ? undefined : KIMI_STYLE_TEMPLATE,
    };
  },
};
