import { KIMI_STYLE_TEMPLATE } from '../../chat/kimi-template.js';
import { Fields, type JsonObject } from '../../util/fields.js';
import type { FamilySynth, SynthExtraTensor, SynthShapeOptions, SynthTensor } from '../synth.js';
import { type DeepseekConfig, parseDeepseekConfig } from './config.js';
import { deepseekExpertTensor } from './names.js';

const FP8: JsonObject = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] };

const DEEPSEEK: JsonObject = {
  model_type: 'deepseek_v3',
  architectures: ['DeepseekV3ForCausalLM'],
  hidden_act: 'silu',
  attention_bias: false,
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  scoring_func: 'sigmoid',
  topk_method: 'noaux_tc',
  norm_topk_prob: true,
  tie_word_embeddings: false,
  moe_layer_freq: 1,
  bos_token_id: 0,
  eos_token_id: 1,
};

const KIMI_K2: JsonObject = {
  ...DEEPSEEK,
  model_type: 'kimi_k2',
  rope_theta: 50000,
  bos_token_id: 163584,
  eos_token_id: 163585,
};

const yarn = (factor: number, beta: [number, number]): JsonObject => ({ type: 'yarn', factor, original_max_position_embeddings: 4096, beta_fast: beta[0], beta_slow: beta[1], mscale: 1.0, mscale_all_dim: 1.0 });

const SHAPES: Record<string, JsonObject> = {
  // every detail at sizes a test runs in milliseconds: q low rank, 4 groups of 4 experts (2 kept),
  // a shared expert, a dense first layer, YaRN with mscale, one MTP layer in a checkpoint, FP8 weights
  'deepseek-v3-tiny': {
    ...DEEPSEEK,
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 3,
    num_attention_heads: 4,
    num_key_value_heads: 4,
    q_lora_rank: 48,
    kv_lora_rank: 32,
    qk_nope_head_dim: 16,
    qk_rope_head_dim: 8,
    v_head_dim: 16,
    intermediate_size: 96,
    moe_intermediate_size: 32,
    n_routed_experts: 16,
    num_experts_per_tok: 4,
    n_group: 4,
    topk_group: 2,
    n_shared_experts: 1,
    routed_scaling_factor: 2.5,
    first_k_dense_replace: 1,
    num_nextn_predict_layers: 1,
    max_position_embeddings: 163840,
    rope_scaling: yarn(40, [32, 1]),
    quantization_config: FP8,
  },
  // Kimi K2's settings: no group limit, YaRN β 1/1, θ 50000, the head's plain q_proj form
  // exercised here instead of the release's q low rank, bf16 weights
  'kimi-k2-tiny': {
    ...KIMI_K2,
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 3,
    num_attention_heads: 2,
    num_key_value_heads: 2,
    q_lora_rank: null,
    kv_lora_rank: 32,
    qk_nope_head_dim: 16,
    qk_rope_head_dim: 8,
    v_head_dim: 24,
    intermediate_size: 96,
    moe_intermediate_size: 32,
    n_routed_experts: 12,
    num_experts_per_tok: 3,
    n_group: 1,
    topk_group: 1,
    n_shared_experts: 1,
    routed_scaling_factor: 2.827,
    first_k_dense_replace: 1,
    num_nextn_predict_layers: 0,
    max_position_embeddings: 262144,
    rope_scaling: yarn(64, [1, 1]),
  },
  // the releases' real widths (use --layers and --experts to fit a disk), from their config.json
  'deepseek-v3': {
    ...DEEPSEEK,
    vocab_size: 129280,
    hidden_size: 7168,
    num_hidden_layers: 61,
    num_attention_heads: 128,
    num_key_value_heads: 128,
    q_lora_rank: 1536,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    intermediate_size: 18432,
    moe_intermediate_size: 2048,
    n_routed_experts: 256,
    num_experts_per_tok: 8,
    n_group: 8,
    topk_group: 4,
    n_shared_experts: 1,
    routed_scaling_factor: 2.5,
    first_k_dense_replace: 3,
    num_nextn_predict_layers: 1,
    max_position_embeddings: 163840,
    rope_scaling: yarn(40, [32, 1]),
    quantization_config: FP8,
  },
  'kimi-k2': {
    ...KIMI_K2,
    vocab_size: 163840,
    hidden_size: 7168,
    num_hidden_layers: 61,
    num_attention_heads: 64,
    num_key_value_heads: 64,
    q_lora_rank: 1536,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    intermediate_size: 18432,
    moe_intermediate_size: 2048,
    n_routed_experts: 384,
    num_experts_per_tok: 8,
    n_group: 1,
    topk_group: 1,
    n_shared_experts: 1,
    routed_scaling_factor: 2.827,
    first_k_dense_replace: 1,
    num_nextn_predict_layers: 0,
    max_position_embeddings: 262144,
    rope_scaling: yarn(64, [1, 1]),
    quantization_config: FP8,
  },
};

