import type { Tensor } from '../../container/tensor.js';
import type { Kernels } from '../../kernels/types.js';

/** The working buffers KDA uses ([T][…] rows of the chunk in flight). */
export interface KdaScratch {
  norm: Float32Array;
  out: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  g: Float32Array;
  gate: Float32Array;
  low: Float32Array;
  beta: Float32Array;
  o: Float32Array;
}

/** L2-norm epsilon inside the square root (fla's l2norm). */
const L2_EPS = 1e-6;

export interface KdaShape {
  heads: number;
  headDim: number;
  convKernel: number;
  /** The bounded decay gate g = lb·σ(exp(A)·z) with lb < 0 (K3); absent: g = −exp(A)·softplus(z) (Kimi-Linear). */
  gateLowerBound?: number;
}

export interface KdaWeights {
  kind: 'kda';
  qProj: Tensor;
  kProj: Tensor;
  vProj: Tensor;
  /** q, k, v depthwise conv taps [C][K], the last tap multiplying the current token. */
  conv: [Float32Array, Float32Array, Float32Array];
  fA: Tensor;
  fB: Tensor;
  dtBias: Float32Array;
  /** One log decay scale per head. */
  aLog: Float32Array;
  bProj: Tensor;
  /** The output gate's logits: low rank (g_a then g_b, Kimi-Linear) or one full-rank matrix (K3). */
  gate: { low: [Tensor, Tensor] } | { full: Tensor };
  oNorm: Float32Array;
  oProj: Tensor;
}

/** One sequence's KDA state in one layer: S [H][D][D] and the short convolutions' history. */
export interface KdaState {
  S: Float32Array;
  conv: Float32Array;
}

/**
 * Kimi Delta Attention over the T normed tokens in `s.norm` (output in `s.out`): short convs, the
 * decay gate, β, L2-normalised q/k, the delta rule, the gated output norm. `st` is the one
 * sequence's state, or each row's (a batched step: rows of different sequences).
 */
export function kda(k: Kernels, c: KdaShape, eps: number, w: KdaWeights, st: KdaState | readonly KdaState[], T: number, s: KdaScratch): void {
  const { heads: NH, headDim: D, convKernel: K } = c;
  const C = NH * D;
  // every product of the normed tokens at once (one preparation of them, one dispatch)
  const full = 'full' in w.gate ? w.gate.full : undefined;
  k.matmulMany(full ? [w.qProj, w.kProj, w.vProj, w.fA, w.bProj, full] : [w.qProj, w.kProj, w.vProj, w.fA, w.bProj], s.norm, full ? [s.q, s.k, s.v, s.low, s.beta, s.gate] : [s.q, s.k, s.v, s.low, s.beta], T);
  k.matmul(w.fB, s.low, s.g, T);
  if ('low' in w.gate) {
    k.matmul(w.gate.low[0], s.norm, s.low, T);
    k.matmul(w.gate.low[1], s.low, s.gate, T);
  }
  for (let t = 0; t < T; t++) {
    const part = (b: Float32Array, n: number) => b.subarray(t * n, (t + 1) * n);
    const q = part(s.q, C);
    const kk = part(s.k, C);
    const v = part(s.v, C);
    const g = part(s.g, C);
    const beta = part(s.beta, NH);
    const o = part(s.o, C);
    const r = 'S' in st ? st : st[t];
    k.kdaPrep({ q, k: kk, v, taps: w.conv, ring: r.conv, C, K, g, dtBias: w.dtBias, aLog: w.aLog, beta, H: NH, D, l2eps: L2_EPS, lowerBound: c.gateLowerBound });
    k.kdaStep(NH, D, q, kk, v, g, beta, r.S, o);
    k.kdaOut(o, part(s.gate, C), w.oNorm, NH, D, eps);
  }
  k.matmul(w.oProj, s.o, s.out, T);
}
