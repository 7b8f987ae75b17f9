import type { Tensor } from '../../container/tensor.js';
import type { Binder } from '../base/binder.js';
import type { FfnWeights } from '../blocks/ffn.js';
import type { KdaWeights } from '../blocks/kda.js';
import type { KimiConfig } from './config.js';
import type { MlaWeights } from '../blocks/mla.js';
import type { MoeWeights } from '../blocks/moe.js';

/**
 * The tensors of each Kimi-family sublayer, by name without the container's prefix, in the forms
 * the config selects (Kimi-Linear's and K3's): what both architectures' layer layouts are made of.
 */

/** The tensors of a KDA layer (Kimi-Linear's: low-rank output gate; K3's: full rank). */
export function kdaLayout(cfg: KimiConfig, a: string, b: Binder): KdaWeights {
  const H = cfg.hidden;
  const { heads: NH, headDim: D, convKernel: K } = cfg.kda;
  const C = NH * D;
  const conv = (x: string) => b.vector(`${a}${x}_conv1d.weight`, C * K, [[C, 1, K], [C, K]]);
  return {
    kind: 'kda',
    qProj: b.matrix(`${a}q_proj.weight`, C, H),
    kProj: b.matrix(`${a}k_proj.weight`, C, H),
    vProj: b.matrix(`${a}v_proj.weight`, C, H),
    conv: [conv('q'), conv('k'), conv('v')],
    fA: b.matrix(`${a}f_a_proj.weight`, D, H),
    fB: b.matrix(`${a}f_b_proj.weight`, C, D),
    dtBias: b.vector(`${a}dt_bias`, C, [[C], [NH, D]]),
    // one per head, the first NH stored: K3 stores [128] for 96 heads (zeros past them), and it is
    // read per head, never per channel (as the C engine reads it)
    aLog: b.head(`${a}A_log`, NH),
    bProj: b.matrix(`${a}b_proj.weight`, NH, H),
    gate: cfg.kda.fullRankGate
      ? { full: b.matrix(`${a}g_proj.weight`, C, H) }
      : { low: [b.matrix(`${a}g_a_proj.weight`, D, H), b.matrix(`${a}g_b_proj.weight`, C, D)] },
    oNorm: b.vector(`${a}o_norm.weight`, D),
    oProj: b.matrix(`${a}o_proj.weight`, H, C),
  };
}

/** The tensors of an MLA layer (K3's adds the compressed query and the output gate). */
export function mlaLayout(cfg: KimiConfig, a: string, b: Binder): MlaWeights {
  const H = cfg.hidden;
  const m = cfg.mla;
  const qOut = m.heads * (m.qkNope + m.qkRope);
  return {
    kind: 'mla',
    q: m.qLoraRank
      ? { a: b.matrix(`${a}q_a_proj.weight`, m.qLoraRank, H), norm: b.vector(`${a}q_a_layernorm.weight`, m.qLoraRank), b: b.matrix(`${a}q_b_proj.weight`, qOut, m.qLoraRank) }
      : { proj: b.matrix(`${a}q_proj.weight`, qOut, H) },
    kvA: b.matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H),
    kvNorm: b.vector(`${a}kv_a_layernorm.weight`, m.kvLoraRank),
    kvB: b.matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank),
    gProj: m.outputGate ? (b.matrix(`${a}g_proj.weight`, m.heads * m.vHead, H)) : undefined,
    oProj: b.matrix(`${a}o_proj.weight`, H, m.heads * m.vHead),
  };
}

/** A dense FFN's tensors under `p` (`model.layers.L.mlp.`, `…shared_experts.`). */
export function ffnLayout(p: string, inter: number, width: number, hidden: number, b: Binder): FfnWeights {
  return {
    gate: b.matrix(`${p}gate_proj.weight`, inter, width),
    up: b.matrix(`${p}up_proj.weight`, inter, width),
    down: b.matrix(`${p}down_proj.weight`, hidden, inter),
  };
}

/** The tensors of a MoE layer: router, bias, shared experts, codebooks (and K3's latent projections). */
export function moeLayout(cfg: KimiConfig, p: string, b: Binder): MoeWeights {
  const H = cfg.hidden;
  const E = cfg.moe.experts;
  const W = cfg.expertWidth;
  const m = `${p}block_sparse_moe.`;
  const biasName = `${m}gate.e_score_correction_bias`;
  const S = cfg.moe.inter * cfg.moe.shared;
  return {
    kind: 'moe',
    router: b.matrix(`${m}gate.weight`, E, H),
    bias: b.has(biasName) ? b.vector(biasName, E, [[E], [1, E]]) : b.vector('', E),
    shared: S > 0 ? ffnLayout(`${m}shared_experts.`, S, H, H, b) : undefined,
    booksT: b.books(),
    dense: b.dense()
      ? Array.from({ length: E }, (_, e) => ({
          gate: b.matrix(`${m}experts.${e}.w1.weight`, cfg.moe.inter, W),
          up: b.matrix(`${m}experts.${e}.w3.weight`, cfg.moe.inter, W),
          down: b.matrix(`${m}experts.${e}.w2.weight`, W, cfg.moe.inter),
        }))
      : undefined,
    latent: cfg.latent
      ? {
          down: b.matrix(`${m}routed_expert_down_proj.weight`, W, H),
          norm: cfg.latent.norm ? b.vector(`${m}routed_expert_norm.weight`, W) : undefined,
          up: b.matrix(`${m}routed_expert_up_proj.weight`, H, W),
        }
      : undefined,
  };
}

/** One Kimi-family layer: its two norms, its attention (KDA or MLA) and its FFN (dense or MoE). */
export interface KimiLayer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  attn: KdaWeights | MlaWeights;
  ffn: ({ kind: 'dense' } & FfnWeights) | MoeWeights;
}

/** Layer L's tensors. */
export function kimiLayer(cfg: KimiConfig, L: number, b: Binder): KimiLayer {
  const H = cfg.hidden;
  const kind = cfg.layerKinds[L];
  const p = `model.layers.${L}.`;
  const a = `${p}self_attn.`;
  return {
    inputNorm: b.vector(`${p}input_layernorm.weight`, H),
    postNorm: b.vector(`${p}post_attention_layernorm.weight`, H),
    attn: kind.attn === 'kda' ? kdaLayout(cfg, a, b) : mlaLayout(cfg, a, b),
    ffn: kind.ffn === 'dense' ? { kind: 'dense', ...ffnLayout(`${p}mlp.`, cfg.denseInter, H, H, b) } : moeLayout(cfg, p, b),
  };
}

/** The final norm and the LM head. */
export function kimiHead(cfg: KimiConfig, b: Binder): { finalNorm: Float32Array; lmHead: Tensor } {
  return { finalNorm: b.vector('model.norm.weight', cfg.hidden), lmHead: b.matrix('lm_head.weight', cfg.vocab, cfg.hidden) };
}
