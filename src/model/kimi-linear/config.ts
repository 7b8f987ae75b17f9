import { Fields } from '../../util/fields.js';
import { unsupported } from '../../util/errors.js';

/**
 * Kimi-Linear hyper-parameters, read from a HuggingFace `config.json` (verbatim in a container's
 * manifest). Every value is bounded before it sizes an allocation or a loop; features of later
 * models (Kimi K3's latent MoE, attention residuals, output gates, SiTU) are refused by name
 * rather than silently ignored, because ignoring them would give a wrong answer.
 */
export interface KimiLinearConfig {
  layers: number;
  hidden: number;
  vocab: number;
  eps: number;
  /** Per layer: which attention and which FFN it runs. */
  layerKinds: LayerKind[];
  kda: { heads: number; headDim: number; convKernel: number };
  mla: { heads: number; kvLoraRank: number; qkNope: number; qkRope: number; vHead: number };
  denseInter: number;
  moe: {
    experts: number;
    topK: number;
    inter: number;
    shared: number;
    firstDense: number;
    routedScale: number;
    renormalize: boolean;
  };
  bosTokenId?: number;
  eosTokenIds: number[];
  /** `architectures[0]` or `model_type`, for display. */
  archName: string;
}

export interface LayerKind {
  attn: 'kda' | 'mla';
  ffn: 'dense' | 'moe';
}

const MAX_LAYERS = 512;
const BIG = 1 << 20;

/**
 * Parse `cfg` (the `config` object of a manifest, or a HuggingFace config.json). `where` names the
 * file for error messages, e.g. "manifest.json" with path "config".
 */
export function parseKimiLinearConfig(cfg: Fields): KimiLinearConfig {
  // K3-style wrappers nest the language model's config; Kimi-Linear's is flat.
  if (cfg.given('text_config')) cfg = cfg.object('text_config');

  refuseK3Features(cfg);

  const layers = cfg.int('num_hidden_layers', 1, MAX_LAYERS);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const vocab = cfg.int('vocab_size', 1, 1 << 24);
  const eps = cfg.num('rms_norm_eps', 0, 0.5, 1e-5, true);

  const act = cfg.str('hidden_act', 'silu', 64);
  if (act !== 'silu') throw unsupported(`${cfg.file}: config.hidden_act "${act}" (only "silu" is implemented)`);

  // --- attention layout: which layers are KDA (1-based lists in the config) ---
  const lac = cfg.optionalObject('linear_attn_config');
  const isKda = new Array<boolean>(layers).fill(false);
  let kda = { heads: 0, headDim: 0, convKernel: 0 };
  if (lac) {
    const kdaList = lac.intList('kda_layers', 1, layers, MAX_LAYERS) ?? [];
    for (const l of kdaList) isKda[l - 1] = true;
    const fullList = lac.intList('full_attn_layers', 1, layers, MAX_LAYERS);
    if (fullList) {
      const isFull = new Array<boolean>(layers).fill(false);
      for (const l of fullList) isFull[l - 1] = true;
      for (let i = 0; i < layers; i++)
        if (isKda[i] === isFull[i])
          throw lac.fail(
            'kda_layers',
            `and full_attn_layers must name each layer exactly once; layer ${i + 1} is named ${isKda[i] ? 'by both' : 'by neither'}`,
          );
    }
    if (kdaList.length > 0) {
      if (lac.given('use_full_rank_gate') && lac.raw('use_full_rank_gate') !== false)
        throw unsupported(`${cfg.file}: linear_attn_config.use_full_rank_gate (a Kimi K3 feature)`);
      if (lac.given('gate_lower_bound'))
        throw unsupported(`${cfg.file}: linear_attn_config.gate_lower_bound (a Kimi K3 feature)`);
      kda = {
        heads: lac.int('num_heads', 1, 4096),
        headDim: lac.int('head_dim', 1, 1024),
        convKernel: lac.int('short_conv_kernel_size', 1, 64, 4),
      };
      if (kda.heads * kda.headDim > BIG) throw lac.fail('num_heads', `× head_dim must be at most ${BIG}`);
      if (kda.heads * kda.headDim * kda.headDim > 1 << 26)
        throw lac.fail('num_heads', '× head_dim² (the recurrent state) must be at most 2^26 values');
    }
  }
  const anyMla = isKda.some((k) => !k);

  let mla = { heads: 0, kvLoraRank: 0, qkNope: 0, qkRope: 0, vHead: 0 };
  if (anyMla) {
    if (cfg.given('q_lora_rank') && cfg.raw('q_lora_rank') !== 0)
      throw unsupported(`${cfg.file}: config.q_lora_rank (MLA with a compressed query; Kimi-Linear has none)`);
    if (cfg.given('mla_use_nope') && cfg.raw('mla_use_nope') !== true)
      throw unsupported(`${cfg.file}: config.mla_use_nope false (MLA with RoPE; Kimi-Linear uses none)`);
    mla = {
      heads: cfg.int('num_attention_heads', 1, 4096),
      kvLoraRank: cfg.int('kv_lora_rank', 1, 65536),
      qkNope: cfg.int('qk_nope_head_dim', 0, 4096),
      qkRope: cfg.int('qk_rope_head_dim', 0, 4096),
      vHead: cfg.int('v_head_dim', 1, 4096),
    };
    if (mla.qkNope + mla.qkRope < 1) throw cfg.fail('qk_nope_head_dim', '+ qk_rope_head_dim must be at least 1');
    if (mla.heads * (mla.qkNope + mla.qkRope) > BIG || mla.heads * (mla.qkNope + mla.vHead) > BIG)
      throw cfg.fail('num_attention_heads', `× head dims must be at most ${BIG}`);
  }

  // --- feed-forward layout ---
  const experts = cfg.given('num_experts')
    ? cfg.int('num_experts', 0, 65536)
    : cfg.int('n_routed_experts', 0, 65536, 0);
  let moe = { experts: 0, topK: 0, inter: 0, shared: 0, firstDense: layers, routedScale: 1, renormalize: false };
  if (experts > 0) {
    const topKey = cfg.given('num_experts_per_token') ? 'num_experts_per_token' : 'num_experts_per_tok';
    const func = cfg.str('moe_router_activation_func', cfg.str('scoring_func', 'sigmoid', 64), 64);
    if (func !== 'sigmoid') throw unsupported(`${cfg.file}: config.moe_router_activation_func "${func}" (only sigmoid routing is implemented)`);
    const groups = cfg.int('num_expert_group', 1, 65536, cfg.int('n_group', 1, 65536, 1));
    if (groups !== 1) throw unsupported(`${cfg.file}: config.num_expert_group ${groups} (group-limited routing)`);
    const freq = cfg.int('moe_layer_freq', 1, MAX_LAYERS, 1);
    if (freq !== 1) throw unsupported(`${cfg.file}: config.moe_layer_freq ${freq}`);
    moe = {
      experts,
      topK: cfg.int(topKey, 1, Math.min(64, experts)),
      inter: cfg.int('moe_intermediate_size', 1, BIG),
      shared: cfg.int('num_shared_experts', 0, 64, cfg.int('n_shared_experts', 0, 64, 0)),
      firstDense: cfg.int('first_k_dense_replace', 0, layers, 0),
      routedScale: cfg.num('routed_scaling_factor', 0, 1e6, 1),
      // HF's KimiLinearConfig defaults to true; the key is present in every released config.
      renormalize: cfg.bool('moe_renormalize', cfg.bool('norm_topk_prob', true)),
    };
    if (moe.inter * Math.max(1, moe.shared) > BIG)
      throw cfg.fail('moe_intermediate_size', `× num_shared_experts must be at most ${BIG}`);
  }
  const anyDense = moe.firstDense > 0;
  const denseInter = anyDense ? cfg.int('intermediate_size', 1, BIG) : cfg.int('intermediate_size', 0, BIG, 0);

  const layerKinds: LayerKind[] = [];
  for (let i = 0; i < layers; i++)
    layerKinds.push({ attn: isKda[i] ? 'kda' : 'mla', ffn: experts > 0 && i >= moe.firstDense ? 'moe' : 'dense' });

  const eos = cfg.raw('eos_token_id');
  const eosTokenIds = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).filter(
    (x): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < vocab,
  );
  const bos = cfg.raw('bos_token_id');
  const archs = cfg.raw('architectures');
  const archName =
    Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0] : cfg.str('model_type', 'kimi_linear', 128);

  return {
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    kda,
    mla,
    denseInter,
    moe,
    bosTokenId: typeof bos === 'number' && Number.isInteger(bos) && bos >= 0 && bos < vocab ? bos : undefined,
    eosTokenIds,
    archName,
  };
}

