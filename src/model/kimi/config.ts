import type { LayerKind, ModelConfig } from '../../core/model-config.js';
import { unsupported } from '../../util/errors.js';
import { Fields } from '../../util/fields.js';
import type { Activation } from '../blocks/ffn.js';

/**
 * The hyper-parameters of a Kimi-family model (Kimi-Linear, Kimi K3), read from a HuggingFace
 * `config.json` (verbatim in a container's manifest; K3's `text_config` flattened, its outer part
 * kept under `_outer`). Every value is bounded before it sizes an allocation or a loop.
 *
 * K3 turns on features Kimi-Linear lacks; each is off unless the config says otherwise, and a
 * boolean counts by its value, not by its presence (the C engine reads presence: a config that says
 * `false` would differ there).
 *
 * A key whose absence would change what runs, and whose default is not what every released model
 * of the family says, is required by name: a default there runs another model without a word (a K3
 * config without `hidden_act` would run SiLU, one without `num_shared_experts` drop its shared
 * expert). A key is defaulted only where the default is HuggingFace's own (KimiLinearConfig) and
 * the value of every released config, or where a wrong value is refused anyway (a tensor of another
 * name or shape). A config that names itself K3 states every K3 feature, since each one's absence
 * would silently be Kimi-Linear's; Kimi-Linear's own configs leave them out. The table in
 * docs/ARCHITECTURE.md ("Configuration") gives each key's rule and why.
 */
export interface KimiConfig extends ModelConfig {
  kda: {
    heads: number;
    headDim: number;
    convKernel: number;
    /** The output gate is one full-rank matrix g_proj (K3) rather than g_a · g_b. */
    fullRankGate: boolean;
    /** The bounded decay gate's lower bound (K3: −5); absent: Kimi-Linear's softplus gate. */
    gateLowerBound?: number;
  };
  mla: {
    heads: number;
    kvLoraRank: number;
    qkNope: number;
    qkRope: number;
    vHead: number;
    /** The query's compression rank (K3: 1536); 0 = one q_proj. */
    qLoraRank: number;
    /** A sigmoid gate on the heads' output (K3). */
    outputGate: boolean;
  };
  denseInter: number;
  act: Activation;
  /** Latent MoE (K3): experts run at this width, their sum normed if `norm`. */
  latent?: { width: number; norm: boolean };
  /** Attention residuals (K3): layers per block; 0 = the plain residual stream. */
  attnResBlock: number;
}

/** The features by which a config is K3's: any of them on. */
export function k3Features(c: KimiConfig): string[] {
  const on: string[] = [];
  if (c.latent) on.push('routed_expert_hidden_size (latent MoE)');
  if (c.attnResBlock) on.push('attn_res_block_size (attention residuals)');
  if (c.mla.outputGate) on.push('mla_use_output_gate');
  if (c.mla.qLoraRank) on.push('q_lora_rank (a compressed MLA query)');
  if (c.kda.fullRankGate) on.push('linear_attn_config.use_full_rank_gate');
  if (c.kda.gateLowerBound !== undefined) on.push('linear_attn_config.gate_lower_bound');
  if (c.act.kind !== 'silu') on.push(`hidden_act "${c.act.kind}"`);
  return on;
}

/** The language model's part of a config: `text_config` when it is nested (a K3 checkpoint). */
export function textConfig(cfg: Fields): Fields {
  return cfg.given('text_config') ? cfg.object('text_config') : cfg;
}

/** The architecture the model's wrapper names (`_outer` in a manifest, the top of a nested config.json). */
export function outerArchitecture(cfg: Fields): string | undefined {
  const outer = cfg.given('text_config') ? cfg : cfg.optionalObject('_outer');
  const archs = outer?.raw('architectures');
  return Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0] : undefined;
}

const MAX_LAYERS = 512;
const BIG = 1 << 20;

/** Whether a config names itself K3 (its wrapper's architecture or model_type), rather than only turning a K3 feature on. */
function namesK3(root: Fields): boolean {
  const outer = root.given('text_config') ? root : root.optionalObject('_outer');
  return /KimiK3/.test(outerArchitecture(root) ?? '') || root.raw('model_type') === 'kimi_k3' || outer?.raw('model_type') === 'kimi_k3';
}

/** The key of `f` that is given, of a name and its alias (the first when neither is: then it is the one a "required" error names). */
function either(f: Fields, key: string, alias: string): string {
  return f.given(key) || !f.given(alias) ? key : alias;
}

