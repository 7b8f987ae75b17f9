import { Fields, type JsonObject } from '../../util/fields.js';
import type { FamilySynth, SynthExtraTensor, SynthShapeOptions, SynthTensor } from '../synth.js';
import type { TransformerConfig } from '../transformer/config.js';
import { transformerTensors } from '../transformer/synth.js';
import { parseGlm4MoeConfig } from './config.js';
import { GLM4_MOE_NAMES } from './names.js';

const COMMON: JsonObject = {
  model_type: 'glm4_moe',
  architectures: ['Glm4MoeForCausalLM'],
  hidden_act: 'silu',
  attention_bias: true,
  attention_dropout: 0.0,
  rms_norm_eps: 1e-5,
  rope_theta: 1000000.0,
  rope_scaling: null,
  partial_rotary_factor: 0.5,
  norm_topk_prob: true,
  n_group: 1,
  topk_group: 1,
  n_shared_experts: 1,
  num_nextn_predict_layers: 1,
  tie_word_embeddings: false,
  pad_token_id: 151329,
  eos_token_id: [151329, 151336, 151338],
};

const SHAPES: Record<string, JsonObject> = {
  // every detail at sizes a test runs in milliseconds: 8 experts in 4 groups of which 2 are kept
  // (so the group limit changes the choice), a dense first layer, a shared expert, q/k norms,
  // 8 of 16 head dims rotated, and one MTP layer in the checkpoint that is never read
  'glm4-moe-tiny': {
    vocab_size: 320,
    hidden_size: 64,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    intermediate_size: 96,
    moe_intermediate_size: 32,
    n_routed_experts: 8,
    num_experts_per_tok: 2,
    n_group: 4,
    topk_group: 2,
    routed_scaling_factor: 2.5,
    first_k_dense_replace: 1,
    use_qk_norm: true,
    max_position_embeddings: 4096,
  },
  // the releases' real widths (use --layers and --experts to fit a disk), from their config.json
  // as the slime project's model scripts restate them (glm4.5-355B-A32B.sh, glm4.5-106B-A12B.sh);
  // GLM-4.6 and 4.7 are GLM-4.5's widths with max_position_embeddings 202752
  'glm-4.5': {
    vocab_size: 151552,
    hidden_size: 5120,
    num_hidden_layers: 92,
    num_attention_heads: 96,
    num_key_value_heads: 8,
    head_dim: 128,
    intermediate_size: 12288,
    moe_intermediate_size: 1536,
    n_routed_experts: 160,
    num_experts_per_tok: 8,
    routed_scaling_factor: 2.5,
    first_k_dense_replace: 3,
    use_qk_norm: true,
    max_position_embeddings: 131072,
  },
  'glm-4.5-air': {
    vocab_size: 151552,
    hidden_size: 4096,
    num_hidden_layers: 46,
    num_attention_heads: 96,
    num_key_value_heads: 8,
    head_dim: 128,
    intermediate_size: 10944,
    moe_intermediate_size: 1408,
    n_routed_experts: 128,
    num_experts_per_tok: 8,
    routed_scaling_factor: 1.0,
    first_k_dense_replace: 1,
    use_qk_norm: false,
    max_position_embeddings: 131072,
  },
};

function glmConfig(shape: string, o: SynthShapeOptions): JsonObject {
  const cfg: JsonObject = { ...COMMON, ...structuredClone(SHAPES[shape]) };
  if (o.layers !== undefined) {
    cfg.num_hidden_layers = o.layers;
    cfg.first_k_dense_replace = Math.min(cfg.first_k_dense_replace as number, o.layers);
  }
  if (o.experts !== undefined) {
    cfg.n_routed_experts = o.experts;
    cfg.num_experts_per_tok = Math.min(cfg.num_experts_per_tok as number, o.experts);
    // groups that no longer divide the experts: ungrouped
    if (o.experts % (cfg.n_group as number)) (cfg.n_group = 1), (cfg.topk_group = 1);
  }
  return Object.assign(cfg, structuredClone(o.config ?? {}));
}

