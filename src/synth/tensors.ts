import type { KimiConfig } from '../model/kimi/config.js';

/**
 * Every tensor of a Kimi-family model by its HuggingFace name (without a prefix), in the order the
 * synthetic writers draw them: matrices with the standard deviation their values get, vectors
 * (norms, biases, gate parameters, conv taps) with the range theirs are drawn from — `valid` of
 * them drawn and the rest zero, for tensors stored padded. Routed experts are marked: a checkpoint
 * holds them as matrices, a container as VQ records. K3's tensors come after the Kimi-Linear ones
 * they sit next to, so a Kimi-Linear config draws exactly what it always drew.
 */
export type SynthTensor =
  | { kind: 'matrix'; name: string; rows: number; cols: number; std: number; expert?: boolean }
  | { kind: 'vector'; name: string; shape: number[]; lo: number; hi: number; valid?: number };

export function* kimiTensors(cfg: KimiConfig): Generator<SynthTensor> {
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false): SynthTensor => ({ kind: 'matrix', name, rows, cols, std, expert });
  const vector = (name: string, shape: number[], lo: number, hi: number, valid?: number): SynthTensor => ({ kind: 'vector', name, shape, lo, hi, valid });
  const H = cfg.hidden;
  const inv = (n: number) => 1 / Math.sqrt(n);
  // an attention-residual projection row: scores of order one, so the mixes neither average nor pick one
  const resProj = (name: string) => vector(name, [1, H], -2 * inv(H), 2 * inv(H));
  yield matrix('model.embed_tokens.weight', cfg.vocab, H, 1);
  for (let L = 0; L < cfg.layers; L++) {
    const p = `model.layers.${L}.`;
    const a = `${p}self_attn.`;
    yield vector(`${p}input_layernorm.weight`, [H], 0.8, 1.2);
    yield vector(`${p}post_attention_layernorm.weight`, [H], 0.8, 1.2);
    if (cfg.attnResBlock) {
      yield vector(`${p}self_attention_res_norm.weight`, [H], 0.8, 1.2);
      yield resProj(`${p}self_attention_res_proj.weight`);
      yield vector(`${p}mlp_res_norm.weight`, [H], 0.8, 1.2);
      yield resProj(`${p}mlp_res_proj.weight`);
    }
    if (cfg.layerKinds[L].attn === 'kda') {
      const { heads: NH, headDim: D, convKernel: K } = cfg.kda;
      const C = NH * D;
      for (const x of ['q', 'k', 'v']) yield matrix(`${a}${x}_proj.weight`, C, H, inv(H));
      for (const x of ['q', 'k', 'v']) yield vector(`${a}${x}_conv1d.weight`, [C, 1, K], -0.6, 0.6);
      yield matrix(`${a}f_a_proj.weight`, D, H, inv(H));
      yield matrix(`${a}f_b_proj.weight`, C, D, inv(D));
      yield vector(`${a}dt_bias`, [C], -1, 1);
      // K3 stores one per head in a vector of head_dim (its release: 96 in [128])
      if (cfg.kda.fullRankGate) yield vector(`${a}A_log`, [Math.max(NH, D)], -1.5, 0.5, NH);
      else yield vector(`${a}A_log`, [1, 1, NH, 1], -1.5, 0.5);
      yield matrix(`${a}b_proj.weight`, NH, H, inv(H));
      if (cfg.kda.fullRankGate) yield matrix(`${a}g_proj.weight`, C, H, inv(H));
      else {
        yield matrix(`${a}g_a_proj.weight`, D, H, inv(H));
        yield matrix(`${a}g_b_proj.weight`, C, D, inv(D));
      }
      yield vector(`${a}o_norm.weight`, [D], 0.8, 1.2);
      yield matrix(`${a}o_proj.weight`, H, C, inv(C));
    } else {
      const m = cfg.mla;
      const qOut = m.heads * (m.qkNope + m.qkRope);
      if (m.qLoraRank) {
        yield matrix(`${a}q_a_proj.weight`, m.qLoraRank, H, inv(H));
        yield vector(`${a}q_a_layernorm.weight`, [m.qLoraRank], 0.8, 1.2);
        yield matrix(`${a}q_b_proj.weight`, qOut, m.qLoraRank, inv(m.qLoraRank));
      } else yield matrix(`${a}q_proj.weight`, qOut, H, inv(H));
      yield matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H, inv(H));
      yield vector(`${a}kv_a_layernorm.weight`, [m.kvLoraRank], 0.8, 1.2);
      yield matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank, inv(m.kvLoraRank));
      if (m.outputGate) yield matrix(`${a}g_proj.weight`, m.heads * m.vHead, H, inv(H));
      yield matrix(`${a}o_proj.weight`, H, m.heads * m.vHead, inv(m.heads * m.vHead));
    }
    if (cfg.layerKinds[L].ffn === 'dense') {
      const I = cfg.denseInter;
      yield matrix(`${p}mlp.gate_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.up_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.down_proj.weight`, H, I, inv(I));
    } else {
      const m = `${p}block_sparse_moe.`;
      const E = cfg.moe.experts;
      const I = cfg.moe.inter;
      const W = cfg.expertWidth;
      yield matrix(`${m}gate.weight`, E, H, inv(H));
      yield vector(`${m}gate.e_score_correction_bias`, [E], -0.1, 0.1);
      if (cfg.latent) {
        yield matrix(`${m}routed_expert_down_proj.weight`, W, H, inv(H));
        if (cfg.latent.norm) yield vector(`${m}routed_expert_norm.weight`, [W], 0.8, 1.2);
        yield matrix(`${m}routed_expert_up_proj.weight`, H, W, inv(W));
      }
      for (let e = 0; e < E; e++) {
        yield matrix(`${m}experts.${e}.w1.weight`, I, W, inv(W), true);
        yield matrix(`${m}experts.${e}.w3.weight`, I, W, inv(W), true);
        yield matrix(`${m}experts.${e}.w2.weight`, W, I, inv(I), true);
      }
      const S = I * cfg.moe.shared;
      if (S > 0) {
        yield matrix(`${m}shared_experts.gate_proj.weight`, S, H, inv(H));
        yield matrix(`${m}shared_experts.up_proj.weight`, S, H, inv(H));
        yield matrix(`${m}shared_experts.down_proj.weight`, H, S, inv(S));
      }
    }
  }
  yield vector('model.norm.weight', [H], 0.8, 1.2);
  if (cfg.attnResBlock) {
    yield vector('model.output_attn_res_norm.weight', [H], 0.8, 1.2);
    yield resProj('model.output_attn_res_proj.weight');
  }
  yield matrix('lm_head.weight', cfg.vocab, H, inv(H));
}
