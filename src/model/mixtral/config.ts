import { WasteError, unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import { parseRope } from '../blocks/rope.js';
import { type TransformerConfig, archNameOf, moeLayerKinds, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;

/**
 * Mixtral's config (`mixtral`: Mixtral-8x7B-Instruct-v0.1, 8x22B-Instruct-v0.1), every key
 * bounded. GQA without biases or q/k norms, RoPE (θ from `rope_theta`, HF's default 1e6), an
 * optional `sliding_window` on every layer (null: none), every layer MoE: a softmax over all
 * `num_local_experts` router logits, the top `num_experts_per_tok` always renormalised to sum to 1
 * (HF has no flag for it), experts of width `intermediate_size`. HF's defaults are the releases'
 * values here, so no key beyond the shapes is required by name.
 */
export function parseMixtralConfig(cfg: Fields): TransformerConfig {
  const type = cfg.str('model_type', undefined, 64);
  if (type !== 'mixtral') throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(type)} given to the Mixtral parser`);
  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (Mixtral computes silu)`);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const layers = cfg.int('num_hidden_layers', 1, 1024);
  const vocab = cfg.int('vocab_size', 1, 1 << 22);
  const heads = cfg.int('num_attention_heads', 1, 1024);
  const kvHeads = cfg.int('num_key_value_heads', 1, heads, heads);
  if (heads % kvHeads) throw new WasteError('E_FORMAT', `${cfg.file}: num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads})`);
  // HF: head_dim when given, else hidden_size / num_attention_heads
  if (!cfg.given('head_dim') && hidden % heads) throw cfg.fail('hidden_size', `must be a multiple of num_attention_heads (${heads}) when head_dim is not given`, hidden);
  const headDim = cfg.int('head_dim', 2, 1024, hidden / heads);
  const eps = cfg.num('rms_norm_eps', 0, 1, 1e-5, true);
  const experts = cfg.int('num_local_experts', 1, 65536, 8);
  const topK = cfg.int('num_experts_per_tok', 1, experts, Math.min(2, experts));
  const inter = cfg.int('intermediate_size', 1, BIG);
  const rope = parseRope(cfg, headDim, { theta: 1e6 });
  const window = cfg.int('sliding_window', 1, 1 << 24, 0);
  const layerKinds = moeLayerKinds(layers, () => true);
  return {
    arch: 'mixtral',
    archName: archNameOf(cfg, 'mixtral'),
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts, topK, inter, shared: 0, firstDense: 0, routedScale: 1, renormalize: true },
    expertWidth: hidden,
    ...tokenIds(cfg, vocab),
    attention: { heads, kvHeads, headDim, qkNorm: 'none', clip: 0, scale: 1 / Math.sqrt(headDim), eps },
    rope,
    windows: layerKinds.map(() => window),
    act: { kind: 'silu' },
    denseInter: 0,
    router: { scoring: 'softmax', topK, renormalize: true, scale: 1 },
    sharedInter: 0,
    tieEmbeddings: cfg.bool('tie_word_embeddings', false),
    // MixtralAttention's projections never carry biases (attention_bias is not read)
    bias: { qkv: false, o: false },
    sinks: false,
    expertBias: false,
    skippedLayers: 0,
  };
}
