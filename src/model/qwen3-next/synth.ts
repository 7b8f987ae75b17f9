import type { JsonObject } from '../../util/fields.js';
import { gdnChannels, gdnProjWidths } from '../blocks/gated-deltanet.js';
import type { FamilySynth, SynthShapeOptions, SynthTensor } from '../synth.js';
import { CHATML_SPECIALS, CHATML_TEMPLATE } from '../transformer/synth.js';
import type { Qwen3NextConfig } from './config.js';
import { GDN_PROJ, QWEN3_NEXT_NAMES, SHARED_GATE } from './names.js';

const COMMON: JsonObject = {
  hidden_act: 'silu',
  attention_bias: false,
  rms_norm_eps: 1e-6,
  tie_word_embeddings: false,
  linear_conv_kernel_dim: 4,
  bos_token_id: 151643,
  eos_token_id: 151645,
};

const NEXT: JsonObject = {
  ...COMMON,
  model_type: 'qwen3_next',
  architectures: ['Qwen3NextForCausalLM'],
  rope_theta: 10000000.0,
  partial_rotary_factor: 0.25,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [],
  full_attention_interval: 4,
};

// Qwen3.5's language model as a converted container holds it: text_config flattened to the top,
// the wrapper's own keys under `_outer` (its checkpoint is then the release's layout; a config
// with `_outer: null` is the text-only form)
const Q35: JsonObject = {
  ...COMMON,
  model_type: 'qwen3_5_moe_text',
  architectures: ['Qwen3_5MoeForConditionalGeneration'],
  _outer: { model_type: 'qwen3_5_moe', architectures: ['Qwen3_5MoeForConditionalGeneration'], tie_word_embeddings: false },
  rope_parameters: { rope_type: 'default', rope_theta: 10000000.0, partial_rotary_factor: 0.25, mrope_interleaved: true, mrope_section: [11, 11, 10] },
  full_attention_interval: 4,
};

const SHAPES: Record<string, JsonObject> = {
  // 3 DeltaNet layers then full attention, value heads 2 per key head, a dense layer (mlp_only_layers)
  'qwen3-next-tiny': {
    ...NEXT,
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    linear_num_key_heads: 2,
    linear_num_value_heads: 4,
    linear_key_head_dim: 8,
    linear_value_head_dim: 8,
    intermediate_size: 96,
    moe_intermediate_size: 32,
    shared_expert_intermediate_size: 24,
    num_experts: 8,
    num_experts_per_tok: 2,
    mlp_only_layers: [1],
    max_position_embeddings: 4096,
  },
  // Qwen3.5's separate DeltaNet projections, every layer MoE
  'qwen3.5-moe-tiny': {
    ...Q35,
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 1,
    head_dim: 16,
    linear_num_key_heads: 2,
    linear_num_value_heads: 6,
    linear_key_head_dim: 8,
    linear_value_head_dim: 8,
    moe_intermediate_size: 32,
    shared_expert_intermediate_size: 40,
    num_experts: 8,
    num_experts_per_tok: 3,
    max_position_embeddings: 4096,
  },
  // the releases' real widths (use --layers and --experts to fit a disk), from their config.json
  'qwen3-next-80b-a3b': {
    ...NEXT,
    vocab_size: 151936,
    hidden_size: 2048,
    num_hidden_layers: 48,
    num_attention_heads: 16,
    num_key_value_heads: 2,
    head_dim: 256,
    linear_num_key_heads: 16,
    linear_num_value_heads: 32,
    linear_key_head_dim: 128,
    linear_value_head_dim: 128,
    intermediate_size: 5120,
    moe_intermediate_size: 512,
    shared_expert_intermediate_size: 512,
    num_experts: 512,
    num_experts_per_tok: 10,
    max_position_embeddings: 262144,
  },
  'qwen3.5-397b-a17b': {
    ...Q35,
    vocab_size: 248320,
    hidden_size: 4096,
    num_hidden_layers: 60,
    num_attention_heads: 32,
    num_key_value_heads: 2,
    head_dim: 256,
    linear_num_key_heads: 16,
    linear_num_value_heads: 64,
    linear_key_head_dim: 128,
    linear_value_head_dim: 128,
    moe_intermediate_size: 1024,
    shared_expert_intermediate_size: 1024,
    num_experts: 512,
    num_experts_per_tok: 10,
    max_position_embeddings: 262144,
    bos_token_id: null,
    eos_token_id: 248046,
  },
};

function config(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = structuredClone(SHAPES[shape]);
  if (o.layers !== undefined) {
    cfg.num_hidden_layers = o.layers;
    if (Array.isArray(cfg.mlp_only_layers)) cfg.mlp_only_layers = (cfg.mlp_only_layers as number[]).filter((L) => L < o.layers!);
  }
  if (o.experts !== undefined) {
    cfg.num_experts = o.experts;
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, o.experts);
  }
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