function deepseekConfig(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = structuredClone(SHAPES[shape]);
  if (o.layers !== undefined) cfg.num_hidden_layers = o.layers;
  if (o.experts !== undefined) {
    cfg.n_routed_experts = o.experts;
    // whole groups of at least 2, and a top-k that fits the kept groups
    let g = cfg.n_group as number;
    while (g > 1 && (o.experts % g || o.experts / g < 2)) g--;
    cfg.n_group = g;
    cfg.topk_group = Math.min(cfg.topk_group as number, g);
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, (cfg.topk_group as number) * (o.experts / g));
  }
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

const matrix = (name: string, rows: number, cols: number, std: number, expert = false): SynthTensor => ({ kind: 'matrix', name, rows, cols, std, expert });
const vector = (name: string, shape: number[], lo: number, hi: number): SynthTensor => ({ kind: 'vector', name, shape, lo, hi });
const inv = (n: number) => 1 / Math.sqrt(n);

/** Layer L's tensors by their HuggingFace names. */
function* layerTensors(c: DeepseekConfig, L: number, moe: boolean): Generator<SynthTensor> {
  const H = c.hidden;
  const m = c.mla;
  const p = `model.layers.${L}.`;
  const a = `${p}self_attn.`;
  yield vector(`${p}input_layernorm.weight`, [H], 0.8, 1.2);
  yield vector(`${p}post_attention_layernorm.weight`, [H], 0.8, 1.2);
  const qOut = m.heads * (m.qkNope + m.qkRope);
  if (m.qLoraRank) {
    yield matrix(`${a}q_a_proj.weight`, m.qLoraRank, H, inv(H));
    yield vector(`${a}q_a_layernorm.weight`, [m.qLoraRank], 0.8, 1.2);
    yield matrix(`${a}q_b_proj.weight`, qOut, m.qLoraRank, inv(m.qLoraRank));
  } else yield matrix(`${a}q_proj.weight`, qOut, H, inv(H));
  yield matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H, inv(H));
  yield vector(`${a}kv_a_layernorm.weight`, [m.kvLoraRank], 0.8, 1.2);
  yield matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank, inv(m.kvLoraRank));
  yield matrix(`${a}o_proj.weight`, H, m.heads * m.vHead, inv(m.heads * m.vHead));
  if (c.attentionBias) {
    if (m.qLoraRank) yield vector(`${a}q_a_proj.bias`, [m.qLoraRank], -0.1, 0.1);
    yield vector(`${a}kv_a_proj_with_mqa.bias`, [m.kvLoraRank + m.qkRope], -0.1, 0.1);
    yield vector(`${a}o_proj.bias`, [H], -0.1, 0.1);
  }
  if (!moe) {
    const I = c.denseInter;
    yield matrix(`${p}mlp.gate_proj.weight`, I, H, inv(H));
    yield matrix(`${p}mlp.up_proj.weight`, I, H, inv(H));
    yield matrix(`${p}mlp.down_proj.weight`, H, I, inv(I));
    return;
  }
  const E = c.moe.experts;
  const I = c.moe.inter;
  yield matrix(`${p}mlp.gate.weight`, E, H, inv(H));
  // a correction bias of the size of the sigmoid scores' spread: it changes selections
  yield vector(`${p}mlp.gate.e_score_correction_bias`, [E], -0.2, 0.2);
  for (let e = 0; e < E; e++) {
    yield matrix(deepseekExpertTensor(L, e, 0), I, H, inv(H), true);
    yield matrix(deepseekExpertTensor(L, e, 1), I, H, inv(H), true);
    yield matrix(deepseekExpertTensor(L, e, 2), H, I, inv(I), true);
  }
  if (c.sharedInter) {
    const S = c.sharedInter;
    yield matrix(`${p}mlp.shared_experts.gate_proj.weight`, S, H, inv(H));
    yield matrix(`${p}mlp.shared_experts.up_proj.weight`, S, H, inv(H));
    yield matrix(`${p}mlp.shared_experts.down_proj.weight`, H, S, inv(S));
  }
}

