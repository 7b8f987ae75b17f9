import type { JsonObject } from '../../util/fields.js';
import type { FamilySynth, SynthShapeOptions } from '../synth.js';
import type { TransformerConfig } from '../transformer/config.js';
import { transformerTensors } from '../transformer/synth.js';
import { GPT_OSS_NAMES, GPT_OSS_STACKED } from './names.js';

/**
 * A plain turn format for the synthetic models (text in and out). The releases speak harmony,
 * which is not this: a real checkpoint's own template is what a real model runs with.
 */
export const GPT_OSS_SYNTH_TEMPLATE =
  "{%- for message in messages %}{{- '<|start|>' + message.role + '<|message|>' + message.content + '<|end|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start|>assistant<|message|>' }}{%- endif %}";

export const GPT_OSS_SYNTH_SPECIALS = ['<|endoftext|>', '<|start|>', '<|message|>', '<|end|>'];

const alternating = (n: number) => Array.from({ length: n }, (_, L) => (L % 2 === 0 ? 'sliding_attention' : 'full_attention'));

const COMMON: JsonObject = {
  model_type: 'gpt_oss',
  architectures: ['GptOssForCausalLM'],
  hidden_act: 'silu',
  attention_bias: true,
  rms_norm_eps: 1e-5,
  rope_theta: 150000,
  rope_scaling: { rope_type: 'yarn', factor: 32.0, beta_fast: 32.0, beta_slow: 1.0, truncate: false, original_max_position_embeddings: 4096 },
  sliding_window: 128,
  swiglu_limit: 7.0,
  tie_word_embeddings: false,
  max_position_embeddings: 131072,
  head_dim: 64,
  eos_token_id: 200002,
  pad_token_id: 199999,
};

const SHAPES: Record<string, JsonObject> = {
  // GQA 2:1, a window of 4 (shorter than the tests' prompts) on every other layer, top 2 of 8
  'gpt-oss-tiny': {
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    intermediate_size: 32,
    num_local_experts: 8,
    num_experts_per_tok: 2,
    sliding_window: 4,
    max_position_embeddings: 4096,
  },
  // the releases' widths, from their config.json
  'gpt-oss-20b': {
    vocab_size: 201088,
    hidden_size: 2880,
    num_hidden_layers: 24,
    num_attention_heads: 64,
    num_key_value_heads: 8,
    intermediate_size: 2880,
    num_local_experts: 32,
    num_experts_per_tok: 4,
  },
  'gpt-oss-120b': {
    vocab_size: 201088,
    hidden_size: 2880,
    num_hidden_layers: 36,
    num_attention_heads: 64,
    num_key_value_heads: 8,
    intermediate_size: 2880,
    num_local_experts: 128,
    num_experts_per_tok: 4,
  },
};

function gptOssConfig(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = { ...COMMON, ...structuredClone(SHAPES[shape]) };
  if (o.layers !== undefined) cfg.num_hidden_layers = o.layers;
  if (o.experts !== undefined) {
    cfg.num_local_experts = o.experts;
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, o.experts);
  }
  cfg.layer_types = alternating(cfg.num_hidden_layers as number);
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

/** gpt-oss's synthetic models; a checkpoint holds its experts as the release does (stacked, MXFP4). */
export const gptOssSynth: FamilySynth<TransformerConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['gpt-oss-20b', 'gpt-oss-120b'],
  config: gptOssConfig,
  prefix: () => '',
  tensors: (cfg) => transformerTensors(cfg, GPT_OSS_NAMES),
  specials: () => GPT_OSS_SYNTH_SPECIALS,
  ids(flat, id) {
    if (!id) return;
    flat.pad_token_id = null;
    flat.eos_token_id = id('<|end|>');
  },
  containerFiles: (): Record<string, string> => ({ 'chat_template.jinja': GPT_OSS_SYNTH_TEMPLATE }),
  manifestArch: () => 'gpt_oss',
  checkpoint: ({ _experts, ...config }) => ({
    config,
    prefix: '',
    // `_experts: "bf16"` (a test's key, not written) stacks them as bf16 [E, in, out] instead
    experts: _experts === 'bf16' ? 'bf16-stacked' : 'mxfp4-stacked',
    stacked: GPT_OSS_STACKED,
    extra: [],
    files: {},
    chatTemplate: GPT_OSS_SYNTH_TEMPLATE,
  }),
};
