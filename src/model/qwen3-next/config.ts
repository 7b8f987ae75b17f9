import type { LayerKind } from '../../core/model-config.js';
import { WasteError, unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import type { GdnShape } from '../blocks/gated-deltanet.js';
import { parseRope } from '../blocks/rope.js';
import { type TransformerConfig, archNameOf, requiredBool, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;

/** The HF model types this folder runs: Qwen3-Next, Qwen3.5's MoE releases (wrapped), and their text-only form. */
export const QWEN3_NEXT_TYPES = ['qwen3_next', 'qwen3_5_moe', 'qwen3_5_moe_text'] as const;

/**
 * Qwen3-Next's language model: the transformer's pieces plus, on the layers `layerKinds` marks
 * 'gdn', Gated DeltaNet in place of attention. Every RMSNorm but the DeltaNet's output norm is
 * zero-centred ((1 + w)·x̂, the weights shifted at load); attention's q_proj carries an output gate;
 * the shared expert is gated by σ(shared_expert_gate · x).
 */
export interface Qwen3NextConfig extends TransformerConfig {
  gdn: GdnShape;
  /** The family as its config names it (the reference's tensor layout follows it). */
  family: 'qwen3_next' | 'qwen3_5_moe';
  /** The release has a vision tower (a `vision_config` beside the text model's), which this build does not run. */
  unrunTower: boolean;
}

/** The text model's keys: the config itself, or a Qwen3.5 wrapper's `text_config`. */
export function qwen3NextText(cfg: Fields): Fields {
  return cfg.given('model_type') && cfg.raw('model_type') === 'qwen3_5_moe' && cfg.given('text_config') ? cfg.object('text_config') : cfg;
}

/**
 * Qwen3-Next's config (`qwen3_next`: Qwen3-Next-80B-A3B) and Qwen3.5 MoE's (`qwen3_5_moe`, its
 * language model under `text_config` beside a vision tower this build does not run; or the flat
 * `qwen3_5_moe_text`), every key bounded. Keys whose HF default is not what every release states
 * are required by name.
 */
export function parseQwen3NextConfig(cfg: Fields): Qwen3NextConfig {
  const top = cfg.str('model_type', undefined, 64);
  if (!(QWEN3_NEXT_TYPES as readonly string[]).includes(top)) throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(top)} given to the Qwen3-Next parser`);
  const family = top === 'qwen3_next' ? 'qwen3_next' : 'qwen3_5_moe';
  const t = qwen3NextText(cfg);
  if (top === 'qwen3_5_moe' && t === cfg) throw cfg.fail('text_config', 'is required (a qwen3_5_moe config nests its language model there)');
  if (t !== cfg) {
    const inner = t.str('model_type', 'qwen3_5_moe_text', 64);
    if (inner !== 'qwen3_5_moe_text') throw t.fail('model_type', 'must be "qwen3_5_moe_text"', inner);
  }
  const act = t.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${t.file}: hidden_act "${act}" (Qwen3-Next computes silu)`);
  const hidden = t.int('hidden_size', 1, 65536);
  const layers = t.int('num_hidden_layers', 1, 1024);
  const vocab = t.int('vocab_size', 1, 1 << 22);
  const heads = t.int('num_attention_heads', 1, 1024);
  const kvHeads = t.int('num_key_value_heads', 1, heads);
  if (heads % kvHeads) throw new WasteError('E_FORMAT', `${t.file}: num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kvHeads})`);
  const headDim = t.int('head_dim', 2, 1024);
  const eps = t.num('rms_norm_eps', 0, 1, undefined, true);
  if (t.given('attn_output_gate') && !t.bool('attn_output_gate', true)) throw unsupported(`${t.file}: attn_output_gate false (this build computes the gated attention every release has)`);
  // the layer pattern: layer_types, else full attention on every `full_attention_interval`-th layer
  let kinds: string[];
  if (t.given('layer_types')) {
    const raw = t.array('layer_types', 4096);
    if (raw.length < layers) throw t.fail('layer_types', `must name at least num_hidden_layers (${layers}) layers`, raw.length);
    kinds = raw.slice(0, layers).map((x, i) => {
      const k = x === 'attention' ? 'full_attention' : x === 'mamba' ? 'linear_attention' : x;
      if (k !== 'full_attention' && k !== 'linear_attention') throw t.fail('layer_types', `[${i}] must be "linear_attention" or "full_attention"`, x);
      return k;
    });
  } else {
    const every = t.int('full_attention_interval', 1, layers, 4);
    kinds = Array.from({ length: layers }, (_, L) => ((L + 1) % every ? 'linear_attention' : 'full_attention'));
  }
  // Gated DeltaNet
  const kHeads = t.int('linear_num_key_heads', 1, 1024);
  const vHeads = t.int('linear_num_value_heads', 1, 4096);
  if (vHeads % kHeads) throw new WasteError('E_FORMAT', `${t.file}: linear_num_value_heads (${vHeads}) must be a multiple of linear_num_key_heads (${kHeads})`);
  const dk = t.int('linear_key_head_dim', 1, 1024);
  const dv = t.int('linear_value_head_dim', 1, 1024);
  if (dk !== dv) throw unsupported(`${t.file}: linear_key_head_dim ${dk} ≠ linear_value_head_dim ${dv} (this build's DeltaNet state is square per head, as every release's is)`);
  const convKernel = t.int('linear_conv_kernel_dim', 1, 64);
  // MoE: softmax top-k with a gated shared expert; Qwen3.5's router always renormalises
  const experts = t.int('num_experts', 1, 65536);
  const topK = t.int('num_experts_per_tok', 1, experts);
  const moeInter = t.int('moe_intermediate_size', 1, BIG);
  const sharedInter = t.int('shared_expert_intermediate_size', 1, BIG);
  let renormalize = true;
  let moeAt = (_L: number) => true;
  if (family === 'qwen3_next') {
    renormalize = requiredBool(t, 'norm_topk_prob', "HF's Qwen3-Next default is true; said by name");
    const step = t.int('decoder_sparse_step', 1, layers, 1);
    const mlpOnly = new Set(t.intList('mlp_only_layers', 0, layers - 1, layers) ?? []);
    moeAt = (L) => !mlpOnly.has(L) && (L + 1) % step === 0;
  } else if (t.given('norm_topk_prob') && !t.bool('norm_topk_prob', true)) throw t.fail('norm_topk_prob', "is false, but Qwen3.5's router always renormalises");
  const layerKinds: LayerKind[] = kinds.map((k, L) => ({ attn: k === 'linear_attention' ? 'gdn' : 'attention', ffn: moeAt(L) ? 'moe' : 'dense' }));
  const anyDense = layerKinds.some((k) => k.ffn === 'dense');
  const denseInter = anyDense ? t.int('intermediate_size', 1, BIG) : 0;
  if (!t.given('rope_theta') && !(t.given('rope_parameters') && t.object('rope_parameters').given('rope_theta')))
    throw t.fail('rope_theta', "is required (HF's default, 10000, is not the releases')");
  const rope = parseRope(t, headDim, { theta: 10000, partialRotary: 0.25 });
  const bias = t.bool('attention_bias', false);
  const tieKey = cfg.given('tie_word_embeddings') ? cfg : t;
  const outer = t === cfg && cfg.given('_outer') && typeof cfg.raw('_outer') === 'object' && !Array.isArray(cfg.raw('_outer')) ? cfg.object('_outer') : t === cfg ? undefined : cfg;
  const unrunTower = outer?.given('vision_config') ?? false;
  return {
    arch: 'qwen3-next',
    archName: archNameOf(cfg, top),
    family,
    unrunTower,
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts, topK, inter: moeInter, shared: 1, firstDense: Math.max(0, layerKinds.findIndex((k) => k.ffn === 'moe')), routedScale: 1, renormalize },
    expertWidth: hidden,
    ...tokenIds(t.given('eos_token_id') ? t : cfg, vocab),
    attention: { heads, kvHeads, headDim, qkNorm: 'head', clip: 0, scale: 1 / Math.sqrt(headDim), eps },
    rope,
    windows: layerKinds.map(() => 0),
    act: { kind: 'silu' },
    denseInter,
    router: { scoring: 'softmax', topK, renormalize, scale: 1 },
    sharedInter,
    tieEmbeddings: tieKey.bool('tie_word_embeddings', false),
    bias: { qkv: bias, o: bias },
    sinks: false,
    expertBias: false,
    skippedLayers: 0,
    gdn: { kHeads, vHeads, headDim: dk, convKernel, packing: family === 'qwen3_next' ? 'grouped' : 'split' },
  };
}