/** Every tensor of the language model, in the order the synthetic writers draw them. */
function* deepseekTensors(c: DeepseekConfig): Generator<SynthTensor> {
  yield matrix('model.embed_tokens.weight', c.vocab, c.hidden, 1);
  for (let L = 0; L < c.layers; L++) yield* layerTensors(c, L, c.layerKinds[L].ffn === 'moe');
  yield vector('model.norm.weight', [c.hidden], 0.8, 1.2);
  if (!c.tieEmbeddings) yield matrix('lm_head.weight', c.vocab, c.hidden, inv(c.hidden));
}

/** A checkpoint's MTP layers (never read): a layer's tensors after the last, with the MTP head's. */
function* mtpTensors(c: DeepseekConfig): Generator<SynthExtraTensor> {
  const H = c.hidden;
  for (let k = 0; k < c.skippedLayers; k++) {
    const L = c.layers + k;
    const p = `model.layers.${L}.`;
    for (const t of layerTensors(c, L, c.moe.experts > 0)) yield { name: t.name, shape: t.kind === 'matrix' ? [t.rows, t.cols] : t.shape, std: 0.05 };
    for (const n of ['enorm', 'hnorm', 'shared_head.norm']) yield { name: `${p}${n}.weight`, shape: [H], std: 0.05, mean: 1 };
    yield { name: `${p}eh_proj.weight`, shape: [H, 2 * H], std: 0.05 };
  }
}

/** DeepSeek-V3's turn format (as much of it as synthetic models carry). */
export const DEEPSEEK_TEMPLATE =
  "{{- '<｜begin▁of▁sentence｜>' }}{%- for m in messages %}{%- if m.role == 'system' %}{{- m.content }}{%- elif m.role == 'user' %}{{- '<｜User｜>' + m.content }}{%- else %}{{- '<｜Assistant｜>' + m.content + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<｜Assistant｜>' }}{%- endif %}";
const DEEPSEEK_SPECIALS = ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>', '<｜Assistant｜>'];
const KIMI_SPECIALS = ['[BOS]', '[EOS]', '<|im_end|>', '<|im_user|>', '<|im_assistant|>', '<|im_system|>', '<|im_middle|>'];

const parseFlat = (flat: JsonObject) => parseDeepseekConfig(Fields.root('synthetic config', flat));
const isKimi = (flat: JsonObject) => flat.model_type === 'kimi_k2';
const templateOf = (flat: JsonObject) => (isKimi(flat) ? KIMI_STYLE_TEMPLATE : DEEPSEEK_TEMPLATE);

/** DeepSeek-V3's and Kimi K2's synthetic models. */
export const deepseekSynth: FamilySynth<DeepseekConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['deepseek-v3', 'kimi-k2'],
  config: deepseekConfig,
  prefix: () => '',
  tensors: deepseekTensors,
  specials: (flat) => (isKimi(flat) ? KIMI_SPECIALS : DEEPSEEK_SPECIALS),
  ids(flat, id) {
    if (!id) return;
    flat.bos_token_id = id(isKimi(flat) ? '[BOS]' : '<｜begin▁of▁sentence｜>');
    flat.eos_token_id = isKimi(flat) ? id('<|im_end|>') : id('<｜end▁of▁sentence｜>');
  },
  containerFiles: (flat): Record<string, string> => ({ 'chat_template.jinja': templateOf(flat) }),
  manifestArch: (flat) => String(flat.model_type),
  checkpoint: (flat) => ({
    config: flat,
    prefix: '',
    experts: (flat.quantization_config as JsonObject | undefined)?.quant_method === 'compressed-tensors' ? 'int4-pack-quantized' : 'bf16',
    // as released: every linear weight inside the layers in FP8 blocks but the router
    fp8: (flat.quantization_config as JsonObject | undefined)?.quant_method === 'fp8' ? (name: string) => name.startsWith('model.layers.') && /(_proj|_mqa)\.weight$/.test(name) && !name.includes('.mlp.gate.') : undefined,
    extra: { [Symbol.iterator]: () => mtpTensors(parseFlat(flat)) },
    files: {},
    chatTemplate: templateOf(flat),
  }),
};
