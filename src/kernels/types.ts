import type { Tensor } from '../container/tensor.js';

/**
 * Every numeric operation the model code performs, behind one interface so implementations can be
 * swapped (plain TypeScript reference here; WebAssembly SIMD later). Contract for all of them:
 * each output element is computed by arithmetic that depends only on its own inputs, in a fixed
 * order — never on how many rows, tokens or threads share the call — so a batched call is
 * bit-identical to the same rows computed one at a time.
 */
export interface Kernels {
  readonly name: string;

  /** y[i] = W[row0 + i] · x, for i < n (default: all rows). */
  matvec(w: Tensor, x: Float32Array, y: Float32Array, row0?: number, n?: number): void;

  /** Y[t·rows + i] = W[i] · X[t·cols …], for t < T: T matvecs sharing one pass over W. */
  matmul(w: Tensor, X: Float32Array, Y: Float32Array, T: number): void;

  /** y[j] = Σ_i c[i] · W[row0 + i][j], for j < cols (a transposed product over a row range). */
  matvecT(w: Tensor, c: Float32Array, y: Float32Array, row0: number, n: number): void;

  /** out = w ⊙ x / sqrt(mean(x²) + eps) over n values starting at xOff / outOff. */
  rmsnorm(x: Float32Array, w: Float32Array, eps: number, out: Float32Array, n: number, xOff?: number, outOff?: number): void;

  /**
   * Residual-VQ lookup table for one input vector x[n]:
   * lut[(v·stages + s)·entries + e] = x[v·vecDim … +vecDim] · book[base + s][e].
   */
  vqLut(books: Float32Array, base: number, stages: number, entries: number, vecDim: number, x: Float32Array, n: number, lut: Float32Array): void;

  /**
   * y[r] = scale[r] · Σ_v Σ_s lut[(v·stages + s)·entries + idx(r, v, s)], for r < rows, reading the
   * blocked indices at `rec[idxOff…]` and the f16 row scales at `rec[scaleOff…]`.
   */
  vqApply(rec: Uint8Array, idxOff: number, scaleOff: number, rows: number, cols: number, g: VqGeometry, lut: Float32Array, y: Float32Array): void;

  /**
   * One gated delta-rule step for H heads of dimension D, in place on S [H][D][D] (key × value):
   * S ← diag(exp(g))·S; u = β(v − Sᵀk); S ← S + k⊗u; o = Sᵀq. q and k are already L2-normalised.
   */
  kdaStep(H: number, D: number, q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array, o: Float32Array): void;

  /**
   * Softmax attention of one query over `n` cached latents of width `stride`:
   * score[s] = (qLat · c_s[0..kvl) + qPe · c_s[kvl..kvl+rope)) · scale; ctx = Σ softmax(score)_s c_s[0..kvl).
   */
  attendLatent(qLat: Float32Array, qPe: Float32Array, qPeOff: number, cache: Float32Array, n: number, stride: number, kvl: number, rope: number, scale: number, scores: Float32Array, ctx: Float32Array): void;
}

export interface VqGeometry {
  stages: number;
  entries: number;
  vecDim: number;
  indexBlock: number;
}
