import type { JsonObject } from '../../util/fields.js';
import type { FamilySynth, SynthShapeOptions } from '../synth.js';
import type { TransformerConfig } from '../transformer/config.js';
import { CHATML_SPECIALS, CHATML_TEMPLATE, transformerTensors } from '../transformer/synth.js';
import { QWEN3_MOE_NAMES } from './names.js';

const COMMON: JsonObject = {
  model_type: 'qwen3_moe',
  architectures: ['Qwen3MoeForCausalLM'],
  hidden_act: 'silu',
  attention_bias: false,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [],
  tie_word_embeddings: false,
  use_sliding_window: false,
  bos_token_id: 151643,
  eos_token_id: 151645,
};

const SHAPES: Record<string, JsonObject> = {
  // a dense first layer (mlp_only_layers), GQA 2:1, every detail at sizes a test runs in milliseconds
  'qwen3-moe-tiny': {
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    intermediate_size: 96,
    moe_intermediate_size: 32,
    num_experts: 8,
    num_experts_per_tok: 2,
    mlp_only_layers: [0],
    max_position_embeddings: 4096,
  },
  // the releases' real widths (use --layers and --experts to fit a disk), from their config.json
  // (30B-A3B and 235B-A22B as the slime project's model scripts restate them; 480B's experts from
  // its parameter count: 62 layers × 160 × 3 × 6144 × 2560 ≈ 468 B)
  'qwen3-30b-a3b': {
    vocab_size: 151936,
    hidden_size: 2048,
    num_hidden_layers: 48,
    num_attention_heads: 32,
    num_key_value_heads: 4,
    head_dim: 128,
    intermediate_size: 6144,
    moe_intermediate_size: 768,
    num_experts: 128,
    num_experts_per_tok: 8,
    max_position_embeddings: 40960,
  },
  'qwen3-235b-a22b': {
    vocab_size: 151936,
    hidden_size: 4096,
    num_hidden_layers: 94,
    num_attention_heads: 64,
    num_key_value_heads: 4,
    head_dim: 128,
    intermediate_size: 12288,
    moe_intermediate_size: 1536,
    num_experts: 128,
    num_experts_per_tok: 8,
    max_position_embeddings: 40960,
  },
  'qwen3-coder-480b-a35b': {
    vocab_size: 151936,
    hidden_size: 6144,
    num_hidden_layers: 62,
    num_attention_heads: 96,
    num_key_value_heads: 8,
    head_dim: 128,
    intermediate_size: 8192,
    moe_intermediate_size: 2560,
    num_experts: 160,
    num_experts_per_tok: 8,
    max_position_embeddings: 262144,
  },
};

function qwen3Config(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = { ...COMMON, ...structuredClone(SHAPES[shape]) };
  if (o.layers !== undefined) {
    cfg.num_hidden_layers = o.layers;
    cfg.mlp_only_layers = (cfg.mlp_only_layers as number[]).filter((L) => L < o.layers!);
  }
  if (o.experts !== undefined) {
    cfg.num_experts = o.experts;
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, o.experts);
  }
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

/** Qwen3-MoE's synthetic models. */
export const qwen3MoeSynth: FamilySynth<TransformerConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['qwen3-30b-a3b', 'qwen3-235b-a22b', 'qwen3-coder-480b-a35b'],
  config: qwen3Config,
  prefix: () => '',
  tensors: (cfg) => transformerTensors(cfg, QWEN3_MOE_NAMES),
  specials: () => CHATML_SPECIALS,
  ids(flat, id) {
    if (!id) return;
    flat.bos_token_id = null;
    flat.eos_token_id = id('<|im_end|>');
  },
  containerFiles: (): Record<string, string> => ({ 'chat_template.jinja': CHATML_TEMPLATE }),
  manifestArch: () => 'qwen3_moe',
  checkpoint: (flat) => ({ config: flat, prefix: '', experts: 'bf16', extra: [], files: {}, chatTemplate: CHATML_TEMPLATE }),
};
