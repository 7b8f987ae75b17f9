import type { ModelConfig } from '../../core/model-config.js';
import { WasteError, unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import { type RopeConfig, parseRope, yarnMscale } from '../blocks/rope.js';
import type { RouterConfig } from '../blocks/router.js';
import { archNameOf, tokenIds } from '../transformer/config.js';

const BIG = 1 << 20;
const MAX_LAYERS = 1024;

/**
 * DeepSeek-V3's architecture (`deepseek_v3`: DeepSeek-V3, V3.1, R1; `kimi_k2`: Kimi K2, K2-Thinking):
 * multi-head latent attention with a compressed query and decoupled RoPE heads, YaRN, a sigmoid
 * router with a selection-only correction bias, group-limited top-k and a routed scale, shared
 * experts, the first layers dense.
 */
export interface DeepseekConfig extends ModelConfig {
  mla: {
    heads: number;
    kvLoraRank: number;
    qkNope: number;
    qkRope: number;
    vHead: number;
    /** The query's compression rank; 0 = one q_proj. */
    qLoraRank: number;
  };
  /** RoPE over the qk_rope_head_dim part of every head's query and the shared k_pe. */
  rope: RopeConfig;
  /** The softmax scale: (qk_nope + qk_rope)^-½, times mscale² under YaRN with mscale_all_dim. */
  scale: number;
  router: RouterConfig;
  denseInter: number;
  /** The shared experts' total width (moe_intermediate_size × n_shared_experts; 0: none). */
  sharedInter: number;
  tieEmbeddings: boolean;
  /** Biases on q_a_proj, kv_a_proj_with_mqa and o_proj (`attention_bias`; never on q_b_proj, q_proj, kv_b_proj). */
  attentionBias: boolean;
  /** Multi-token-prediction layers after the last (never read). */
  skippedLayers: number;
}

/** HF builds q_a_layernorm and kv_a_layernorm without an eps: 1e-6 whatever rms_norm_eps says. */
export const LATENT_NORM_EPS = 1e-6;

const FAMILIES = ['deepseek_v3', 'kimi_k2'];

/** Refuse DeepSeek-V3.2 (its lightning indexer's sparse attention) by name. */
export function refuseV32(cfg: Fields): void {
  const type = cfg.raw('model_type');
  const index = Object.keys(cfg.obj).find((k) => k.startsWith('index_'));
  if (type === 'deepseek_v32' || index)
    throw unsupported(`${cfg.file}: DeepSeek-V3.2 (model_type "deepseek_v32"${index ? `, config.${index}` : ''}): its sparse attention (the lightning indexer) is not computed by this build`);
}

/**
 * Kimi K2-Thinking's quantization: compressed-tensors `pack-quantized`, every group's weights
 * symmetric INT4 in groups along a row, activations unquantized. Which tensors are packed is read
 * from the checkpoint (an I32 `weight_packed` with its scale and shape), so `ignore` and `targets`
 * need no reading here.
 */
function checkInt4(qc: Fields): void {
  const format = qc.str('format', undefined, 64);
  if (format !== 'pack-quantized') throw unsupported(`${qc.file}: quantization_config.format "${format}" (of compressed-tensors, this build reads pack-quantized INT4)`);
  const groups = qc.object('config_groups');
  const keys = Object.keys(groups.obj);
  if (!keys.length || keys.length > 16) throw groups.fail('config_groups', 'must name 1 to 16 groups');
  for (const k of keys) {
    const g = groups.object(k);
    const w = g.object('weights');
    const ok = w.int('num_bits', 1, 64) === 4 && w.str('type', undefined, 16) === 'int' && w.bool('symmetric', false) && w.str('strategy', undefined, 32) === 'group' && w.int('group_size', 1, 1 << 16) > 0;
    if (!ok) throw unsupported(`${qc.file}: quantization_config.config_groups.${k}.weights (this build reads symmetric INT4 in groups)`);
    if (g.given('input_activations')) throw unsupported(`${qc.file}: quantization_config.config_groups.${k}.input_activations (quantized activations)`);
  }
}

/**
 * Parse a `deepseek_v3` / `kimi_k2` config, every key bounded. Keys whose absence would change what
 * runs and whose HF default is not every release's are required by name (`q_lora_rank`: null is one
 * q_proj, absent is HF's 1536); the others take DeepseekV3Config's defaults, which the releases state.
 */
export function parseDeepseekConfig(cfg: Fields): DeepseekConfig {
  refuseV32(cfg);
  const type = cfg.str('model_type', undefined, 64);
  if (!FAMILIES.includes(type)) throw unsupported(`${cfg.file}: config.model_type ${JSON.stringify(type)} given to the DeepSeek-V3 parser`);
  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (DeepSeek-V3 computes silu)`);
  for (const [key, want] of [
    ['scoring_func', 'sigmoid'],
    ['topk_method', 'noaux_tc'],
  ] as const) {
    const v = cfg.str(key, want, 64);
    if (v !== want) throw unsupported(`${cfg.file}: config.${key} "${v}" (only DeepSeek-V3's "${want}")`);
  }
  if (cfg.int('moe_layer_freq', 1, MAX_LAYERS, 1) !== 1) throw unsupported(`${cfg.file}: config.moe_layer_freq other than 1 (HF ignores it, DeepSeek's code does not)`);
  const qc = cfg.optionalObject('quantization_config');
  if (qc && qc.str('quant_method', 'fp8', 64) === 'compressed-tensors') checkInt4(qc);
  else if (qc) {
    const method = qc.str('quant_method', 'fp8', 64);
    if (method !== 'fp8') throw unsupported(`${cfg.file}: quantization_config.quant_method "${method}" (this build reads fp8 block-scaled and compressed-tensors INT4 checkpoints)`);
    const fmt = qc.str('fmt', 'e4m3', 16);
    if (fmt !== 'e4m3') throw unsupported(`${cfg.file}: quantization_config.fmt "${fmt}" (only e4m3)`);
    const block = qc.intList('weight_block_size', 1, 1 << 16, 2) ?? [128, 128];
    if (block.length !== 2 || block[0] !== 128 || block[1] !== 128) throw unsupported(`${cfg.file}: quantization_config.weight_block_size [${block}] (only 128 × 128 blocks)`);
  }

  const hidden = cfg.int('hidden_size', 1, 65536);
  const layers = cfg.int('num_hidden_layers', 1, MAX_LAYERS);
  const vocab = cfg.int('vocab_size', 1, 1 << 22);
  const eps = cfg.num('rms_norm_eps', 0, 1, 1e-6, true);
  const heads = cfg.int('num_attention_heads', 1, 1024);
  const kvHeads = cfg.int('num_key_value_heads', 1, 1024, heads);
  if (kvHeads !== heads) throw cfg.fail('num_key_value_heads', `must equal num_attention_heads (${heads}) in MLA`, kvHeads);
  if (!cfg.has('q_lora_rank')) throw cfg.fail('q_lora_rank', 'is required (null: one q_proj; HF would read its absence as 1536)');
  const mla = {
    heads,
    qLoraRank: cfg.int('q_lora_rank', 1, 65536, 0),
    kvLoraRank: cfg.int('kv_lora_rank', 1, 65536),
    qkNope: cfg.int('qk_nope_head_dim', 0, 4096),
    qkRope: cfg.int('qk_rope_head_dim', 2, 4096),
    vHead: cfg.int('v_head_dim', 1, 4096),
  };
  if (mla.qkRope % 2) throw cfg.fail('qk_rope_head_dim', 'must be even', mla.qkRope);
  if (heads * (mla.qkNope + mla.qkRope) > BIG || heads * (mla.qkNope + mla.vHead) > BIG) throw cfg.fail('num_attention_heads', `× head dims must be at most ${BIG}`);
  const rope = parseRope(cfg, mla.qkRope, { theta: 10000, pairs: cfg.bool('rope_interleave', true) ? 'interleaved' : 'half' });
  if (rope.dims !== mla.qkRope) throw cfg.fail('partial_rotary_factor', 'must be 1 (MLA rotates the whole qk_rope_head_dim)');
  const ys = rope.scaling;
  if (ys.type === 'yarn') {
    // HF's YaRN replaces `factor` by max_position_embeddings / original_max_position_embeddings
    // (for the frequencies and cos/sin, not for the softmax's mscale); every release states the two
    // alike, and a config where they differ has no one reading to follow
    const ratio = cfg.int('max_position_embeddings', 1, 1 << 30, 1 << 20) / ys.originalMax;
    if (Math.abs(ratio - ys.factor) > 1e-9 * ys.factor)
      throw unsupported(`${cfg.file}: YaRN factor ${ys.factor} is not max_position_embeddings / original_max_position_embeddings (${ratio}); HF would use the ratio, DeepSeek's code the factor`);
  }
  let scale = 1 / Math.sqrt(mla.qkNope + mla.qkRope);
  // HF: under any rope type but the default, mscale_all_dim scales the softmax by mscale²
  const params = cfg.given('rope_parameters') ? cfg.object('rope_parameters') : cfg.optionalObject('rope_scaling');
  if (params) {
    const rtype = params.str('rope_type', params.str('type', 'default', 32), 32);
    const msa = params.num('mscale_all_dim', 0, 1e3, 0);
    if (rtype !== 'default' && msa && params.given('factor')) {
      const m = yarnMscale(params.num('factor', 0, 1e6), msa);
      scale *= m * m;
    }
  }

  const experts = cfg.int('n_routed_experts', 0, 65536);
  const firstDense = cfg.int('first_k_dense_replace', 0, layers, 3);
  const layerKinds = Array.from({ length: layers }, (_, L) => ({ attn: 'mla', ffn: experts > 0 && L >= firstDense ? ('moe' as const) : ('dense' as const) }));
  const anyMoe = layerKinds.some((k) => k.ffn === 'moe');
  const anyDense = layerKinds.some((k) => k.ffn === 'dense');
  const topK = anyMoe ? cfg.int('num_experts_per_tok', 1, Math.min(64, experts)) : 0;
  const moeInter = anyMoe ? cfg.int('moe_intermediate_size', 1, BIG) : 0;
  const shared = anyMoe ? cfg.int('n_shared_experts', 0, 64, 0) : 0;
  if (moeInter * Math.max(1, shared) > BIG) throw cfg.fail('moe_intermediate_size', `× n_shared_experts must be at most ${BIG}`);
  const groups = anyMoe ? cfg.int('n_group', 1, 65536, 8) : 1;
  const keep = anyMoe ? cfg.int('topk_group', 1, groups, 4) : 1;
  if (anyMoe) {
    // HF's defaults (8 groups, 4 kept) apply to absent keys: 4 kept of fewer groups is no config
    if (keep > groups) throw cfg.fail('topk_group', `must be at most n_group (${groups}); HF's default is 4`, keep);
    if (experts % groups || experts / groups < 2) throw cfg.fail('n_group', `must divide n_routed_experts (${experts}) into groups of at least 2`, groups);
    if (topK > keep * (experts / groups)) throw cfg.fail('num_experts_per_tok', `must fit in topk_group (${keep}) groups of ${experts / groups}`, topK);
  }
  const renormalize = cfg.bool('norm_topk_prob', true);
  const routedScale = cfg.num('routed_scaling_factor', 0, 1e6, 2.5);
  const denseInter = anyDense ? cfg.int('intermediate_size', 1, BIG) : cfg.int('intermediate_size', 0, BIG, 0);
  const skippedLayers = cfg.int('num_nextn_predict_layers', 0, 16, 0);
  if (layers + skippedLayers > MAX_LAYERS) throw new WasteError('E_FORMAT', `${cfg.file}: num_hidden_layers + num_nextn_predict_layers must be at most ${MAX_LAYERS}`);

  return {
    arch: 'deepseek-v3',
    archName: archNameOf(cfg, type),
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    moe: { experts: anyMoe ? experts : 0, topK, inter: moeInter, shared, firstDense: anyMoe ? firstDense : layers, routedScale, renormalize },
    expertWidth: hidden,
    ...tokenIds(cfg, vocab),
    mla,
    rope,
    scale,
    router: { scoring: 'sigmoid', topK, renormalize, scale: routedScale, groups: { count: groups, keep } },
    denseInter,
    sharedInter: moeInter * shared,
    tieEmbeddings: cfg.bool('tie_word_embeddings', false),
    attentionBias: cfg.bool('attention_bias', false),
    skippedLayers,
  };
}

/** The widest input of any product. */
export function deepseekWidest(c: DeepseekConfig): number {
  const m = c.mla;
  return Math.max(c.hidden, c.denseInter, c.moe.inter, c.sharedInter, m.qLoraRank, m.kvLoraRank, m.heads * m.vHead, m.qkNope);
}

/** Total and per-token parameters (the embedding counted in the total only; the head once if tied). */
export function countDeepseekParams(c: DeepseekConfig): { total: number; active: number } {
  const h = c.hidden;
  const m = c.mla;
  const qOut = m.heads * (m.qkNope + m.qkRope);
  const q = m.qLoraRank ? m.qLoraRank * h + m.qLoraRank + qOut * m.qLoraRank : qOut * h;
  const bias = c.attentionBias ? m.qLoraRank + m.kvLoraRank + m.qkRope + h : 0;
  const attn = q + (m.kvLoraRank + m.qkRope) * h + m.kvLoraRank + m.heads * (m.qkNope + m.vHead) * m.kvLoraRank + h * m.heads * m.vHead + bias;
  let trunk = c.vocab * h * (c.tieEmbeddings ? 1 : 2) + h;
  let experts = 0;
  let active = 0;
  for (const k of c.layerKinds) {
    trunk += 2 * h + attn;
    if (k.ffn === 'dense') trunk += 3 * h * c.denseInter;
    else {
      trunk += c.moe.experts * h + c.moe.experts + 3 * h * c.sharedInter;
      experts += 3 * h * c.moe.inter * c.moe.experts;
      active += 3 * h * c.moe.inter * c.moe.topK;
    }
  }
  return { total: trunk + experts, active: trunk - c.vocab * h + active };
}