/** Every tensor of a Qwen3-Next model by its HuggingFace name, in the order the synthetic writers draw them. */
export function* qwen3NextTensors(cfg: Qwen3NextConfig): Generator<SynthTensor> {
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false): SynthTensor => ({ kind: 'matrix', name, rows, cols, std, expert });
  const vector = (name: string, shape: number[], lo: number, hi: number): SynthTensor => ({ kind: 'vector', name, shape, lo, hi });
  const H = cfg.hidden;
  const { heads, kvHeads, headDim: D } = cfg.attention;
  const g = cfg.gdn;
  const inv = (n: number) => 1 / Math.sqrt(n);
  yield matrix('model.embed_tokens.weight', cfg.vocab, H, 1);
  for (let L = 0; L < cfg.layers; L++) {
    const p = `model.layers.${L}.`;
    // zero-centred norms: weights near 0 (the model multiplies by 1 + w)
    yield vector(`${p}input_layernorm.weight`, [H], -0.2, 0.2);
    yield vector(`${p}post_attention_layernorm.weight`, [H], -0.2, 0.2);
    if (cfg.layerKinds[L].attn === 'gdn') {
      const a = `${p}linear_attn.`;
      const widths = gdnProjWidths(g);
      for (const [i, n] of GDN_PROJ[g.packing].entries()) yield matrix(`${a}${n}.weight`, widths[i], H, inv(H));
      yield vector(`${a}conv1d.weight`, [gdnChannels(g), 1, g.convKernel], -0.6, 0.6);
      yield vector(`${a}dt_bias`, [g.vHeads], -1, 1);
      yield vector(`${a}A_log`, [g.vHeads], -1.5, 1);
      yield vector(`${a}norm.weight`, [g.headDim], 0.8, 1.2);
      yield matrix(`${a}out_proj.weight`, H, g.vHeads * g.headDim, inv(g.vHeads * g.headDim));
    } else {
      const a = `${p}self_attn.`;
      yield matrix(`${a}q_proj.weight`, 2 * heads * D, H, inv(H));
      yield matrix(`${a}k_proj.weight`, kvHeads * D, H, inv(H));
      yield matrix(`${a}v_proj.weight`, kvHeads * D, H, inv(H));
      yield matrix(`${a}o_proj.weight`, H, heads * D, inv(heads * D));
      if (cfg.bias.qkv) {
        yield vector(`${a}q_proj.bias`, [2 * heads * D], -0.1, 0.1);
        yield vector(`${a}k_proj.bias`, [kvHeads * D], -0.1, 0.1);
        yield vector(`${a}v_proj.bias`, [kvHeads * D], -0.1, 0.1);
      }
      if (cfg.bias.o) yield vector(`${a}o_proj.bias`, [H], -0.1, 0.1);
      yield vector(`${a}q_norm.weight`, [D], -0.2, 0.2);
      yield vector(`${a}k_norm.weight`, [D], -0.2, 0.2);
    }
    if (cfg.layerKinds[L].ffn === 'dense') {
      const I = cfg.denseInter;
      yield matrix(`${p}mlp.gate_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.up_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.down_proj.weight`, H, I, inv(I));
      continue;
    }
    const E = cfg.moe.experts;
    const I = cfg.moe.inter;
    const n = QWEN3_NEXT_NAMES;
    yield matrix(p + n.router, E, H, inv(H));
    for (let e = 0; e < E; e++) {
      yield matrix(n.expert(L, e, 0), I, H, inv(H), true);
      yield matrix(n.expert(L, e, 1), I, H, inv(H), true);
      yield matrix(n.expert(L, e, 2), H, I, inv(I), true);
    }
    const S = cfg.sharedInter;
    yield matrix(`${p}${n.shared}gate_proj.weight`, S, H, inv(H));
    yield matrix(`${p}${n.shared}up_proj.weight`, S, H, inv(H));
    yield matrix(`${p}${n.shared}down_proj.weight`, H, S, inv(S));
    yield matrix(p + SHARED_GATE, 1, H, inv(H));
  }
  yield vector('model.norm.weight', [H], -0.2, 0.2);
  if (!cfg.tieEmbeddings) yield matrix('lm_head.weight', cfg.vocab, H, inv(H));
}

/** Qwen3-Next's and Qwen3.5 MoE's synthetic models. */
export const qwen3NextSynth: FamilySynth<Qwen3NextConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['qwen3-next-80b-a3b', 'qwen3.5-397b-a17b'],
  config,
  prefix: () => '',
  tensors: qwen3NextTensors,
  specials: () => CHATML_SPECIALS,
  ids(flat, id) {
    if (!id) return;
    flat.bos_token_id = null;
    flat.eos_token_id = id('<|im_end|>');
  },
  containerFiles: (): Record<string, string> => ({ 'chat_template.jinja': CHATML_TEMPLATE }),
  manifestArch: (flat) => String(flat.model_type),
  checkpoint(flat) {
    const { _outer: outer, ...text } = flat;
    if (!outer || typeof outer !== 'object' || Array.isArray(outer)) return { config: text, prefix: '', experts: 'bf16', extra: [], files: {}, chatTemplate: CHATML_TEMPLATE };
    // the release's layout: the config nested beside a vision config, the language model under
    // model.language_model. with its experts stacked, a vision tower and an MTP layer the text
    // model never reads
    const H = text.hidden_size as number;
    return {
      config: { ...outer, text_config: text, vision_config: { model_type: 'qwen3_5_moe', depth: 1, hidden_size: 16, out_hidden_size: H } },
      prefix: '',
      rename: (n) => (n.startsWith('model.') ? `model.language_model.${n.slice('model.'.length)}` : n),
      stackExperts: true,
      experts: 'bf16',
      extra: [
        { name: 'model.visual.blocks.0.attn.qkv.weight', shape: [48, 16], std: 0.1 },
        { name: 'mtp.fc.weight', shape: [H, 2 * H], std: 0.1 },
      ],
      files: {},
      chatTemplate: CHATML_TEMPLATE,
    };
  },
};
