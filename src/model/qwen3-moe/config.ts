import { WasteError, unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import { parseRope } from '../blocks/rope.js';
import { type TransformerConfig, archNameOf, moeLayerKinds, requiredBool, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;

/**
 * Qwen3-MoE's config (`qwen3_moe`: Qwen3-30B-A3B, 235B-A22B, Qwen3-Coder-480B-A35B), every key
 * bounded. GQA with q/k RMSNorm per head before RoPE, q/k/v/o biases when `attention_bias`, a
 * softmax router whose top k are renormalised when `norm_topk_prob`, no shared expert; layer L is
 * MoE unless it is in `mlp_only_layers` or (L + 1) is not a multiple of `decoder_sparse_step`.
 * Keys whose HF default is not what the releases state (head_dim, norm_topk_prob, rope_theta,
 * rms_norm_eps) are required by name.
 */
export function parseQwen3MoeConfig(cfg: Fields): TransformerConfig {
  const type = cfg.str('model_type', undefined, 64);
  if (type !== 'qwen3_moe') throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(type)} given to the Qwen3-MoE parser`);
  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (Qwen3-MoE computes silu)`);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const layers = cfg.int('num_hidden_layers', 1, 1024);
  const vocab = cfg.int('vocab_size', 1, 1 << 22);
  const heads = cfg.int('num_attention_heads', 1, 1024);
  const kvHeads = cfg.int('num_key_value_heads', 1, heads);
  if (heads % kvHeads) throw new WasteError('E_FORMAT', `${cfg.file}: num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads})`);
  const headDim = cfg.int('head_dim', 2, 1024);
  const eps = cfg.num('rms_norm_eps', 0, 1, undefined, true);
  const experts = cfg.int('num_experts', 1, 65536);
  const topK = cfg.int('num_experts_per_tok', 1, experts);
  const moeInter = cfg.int('moe_intermediate_size', 1, BIG);
  const renormalize = requiredBool(cfg, 'norm_topk_prob', "HF's default is false, the releases say true");
  const step = cfg.int('decoder_sparse_step', 1, layers, 1);
  const mlpOnly = new Set(cfg.intList('mlp_only_layers', 0, layers - 1, layers) ?? []);
  const layerKinds = moeLayerKinds(layers, (L) => !mlpOnly.has(L) && (L + 1) % step === 0);
  const anyDense = layerKinds.some((k) => k.ffn === 'dense');
  const denseInter = anyDense ? cfg.int('intermediate_size', 1, BIG) : cfg.int('intermediate_size', 0, BIG, 0);
  if (!cfg.given('rope_theta') && !cfg.given('rope_parameters')) throw cfg.fail('rope_theta', "is required (HF's default, 10000, is not the releases' 1000000)");
  const rope = parseRope(cfg, headDim, { theta: 10000 });
  const window = cfg.bool('use_sliding_window', false) ? cfg.int('sliding_window', 1, 1 << 24) : 0;
  const bias = cfg.bool('attention_bias', false);
  return {
    arch: 'qwen3-moe',
    archName: archNameOf(cfg, 'qwen3_moe'),
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts, topK, inter: moeInter, shared: 0, firstDense: Math.max(0, layerKinds.findIndex((k) => k.ffn === 'moe')), routedScale: 1, renormalize },
    expertWidth: hidden,
    ...tokenIds(cfg, vocab),
    attention: { heads, kvHeads, headDim, qkNorm: 'head', clip: 0, scale: 1 / Math.sqrt(headDim), eps },
    rope,
    windows: layerKinds.map(() => window),
    act: { kind: 'silu' },
    denseInter,
    router: { scoring: 'softmax', topK, renormalize, scale: 1 },
    sharedInter: 0,
    tieEmbeddings: cfg.bool('tie_word_embeddings', false),
    bias: { qkv: bias, o: bias },
    sinks: false,
    expertBias: false,
    skippedLayers: 0,
  };
}