/** Parse `cfg` (the `config` object of a manifest, or a HuggingFace config.json) as architecture `arch`. */
export function parseKimiConfig(root: Fields, arch: string): KimiConfig {
  const cfg = textConfig(root);
  const k3 = namesK3(root);
  /** A K3 feature's key, which a config that names itself K3 must state (null counts: it says "off"). */
  const k3Key = (f: Fields, key: string) => {
    if (k3 && !f.has(key)) throw f.fail(key, "is required in a Kimi K3 config (absent, Kimi-Linear's form would run)");
  };
  const layers = cfg.int('num_hidden_layers', 1, MAX_LAYERS);
  const hidden = cfg.int('hidden_size', 1, 65536);
  const vocab = cfg.int('vocab_size', 1, 1 << 24);
  // HuggingFace's default (1e-6) is not what the released models use (1e-5)
  const eps = cfg.num('rms_norm_eps', 0, 0.5, undefined, true);

  // required: Kimi-Linear's SiLU and K3's SiTU are both the family's, and no default fits both
  if (!cfg.given('hidden_act')) throw cfg.fail('hidden_act', 'is required ("silu" for Kimi-Linear, "situ" for Kimi K3)');
  const actName = cfg.str('hidden_act', undefined, 64);
  let act: Activation;
  if (actName === 'silu') act = { kind: 'silu' };
  else if (actName === 'situ') {
    if (!cfg.has('activation_situ_linear_beta')) throw cfg.fail('activation_situ_linear_beta', 'is required with hidden_act "situ" (null: the up half is not squashed)');
    // a null linear β leaves the up half unsquashed (0 here)
    act = { kind: 'situ', beta: cfg.num('activation_situ_beta', 0, 1e6, undefined, true), linearBeta: cfg.given('activation_situ_linear_beta') ? cfg.num('activation_situ_linear_beta', 0, 1e6, undefined, true) : 0 };
  } else throw unsupported(`${cfg.file}: config.hidden_act "${actName}" (this build computes "silu" and "situ")`);

  // --- attention layout: which layers are KDA (1-based lists in the config) ---
  // required: without it every layer would be MLA, which no model of the family is
  const lac = cfg.object('linear_attn_config');
  const isKda = new Array<boolean>(layers).fill(false);
  let kda: KimiConfig['kda'] = { heads: 0, headDim: 0, convKernel: 0, fullRankGate: false };
  const kdaList = lac.intList('kda_layers', 1, layers, MAX_LAYERS);
  if (!kdaList) throw lac.fail('kda_layers', 'is required (the 1-based numbers of the KDA layers; [] for none)');
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
    k3Key(lac, 'use_full_rank_gate');
    k3Key(lac, 'gate_lower_bound');
    kda = {
      heads: lac.int('num_heads', 1, 4096),
      headDim: lac.int('head_dim', 1, 1024),
      convKernel: lac.int('short_conv_kernel_size', 1, 64),
      // absent in Kimi-Linear's configs (HuggingFace's default, false); a K3 one states it
      fullRankGate: lac.bool('use_full_rank_gate', false),
    };
    if (lac.given('gate_lower_bound')) {
      const lb = lac.num('gate_lower_bound', -1e6, 0);
      // 0 (or above) is no bound: the engine's gate would then never decay
      if (!(lb < 0)) throw lac.fail('gate_lower_bound', 'must be below 0', lb);
      kda.gateLowerBound = lb;
    }
    if (kda.heads * kda.headDim > BIG) throw lac.fail('num_heads', `× head_dim must be at most ${BIG}`);
    if (kda.heads * kda.headDim * kda.headDim > 1 << 26)
      throw lac.fail('num_heads', '× head_dim² (the recurrent state) must be at most 2^26 values');
  }
  const anyMla = isKda.some((k) => !k);

  let mla: KimiConfig['mla'] = { heads: 0, kvLoraRank: 0, qkNope: 0, qkRope: 0, vHead: 0, qLoraRank: 0, outputGate: false };
  if (anyMla) {
    // HuggingFace's default is false (RoPE): an absent key is not Kimi's MLA
    if (!cfg.given('mla_use_nope')) throw cfg.fail('mla_use_nope', 'is required with MLA layers (true: Kimi models use no RoPE)');
    if (cfg.raw('mla_use_nope') !== true) throw unsupported(`${cfg.file}: config.mla_use_nope false (MLA with RoPE; Kimi models use none)`);
    k3Key(cfg, 'q_lora_rank');
    k3Key(cfg, 'mla_use_output_gate');
    mla = {
      heads: cfg.int('num_attention_heads', 1, 4096),
      kvLoraRank: cfg.int('kv_lora_rank', 1, 65536),
      qkNope: cfg.int('qk_nope_head_dim', 0, 4096),
      qkRope: cfg.int('qk_rope_head_dim', 0, 4096),
      vHead: cfg.int('v_head_dim', 1, 4096),
      qLoraRank: cfg.int('q_lora_rank', 0, 65536, 0),
      outputGate: cfg.bool('mla_use_output_gate', false),
    };
    if (mla.qkNope + mla.qkRope < 1) throw cfg.fail('qk_nope_head_dim', '+ qk_rope_head_dim must be at least 1');
    if (mla.heads * (mla.qkNope + mla.qkRope) > BIG || mla.heads * (mla.qkNope + mla.vHead) > BIG)
      throw cfg.fail('num_attention_heads', `× head dims must be at most ${BIG}`);
  }

  // --- feed-forward layout ---
  // required: HuggingFace's default (none) would make every layer dense
  const experts = cfg.int(either(cfg, 'num_experts', 'n_routed_experts'), 0, 65536);
  let moe: KimiConfig['moe'] = { experts: 0, topK: 0, inter: 0, shared: 0, firstDense: layers, routedScale: 1, renormalize: false };
  let latent: KimiConfig['latent'];
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
      // these three are required: HuggingFace's defaults (0, 0, 1.0) are not the released models' values
      shared: cfg.int(either(cfg, 'num_shared_experts', 'n_shared_experts'), 0, 64),
      firstDense: cfg.int('first_k_dense_replace', 0, layers),
      routedScale: cfg.num('routed_scaling_factor', 0, 1e6),
      // HF's KimiLinearConfig defaults to true; the key is present in every released config.
      renormalize: cfg.bool('moe_renormalize', cfg.bool('norm_topk_prob', true)),
    };
    if (moe.inter * Math.max(1, moe.shared) > BIG) throw cfg.fail('moe_intermediate_size', `× num_shared_experts must be at most ${BIG}`);
    k3Key(cfg, 'routed_expert_hidden_size');
    const width = cfg.int('routed_expert_hidden_size', 0, 65536, 0);
    if (width > 0) {
      k3Key(cfg, 'latent_moe_use_norm');
      latent = { width, norm: cfg.bool('latent_moe_use_norm', false) };
    }
  }
  const anyDense = moe.firstDense > 0;
  const denseInter = anyDense ? cfg.int('intermediate_size', 1, BIG) : cfg.int('intermediate_size', 0, BIG, 0);
  k3Key(cfg, 'attn_res_block_size');
  const attnResBlock = cfg.int('attn_res_block_size', 0, MAX_LAYERS, 0);

  const layerKinds: LayerKind[] = [];
  for (let i = 0; i < layers; i++) layerKinds.push({ attn: isKda[i] ? 'kda' : 'mla', ffn: experts > 0 && i >= moe.firstDense ? 'moe' : 'dense' });

  // the wrapper's ids win over the language model's (K3 names its stop token there too)
  const outer = root.given('text_config') ? root : root.optionalObject('_outer');
  const idOf = (key: string) => (outer?.given(key) ? outer.raw(key) : cfg.raw(key));
  const eos = idOf('eos_token_id');
  const eosTokenIds = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).filter(
    (x): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < vocab,
  );
  const bos = idOf('bos_token_id');
  const archs = cfg.raw('architectures');
  const archName = outerArchitecture(root) ?? (Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0] : cfg.str('model_type', 'kimi_linear', 128));

  return {
    arch,
    layers,
    hidden,
    vocab,
    eps,
    layerKinds,
    kda,
    mla,
    denseInter,
    moe,
    expertWidth: latent ? latent.width : hidden,
    act,
    latent,
    attnResBlock,
    bosTokenId: typeof bos === 'number' && Number.isInteger(bos) && bos >= 0 && bos < vocab ? bos : undefined,
    eosTokenIds,
    archName,
  };
}

