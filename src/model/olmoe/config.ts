import { WasteError, unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import { parseRope } from '../blocks/rope.js';
import { type TransformerConfig, archNameOf, moeLayerKinds, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;

/**
 * OLMoE's config (`olmoe`: OLMoE-1B-7B-0924 and -0125, base and Instruct), every key bounded.
 * Attention (MHA in the releases; GQA allowed) with q_norm/k_norm RMSNorms over the WHOLE q and k
 * projections (weights [heads·headDim], [kvHeads·headDim]) before the split into heads, then
 * `clip_qkv` (null: none) clamping q, k and v, then RoPE; q/k/v/o biases when `attention_bias`;
 * head_dim is hidden_size / num_attention_heads. Every layer MoE: a softmax over all
 * `num_experts` logits, the top `num_experts_per_tok` renormalised only when `norm_topk_prob`
 * (HF's default and the releases': false), experts of width `intermediate_size`, no shared expert.
 * HF's defaults are the releases' values here, so no key beyond the shapes is required by name.
 */
export function parseOlmoeConfig(cfg: Fields): TransformerConfig {
  const type = cfg.str('model_type', undefined, 64);
  if (type !== 'olmoe') throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(type)} given to the OLMoE parser`);
  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (OLMoE computes silu)`);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const layers = cfg.int('num_hidden_layers', 1, 1024);
  const vocab = cfg.int('vocab_size', 1, 1 << 22);
  const heads = cfg.int('num_attention_heads', 1, 1024);
  const kvHeads = cfg.int('num_key_value_heads', 1, heads, heads);
  if (heads % kvHeads) throw new WasteError('E_FORMAT', `${cfg.file}: num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads})`);
  if (hidden % heads) throw cfg.fail('hidden_size', `must be a multiple of num_attention_heads (${heads}): OLMoE's head_dim is their quotient`, hidden);
  const headDim = hidden / heads;
  // HF's OLMoE has no head_dim key (older versions ignore one, newer read it): only the quotient is unambiguous
  if (cfg.given('head_dim') && cfg.int('head_dim', 2, 1024) !== headDim) throw cfg.fail('head_dim', `must be hidden_size / num_attention_heads (${headDim}) if given`, cfg.raw('head_dim'));
  if (headDim < 2) throw cfg.fail('hidden_size', `/ num_attention_heads must be at least 2`, hidden);
  const eps = cfg.num('rms_norm_eps', 0, 1, 1e-5, true);
  const experts = cfg.int('num_experts', 1, 65536, 64);
  const topK = cfg.int('num_experts_per_tok', 1, experts, Math.min(8, experts));
  const inter = cfg.int('intermediate_size', 1, BIG);
  const renormalize = cfg.bool('norm_topk_prob', false);
  const clip = cfg.num('clip_qkv', 0, 1e6, 0, true);
  const rope = parseRope(cfg, headDim, { theta: 10000 });
  const bias = cfg.bool('attention_bias', false);
  const layerKinds = moeLayerKinds(layers, () => true);
  return {
    arch: 'olmoe',
    archName: archNameOf(cfg, 'olmoe'),
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts, topK, inter, shared: 0, firstDense: 0, routedScale: 1, renormalize },
    expertWidth: hidden,
    ...tokenIds(cfg, vocab),
    attention: { heads, kvHeads, headDim, qkNorm: 'whole', clip, scale: 1 / Math.sqrt(headDim), eps },
    rope,
    // OLMoE attends over every position (its config has no window)
    windows: layerKinds.map(() => 0),
    act: { kind: 'silu' },
    denseInter: 0,
    router: { scoring: 'softmax', topK, renormalize, scale: 1 },
    sharedInter: 0,
    tieEmbeddings: cfg.bool('tie_word_embeddings', false),
    bias: { qkv: bias, o: bias },
    sinks: false,
    expertBias: false,
    skippedLayers: 0,
  };
}
