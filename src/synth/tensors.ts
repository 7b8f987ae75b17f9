import type { KimiLinearConfig } from '../model/kimi-linear/config.js';

/**
 * Every tensor of a Kimi-Linear model by its HuggingFace name, in the order the synthetic writers
 * draw them: matrices with the standard deviation their values get, vectors (norms, biases, gate
 * parameters, conv taps) with the range theirs are drawn from. Routed experts are marked: a
 * checkpoint holds them as matrices, a container as VQ records.
 */
export type SynthTensor =
  | { kind: 'matrix'; name: string; rows: number; cols: number; std: number; expert?: boolean }
  | { kind: 'vector'; name: string; shape: number[]; lo: number; hi: number };

export function* kimiLinearTensors(cfg: KimiLinearConfig): Generator<SynthTensor> {
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false): SynthTensor => ({ kind: 'matrix', name, rows, cols, std, expert });
  const vector = (name: string, shape: number[], lo: number, hi: number): SynthTensor => ({ kind: 'vector', name, shape, lo, hi });
  const H = cfg.hidden;
  const inv = (n: number) => 1 / Math.sqrt(n);
  yield matrix('model.embed_tokens.weight', cfg.vocab, H, 1);
  for (let L = 0; L < cfg.layers; L++) {
    const p = `model.layers.${L}.`;
    const a = `${p}self_attn.`;
    yield vector(`${p}input_layernorm.weight`, [H], 0.8, 1.2);
    yield vector(`${p}post_attention_layernorm.weight`, [H], 0.8, 1.2);
    if (cfg.layerKinds[L].attn === 'kda') {
      const { heads: NH, headDim: D, convKernel: K } = cfg.kda;
      const C = NH * D;
      for (const x of ['q', 'k', 'v']) yield matrix(`${a}${x}_proj.weight`, C, H, inv(H));
      for (const x of ['q', 'k', 'v']) yield vector(`${a}${x}_conv1d.weight`, [C, 1, K], -0.6, 0.6);
      yield matrix(`${a}f_a_proj.weight`, D, H, inv(H));
      yield matrix(`${a}f_b_proj.weight`, C, D, inv(D));
      yield vector(`${a}dt_bias`, [C], -1, 1);
      yield vector(`${a}A_log`, [1, 1, NH, 1], -1.5, 0.5);
      yield matrix(`${a}b_proj.weight`, NH, H, inv(H));
      yield matrix(`${a}g_a_proj.weight`, D, H, inv(H));
      yield matrix(`${a}g_b_proj.weight`, C, D, inv(D));
      yield vector(`${a}o_norm.weight`, [D], 0.8, 1.2);
      yield matrix(`${a}o_proj.weight`, H, C, inv(C));
    } else {
      const m = cfg.mla;
      yield matrix(`${a}q_proj.weight`, m.heads * (m.qkNope + m.qkRope), H, inv(H));
      yield matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H, inv(H));
      yield vector(`${a}kv_a_layernorm.weight`, [m.kvLoraRank], 0.8, 1.2);
      yield matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank, inv(m.kvLoraRank));
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
      yield matrix(`${m}gate.weight`, E, H, inv(H));
      yield vector(`${m}gate.e_score_correction_bias`, [E], -0.1, 0.1);
      for (let e = 0; e < E; e++) {
        yield matrix(`${m}experts.${e}.w1.weight`, I, H, inv(H), true);
        yield matrix(`${m}experts.${e}.w3.weight`, I, H, inv(H), true);
        yield matrix(`${m}experts.${e}.w2.weight`, H, I, inv(I), true);
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
  yield matrix('lm_head.weight', cfg.vocab, H, inv(H));
}