/** Parameter counts, for `waste info`: every tensor the config implies, the embedding table apart from the active set. */
export function countKimiParams(c: KimiConfig): { total: number; active: number } {
  const h = c.hidden;
  let trunk = 2 * c.vocab * h + h; // embedding, head, final norm
  if (c.attnResBlock) trunk += 2 * h; // the output mix's norm and projection
  let experts = 0;
  let activeExperts = 0;
  for (const kind of c.layerKinds) {
    trunk += 2 * h;
    if (c.attnResBlock) trunk += 4 * h;
    if (kind.attn === 'kda') {
      const { heads: H, headDim: D, convKernel: K } = c.kda;
      const C = H * D;
      const gate = c.kda.fullRankGate ? C * h : D * h + C * D;
      // q, k, v; their convs; f_a, f_b; the output gate; b_proj; A_log; dt_bias; o_norm; o_proj
      trunk += 3 * C * h + 3 * C * K + (D * h + C * D) + gate + H * h + H + C + D + h * C;
    } else {
      const m = c.mla;
      const qOut = m.heads * (m.qkNope + m.qkRope);
      const q = m.qLoraRank ? m.qLoraRank * h + m.qLoraRank + qOut * m.qLoraRank : qOut * h;
      trunk += q + (m.kvLoraRank + m.qkRope) * h + m.kvLoraRank + m.heads * (m.qkNope + m.vHead) * m.kvLoraRank + h * m.heads * m.vHead;
      if (m.outputGate) trunk += m.heads * m.vHead * h;
    }
    if (kind.ffn === 'dense') trunk += 3 * h * c.denseInter;
    else {
      const w = c.expertWidth;
      const per = 3 * w * c.moe.inter;
      trunk += c.moe.experts * h + c.moe.experts + 3 * h * c.moe.inter * c.moe.shared;
      if (c.latent) trunk += 2 * w * h + (c.latent.norm ? w : 0);
      experts += per * c.moe.experts;
      activeExperts += per * c.moe.topK;
    }
  }
  // The embedding table is one row per token; count it in the total, not in the active set.
  return { total: trunk + experts, active: trunk - c.vocab * h + activeExperts };
}
