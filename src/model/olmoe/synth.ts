import type { JsonObject } from '../../util/fields.js';
import type { FamilySynth, SynthShapeOptions } from '../synth.js';
import type { TransformerConfig } from '../transformer/config.js';
import { transformerTensors } from '../transformer/synth.js';
import { OLMOE_NAMES } from './names.js';

const COMMON: JsonObject = {
  model_type: 'olmoe',
  architectures: ['OlmoeForCausalLM'],
  hidden_act: 'silu',
  attention_bias: false,
  clip_qkv: null,
  norm_topk_prob: false,
  rms_norm_eps: 1e-5,
  rope_theta: 10000.0,
  tie_word_embeddings: false,
  bos_token_id: null,
  eos_token_id: 50279,
  pad_token_id: 1,
};

const SHAPES: Record<string, JsonObject> = {
  // MHA with the whole-projection q/k norms, top 4 of 16 not renormalised, at sizes a test runs in milliseconds
  'olmoe-tiny': {
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 4,
    intermediate_size: 32,
    num_experts: 16,
    num_experts_per_tok: 4,
    max_position_embeddings: 4096,
  },
  // the releases' real width (0924 and 0125 alike; use --layers and --experts to fit a disk), from their config.json
  'olmoe-1b-7b': {
    vocab_size: 50304,
    hidden_size: 2048,
    num_hidden_layers: 16,
    num_attention_heads: 16,
    num_key_value_heads: 16,
    intermediate_size: 1024,
    num_experts: 64,
    num_experts_per_tok: 8,
    max_position_embeddings: 4096,
  },
};

/** The Tülu turn format of OLMoE's Instruct releases, as the synthetic tokenizer carries it. */
export const OLMOE_TEMPLATE =
  "{{- '<|endoftext|>' }}{%- for message in messages %}{%- if message.role == 'system' %}{{- '<|system|>\\n' + message.content + '\\n' }}{%- elif message.role == 'user' %}{{- '<|user|>\\n' + message.content + '\\n' }}{%- elif message.role == 'assistant' %}{{- '<|assistant|>\\n' + message.content + '<|endoftext|>' + '\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}";

const SPECIALS = ['<|endoftext|>', '<|padding|>', '<|system|>', '<|user|>', '<|assistant|>'];

function olmoeConfig(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = { ...COMMON, ...structuredClone(SHAPES[shape]) };
  if (o.layers !== undefined) cfg.num_hidden_layers = o.layers;
  if (o.experts !== undefined) {
    cfg.num_experts = o.experts;
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, o.experts);
  }
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

/** OLMoE's synthetic models. */
export const olmoeSynth: FamilySynth<TransformerConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['olmoe-1b-7b'],
  config: olmoeConfig,
  prefix: () => '',
  tensors: (cfg) => transformerTensors(cfg, OLMOE_NAMES),
  specials: () => SPECIALS,
  ids(flat, id) {
    if (!id) return;
    flat.bos_token_id = null;
    flat.eos_token_id = id('<|endoftext|>');
    flat.pad_token_id = id('<|padding|>');
  },
  containerFiles: (): Record<string, string> => ({ 'chat_template.jinja': OLMOE_TEMPLATE }),
  manifestArch: () => 'olmoe',
  checkpoint: (flat) => ({ config: flat, prefix: '', experts: 'bf16', extra: [], files: {}, chatTemplate: OLMOE_TEMPLATE }),
};