function refuseK3Features(cfg: Fields): void {
  const k3: [string, string][] = [
    ['routed_expert_hidden_size', 'latent MoE'],
    ['attn_res_block_size', 'attention residuals'],
  ];
  for (const [key, what] of k3)
    if (cfg.given(key) && cfg.raw(key) !== 0)
      throw unsupported(`${cfg.file}: config.${key} (${what}, a Kimi K3 feature)`);
  if (cfg.given('mla_use_output_gate') && cfg.raw('mla_use_output_gate') !== false)
    throw unsupported(`${cfg.file}: config.mla_use_output_gate (a Kimi K3 feature)`);
}

/** Parameter counts, for `waste info`. */
export function countParams(c: KimiLinearConfig): { total: number; active: number } {
  const h = c.hidden;
  let trunk = 2 * c.vocab * h + h; // embedding, head, final norm
  let experts = 0;
  let activeExperts = 0;
  for (const kind of c.layerKinds) {
    trunk += 2 * h;
    if (kind.attn === 'kda') {
      const { heads: H, headDim: D, convKernel: K } = c.kda;
      const C = H * D;
      trunk += 3 * C * h + 3 * C * K + 2 * (D * h + C * D) + H * h + H + C + D + h * C;
    } else {
      const m = c.mla;
      trunk +=
        m.heads * (m.qkNope + m.qkRope) * h +
        (m.kvLoraRank + m.qkRope) * h +
        m.kvLoraRank +
        m.heads * (m.qkNope + m.vHead) * m.kvLoraRank +
        h * m.heads * m.vHead;
    }
    if (kind.ffn === 'dense') trunk += 3 * h * c.denseInter;
    else {
      const per = 3 * h * c.moe.inter;
      trunk += c.moe.experts * h + c.moe.experts + per * c.moe.shared;
      experts += per * c.moe.experts;
      activeExperts += per * c.moe.topK;
    }
  }
  // The embedding table is one row per token; count it in the total, not in the active set.
  return { total: trunk + experts, active: trunk - c.vocab * h + activeExperts };
}
