import { WasteError, unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import { parseRope } from '../blocks/rope.js';
import { type TransformerConfig, archNameOf, moeLayerKinds, requiredBool, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;

/**
 * GLM-4.5's config (`glm4_moe`: GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7), every key bounded. GQA
 * with q/k/v biases when `attention_bias` (o_proj never has one), per-head q/k RMSNorm when
 * `use_qk_norm`, RoPE on the first ⌊head_dim · partial_rotary_factor⌋ dims of each head (default
 * 0.5) in rotate_half pairs (i, i + R/2); a sigmoid router whose top k are chosen on score +
 * `e_score_correction_bias` within the best `topk_group` of `n_group` groups, weighted by the
 * unbiased scores (renormalised when `norm_topk_prob`) times `routed_scaling_factor`; a shared
 * expert of `n_shared_experts · moe_intermediate_size`; the first `first_k_dense_replace` layers
 * dense; `num_nextn_predict_layers` MTP layers after the last, never read. Keys that size the
 * model, whose HF default differs from another reading (head_dim, num_key_value_heads), or is not
 * every release's value (rope_theta, attention_bias, use_qk_norm, routed_scaling_factor,
 * first_k_dense_replace) are required by name; the rest take HF's defaults, which every release
 * states (rms_norm_eps 1e-5, partial_rotary_factor 0.5, n_group and topk_group 1, norm_topk_prob,
 * one shared expert, untied head).
 */
export function parseGlm4MoeConfig(cfg: Fields): TransformerConfig {
  const type = cfg.str('model_type', undefined, 64);
  if (type !== 'glm4_moe') throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(type)} given to the GLM-4.5 parser`);
  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (GLM-4.5 computes silu)`);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const layers = cfg.int('num_hidden_layers', 1, 1024);
  const vocab = cfg.int('vocab_size', 1, 1 << 22);
  const heads = cfg.int('num_attention_heads', 1, 1024);
  const kvHeads = cfg.int('num_key_value_heads', 1, heads);
  if (heads % kvHeads) throw new WasteError('E_FORMAT', `${cfg.file}: num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads})`);
  const headDim = cfg.int('head_dim', 2, 1024);
  const eps = cfg.num('rms_norm_eps', 0, 1, 1e-5, true);
  const experts = cfg.int('n_routed_experts', 1, 65536);
  const topK = cfg.int('num_experts_per_tok', 1, experts);
  const moeInter = cfg.int('moe_intermediate_size', 1, BIG);
  const renormalize = cfg.bool('norm_topk_prob', true);
  const nGroup = cfg.int('n_group', 1, experts, 1);
  if (experts % nGroup || (nGroup > 1 && experts / nGroup < 2))
    throw new WasteError('E_FORMAT', `${cfg.file}: n_routed_experts (${experts}) must split into n_group (${nGroup}) groups of at least 2`);
  const keep = cfg.int('topk_group', 1, nGroup, 1);
  if (keep * (experts / nGroup) < topK) throw new WasteError('E_FORMAT', `${cfg.file}: topk_group (${keep}) groups of ${experts / nGroup} experts hold fewer than num_experts_per_tok (${topK})`);
  if (!cfg.given('routed_scaling_factor')) throw cfg.fail('routed_scaling_factor', "is required (HF's default is 1, GLM-4.5's 2.5)");
  const scale = cfg.num('routed_scaling_factor', 0, 1000, undefined, true);
  const nShared = cfg.int('n_shared_experts', 0, 64, 1);
  if (!cfg.given('first_k_dense_replace')) throw cfg.fail('first_k_dense_replace', "is required (HF's default is 1, GLM-4.5's 3)");
  const firstDense = cfg.int('first_k_dense_replace', 0, layers);
  const mtp = cfg.int('num_nextn_predict_layers', 0, 16, 0);
  const layerKinds = moeLayerKinds(layers, (L) => L >= firstDense);
  const denseInter = firstDense > 0 ? cfg.int('intermediate_size', 1, BIG) : cfg.int('intermediate_size', 0, BIG, 0);
  if (!cfg.given('rope_theta') && !cfg.given('rope_parameters')) throw cfg.fail('rope_theta', "is required (HF's default, 10000, is not the releases' 1000000)");
  const rope = parseRope(cfg, headDim, { theta: 10000, partialRotary: 0.5, pairs: 'half' });
  const bias = requiredBool(cfg, 'attention_bias', "HF's default is false, the releases say true");
  const qkNorm = requiredBool(cfg, 'use_qk_norm', 'GLM-4.5 says true, GLM-4.5-Air false');
  return {
    arch: 'glm4-moe',
    archName: archNameOf(cfg, 'glm4_moe'),
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts, topK, inter: moeInter, shared: nShared, firstDense, routedScale: scale, renormalize },
    expertWidth: hidden,
    ...tokenIds(cfg, vocab),
    attention: { heads, kvHeads, headDim, qkNorm: qkNorm ? 'head' : 'none', clip: 0, scale: 1 / Math.sqrt(headDim), eps },
    rope,
    windows: layerKinds.map(() => 0),
    act: { kind: 'silu' },
    denseInter,
    router: { scoring: 'sigmoid', topK, renormalize, scale, groups: { count: nGroup, keep } },
    sharedInter: nShared * moeInter,
    tieEmbeddings: cfg.bool('tie_word_embeddings', false),
    bias: { qkv: bias, o: false },
    sinks: false,
    expertBias: false,
    skippedLayers: mtp,
  };
}
