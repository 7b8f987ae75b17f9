import type { JsonObject } from '../../util/fields.js';
import type { FamilySynth, SynthShapeOptions } from '../synth.js';
import type { TransformerConfig } from '../transformer/config.js';
import { transformerTensors } from '../transformer/synth.js';
import { MIXTRAL_NAMES } from './names.js';

const COMMON: JsonObject = {
  model_type: 'mixtral',
  architectures: ['MixtralForCausalLM'],
  hidden_act: 'silu',
  rms_norm_eps: 1e-5,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  bos_token_id: 1,
  eos_token_id: 2,
};

const SHAPES: Record<string, JsonObject> = {
  // GQA 2:1, top 2 of 8, every detail at sizes a test runs in milliseconds
  'mixtral-tiny': {
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    intermediate_size: 48,
    num_local_experts: 8,
    num_experts_per_tok: 2,
    max_position_embeddings: 4096,
  },
  // the releases' real widths (use --layers and --experts to fit a disk), from their config.json
  'mixtral-8x7b': {
    vocab_size: 32000,
    hidden_size: 4096,
    num_hidden_layers: 32,
    num_attention_heads: 32,
    num_key_value_heads: 8,
    intermediate_size: 14336,
    num_local_experts: 8,
    num_experts_per_tok: 2,
    max_position_embeddings: 32768,
  },
  'mixtral-8x22b': {
    vocab_size: 32768,
    hidden_size: 6144,
    num_hidden_layers: 56,
    num_attention_heads: 48,
    num_key_value_heads: 8,
    intermediate_size: 16384,
    num_local_experts: 8,
    num_experts_per_tok: 2,
    max_position_embeddings: 65536,
  },
};

/** Mistral's instruction format as the synthetic tokenizer carries it: `<s>[INST] user [/INST]assistant</s>`. */
export const MIXTRAL_TEMPLATE =
  "{{- '<s>' }}{%- for message in messages %}{%- if message.role == 'user' or message.role == 'system' %}{{- '[INST] ' + message.content + ' [/INST]' }}{%- elif message.role == 'assistant' %}{{- message.content + '</s>' }}{%- endif %}{%- endfor %}";

const SPECIALS = ['<unk>', '<s>', '</s>', '[INST]', '[/INST]'];

function mixtralConfig(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = { ...COMMON, ...structuredClone(SHAPES[shape]) };
  if (o.layers !== undefined) cfg.num_hidden_layers = o.layers;
  if (o.experts !== undefined) {
    cfg.num_local_experts = o.experts;
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, o.experts);
  }
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

/** Mixtral's synthetic models. */
export const mixtralSynth: FamilySynth<TransformerConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['mixtral-8x7b', 'mixtral-8x22b'],
  config: mixtralConfig,
  prefix: () => '',
  tensors: (cfg) => transformerTensors(cfg, MIXTRAL_NAMES),
  specials: () => SPECIALS,
  ids(flat, id) {
    if (!id) return;
    flat.bos_token_id = id('<s>');
    flat.eos_token_id = id('</s>');
  },
  containerFiles: (): Record<string, string> => ({ 'chat_template.jinja': MIXTRAL_TEMPLATE }),
  manifestArch: () => 'mixtral',
  checkpoint: (flat) => ({ config: flat, prefix: '', experts: 'bf16', extra: [], files: {}, chatTemplate: MIXTRAL_TEMPLATE }),
};
