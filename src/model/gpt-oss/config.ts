import { WasteError, unsupported } from '../../util/errors.js';
import { Fields } from '../../util/fields.js';
import { parseRope } from '../blocks/rope.js';
import { type TransformerConfig, archNameOf, moeLayerKinds, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;

/** HF's GptOssConfig rope default (the releases say the same outright). */
const YARN_DEFAULT = { rope_type: 'yarn', factor: 32.0, beta_fast: 32.0, beta_slow: 1.0, truncate: false, original_max_position_embeddings: 4096 };

/**
 * gpt-oss's config (`gpt_oss`: gpt-oss-20b, gpt-oss-120b), every key bounded, HF's class defaults
 * where a key is absent and the default is both releases' value (`num_local_experts` is required). GQA with biases on q/k/v/o (`attention_bias`, default true), a learned
 * sink logit per head in every softmax, each layer's window from `layer_types` (sliding_attention:
 * `sliding_window`, full_attention: every position; default sliding on even layers), YaRN RoPE
 * (θ 150000, factor 32, β 32/1, truncate false), every layer MoE: a router with a bias whose top
 * k logits are softmaxed, experts with biases and the clamped GLU (`swiglu_limit` 7, α 1.702).
 */
export function parseGptOssConfig(cfg: Fields): TransformerConfig {
  const type = cfg.str('model_type', undefined, 64);
  if (type !== 'gpt_oss') throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(type)} given to the gpt-oss parser`);
  // the releases say silu; the experts compute the clamped GLU whatever it says (HF does not read it)
  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (gpt-oss computes its clamped SiLU GLU)`);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const layers = cfg.int('num_hidden_layers', 1, 1024);
  const vocab = cfg.int('vocab_size', 1, 1 << 22);
  const heads = cfg.int('num_attention_heads', 1, 1024);
  const kvHeads = cfg.int('num_key_value_heads', 1, heads);
  if (heads % kvHeads) throw new WasteError('E_FORMAT', `${cfg.file}: num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads})`);
  const headDim = cfg.int('head_dim', 2, 1024, 64);
  const eps = cfg.num('rms_norm_eps', 0, 1, 1e-5, true);
  // HF's default (128) is the 120b's, not the 20b's (32): required by name
  const experts = cfg.int('num_local_experts', 1, 65536);
  const topK = cfg.int('num_experts_per_tok', 1, experts, Math.min(4, experts));
  const inter = cfg.int('intermediate_size', 1, BIG);
  const limit = cfg.num('swiglu_limit', 0, 1e6, 7.0, true);
  const alpha = cfg.num('swiglu_alpha', 0, 1e3, 1.702, true);
  const window = cfg.int('sliding_window', 1, 1 << 24, 128);
  let types: string[];
  if (cfg.given('layer_types')) {
    const list = cfg.array('layer_types', 1024);
    if (list.length !== layers) throw cfg.fail('layer_types', `must list one type per layer (${layers}), not ${list.length}`);
    types = list.map((t, i) => {
      if (t !== 'sliding_attention' && t !== 'full_attention') throw cfg.fail(`layer_types[${i}]`, 'must be "sliding_attention" or "full_attention"', t);
      return t;
    });
  } else types = Array.from({ length: layers }, (_, L) => (L % 2 === 0 ? 'sliding_attention' : 'full_attention'));
  const scaling = cfg.given('rope_parameters') || cfg.given('rope_scaling') ? undefined : Fields.root(`${cfg.file} (gpt-oss's default rope_scaling)`, YARN_DEFAULT);
  const rope = parseRope(cfg, headDim, { theta: 150000, scaling });
  const bias = cfg.bool('attention_bias', true);
  const layerKinds = moeLayerKinds(layers, () => true);
  return {
    arch: 'gpt-oss',
    archName: archNameOf(cfg, 'gpt_oss'),
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts, topK, inter, shared: 0, firstDense: 0, routedScale: 1, renormalize: false },
    expertWidth: hidden,
    ...tokenIds(cfg, vocab),
    attention: { heads, kvHeads, headDim, qkNorm: 'none', clip: 0, scale: 1 / Math.sqrt(headDim), eps },
    rope,
    windows: types.map((t) => (t === 'sliding_attention' ? window : 0)),
    act: { kind: 'clamped', alpha, limit },
    denseInter: 0,
    router: { scoring: 'softmax-topk', topK, renormalize: false, scale: 1 },
    sharedInter: 0,
    tieEmbeddings: cfg.bool('tie_word_embeddings', false),
    bias: { qkv: bias, o: bias },
    sinks: true,
    expertBias: true,
    skippedLayers: 0,
  };
}