/**
 * The MTP layers past the last (model.layers.{layers + k}: a MoE decoder layer, eh_proj, enorm,
 * hnorm, shared_head.norm), as a checkpoint holds them: the model never reads them.
 */
function* mtpTensors(cfg: TransformerConfig): Generator<SynthExtraTensor> {
  const n = cfg.skippedLayers;
  if (!n) return;
  const H = cfg.hidden;
  const wide: TransformerConfig = { ...cfg, layers: cfg.layers + n, layerKinds: [...cfg.layerKinds, ...Array.from({ length: n }, () => ({ attn: 'attention', ffn: 'moe' as const }))], tieEmbeddings: true };
  for (const t of transformerTensors(wide, GLM4_MOE_NAMES)) {
    const m = /^model\.layers\.(\d+)\./.exec(t.name);
    if (!m || Number(m[1]) < cfg.layers) continue;
    if (t.kind === 'matrix') yield { name: t.name, shape: [t.rows, t.cols], std: t.std };
    else yield { name: t.name, shape: t.shape, std: (t.hi - t.lo) / 4, mean: (t.hi + t.lo) / 2 };
  }
  for (let k = 0; k < n; k++) {
    const p = `model.layers.${cfg.layers + k}.`;
    yield { name: `${p}eh_proj.weight`, shape: [H, 2 * H], std: 1 / Math.sqrt(2 * H) };
    for (const v of ['enorm', 'hnorm', 'shared_head.norm']) yield { name: `${p}${v}.weight`, shape: [H], std: 0.05, mean: 1 };
  }
}

/**
 * The model's tensors, with two of GLM's own: the routed experts' down projections drawn
 * 1/routed_scaling_factor as wide (a trained model's experts are sized for the factor; random ones
 * scaled by 2.5 would drown the residual stream), and the correction bias drawn in ±0.5, so that
 * it can make a kept expert's selection score negative — where HF's dropped groups, masked to 0,
 * outrank it (DeepSeek's own code masks them to −∞).
 */
function* glmTensors(cfg: TransformerConfig): Generator<SynthTensor> {
  for (const t of transformerTensors(cfg, GLM4_MOE_NAMES)) {
    if (t.kind === 'matrix' && t.expert && t.name.endsWith('.down_proj.weight')) yield { ...t, std: t.std / cfg.router.scale };
    else if (t.kind === 'vector' && t.name.endsWith('.e_score_correction_bias')) yield { ...t, lo: -0.5, hi: 0.5 };
    else yield t;
  }
}

/** GLM-4.5's turns, as much of its template as synthetic models need: [gMASK]<sop>, then <|role|>\n and the text. */
export const GLM4_TEMPLATE =
  "[gMASK]<sop>{%- for message in messages %}{{- '<|' + message.role + '|>\\n' + message.content }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}";

const GLM4_SPECIALS = ['<|endoftext|>', '[MASK]', '[gMASK]', '[sMASK]', '<sop>', '<eop>', '<|system|>', '<|user|>', '<|assistant|>', '<|observation|>'];

/** GLM-4.5's synthetic models. */
export const glm4MoeSynth: FamilySynth<TransformerConfig> = {
  shapes: Object.keys(SHAPES),
  realShapes: ['glm-4.5', 'glm-4.5-air'],
  config: glmConfig,
  prefix: () => '',
  tensors: glmTensors,
  specials: () => GLM4_SPECIALS,
  ids(flat, id) {
    if (!id) return;
    flat.pad_token_id = id('<|endoftext|>');
    flat.eos_token_id = ['<|endoftext|>', '<|user|>', '<|observation|>'].map((t) => id(t));
  },
  containerFiles: (): Record<string, string> => ({ 'chat_template.jinja': GLM4_TEMPLATE }),
  manifestArch: () => 'glm4_moe',
  checkpoint: (flat) => ({ config: flat, prefix: '', experts: 'bf16', extra: mtpTensors(parseGlm4MoeConfig(Fields.root('synthetic config', flat))), files: {}, chatTemplate: GLM4_TEMPLATE }),
};
