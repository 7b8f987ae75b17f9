import type { Tensor } from '../../container/tensor.js';
import type { Kernels } from '../../kernels/types.js';
import type { Rope } from './rope.js';

/** The working buffers MLA uses ([T][…] rows of the chunk in flight, and per-head scratch). */
export interface MlaScratch {
  norm: Float32Array;
  out: Float32Array;
  q: Float32Array;
  qa: Float32Array;
  kv: Float32Array;
  gate: Float32Array;
  o: Float32Array;
  qLat: Float32Array;
  scores: Float32Array;
  ctx: Float32Array;
}

export interface MlaShape {
  heads: number;
  kvLoraRank: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
}

export interface MlaWeights {
  kind: 'mla';
  /** The query: one projection (Kimi-Linear), or compressed — q_a, its norm, q_b (K3). */
  q: { proj: Tensor } | { a: Tensor; norm: Float32Array; b: Tensor };
  kvA: Tensor;
  kvNorm: Float32Array;
  kvB: Tensor;
  /** A sigmoid gate on the heads' output before o_proj (K3). */
  gProj?: Tensor;
  oProj: Tensor;
  /** Biases on q_a_proj, kv_a_proj_with_mqa and o_proj (DeepSeek-V3's `attention_bias`; no release has them). */
  bias?: { qA?: Float32Array; kvA: Float32Array; o: Float32Array };
}

/** DeepSeek-V3's decoupled RoPE: the last qk_rope dims of each head's query and the shared k_pe rotated to the token's position (rotated before caching), and the softmax scale. */
export interface MlaRope {
  rope: Rope;
  scale: number;
}

/**
 * Multi-head latent attention (without RoPE unless `dr` is given, as in Kimi) over the T normed tokens in `s.norm` (output in
 * `s.out`), caching only the normalised latent and k_pe; kv_b absorbed into the query and output.
 * One sequence's cache and its first row's position, or each row's (a batched step: rows of
 * different sequences, each attending over its own cache).
 */
export function mla(k: Kernels, c: MlaShape, eps: number, w: MlaWeights, caches: Float32Array | readonly Float32Array[], pos0: number | readonly number[], T: number, s: MlaScratch, dr?: MlaRope): void {
  const { heads: NH, kvLoraRank: kvl, qkNope: nope, qkRope: rope, vHead: vh } = c;
  const qd = nope + rope;
  const latd = kvl + rope;
  // the products of the normed tokens at once (one preparation of them, one dispatch)
  const q0 = 'proj' in w.q ? w.q.proj : w.q.a;
  const ws = [q0, w.kvA];
  const ys = ['proj' in w.q ? s.q : s.qa, s.kv];
  if (w.gProj) ws.push(w.gProj), ys.push(s.gate);
  k.matmulMany(ws, s.norm, ys, T);
  const bias = (x: Float32Array, b: Float32Array) => {
    for (let t = 0; t < T; t++) k.add(x.subarray(t * b.length, (t + 1) * b.length), b, b.length);
  };
  if (w.bias?.qA) bias(s.qa, w.bias.qA);
  if (w.bias) bias(s.kv, w.bias.kvA);
  if (!('proj' in w.q)) {
    const r = w.q.a.rows;
    // the C engine and vLLM normalise with the model's rms_norm_eps (HF builds this norm with 1e-6)
    for (let t = 0; t < T; t++) k.rmsnorm(s.qa, w.q.norm, eps, s.qa, r, t * r, t * r);
    k.matmul(w.q.b, s.qa, s.q, T);
  }
  for (let t = 0; t < T; t++) {
    const pos = typeof pos0 === 'number' ? pos0 + t : pos0[t];
    const cache = caches instanceof Float32Array ? caches : caches[t];
    const ckv = s.kv.subarray(t * latd, (t + 1) * latd);
    // The C engine and vLLM normalise the latent with the model's rms_norm_eps; HF's default is 1e-6.
    k.rmsnorm(ckv, w.kvNorm, eps, cache, kvl, 0, pos * latd);
    cache.set(ckv.subarray(kvl, latd), pos * latd + kvl);
    if (dr) {
      dr.rope.apply(s.q, t * NH * qd + nope, NH, qd, pos);
      dr.rope.apply(cache, pos * latd + kvl, 1, rope, pos);
    }
    k.mlaHeads({
      kvB: w.kvB,
      q: s.q.subarray(t * NH * qd, (t + 1) * NH * qd),
      heads: NH,
      nope,
      rope,
      vh,
      kvl,
      cache,
      n: pos + 1,
      scale: dr ? dr.scale : 1 / Math.sqrt(qd),
      qLat: s.qLat,
      scores: s.scores,
      ctx: s.ctx,
      o: s.o.subarray(t * NH * vh, (t + 1) * NH * vh),
    });
  }
  if (w.gProj) k.sigmoidMul(s.o, s.gate, T * NH * vh);
  k.matmul(w.oProj, s.o, s.out, T);
  if (w.bias) bias(s.out, w.bias.o);
}
