import type { Tensor } from '../../container/tensor.js';
import type { Kernels } from '../../kernels/types.js';

/** The working buffers a dense FFN uses. */
export interface FfnScratch {
  /** [T][hidden] the normed input. */
  norm: Float32Array;
  /** [T][inter] each the gate's and the up projection's output. */
  ffA: Float32Array;
  ffB: Float32Array;
}

export interface FfnWeights {
  gate: Tensor;
  up: Tensor;
  down: Tensor;
}

/** The gated activation of every FFN: SiLU(g)·u (Kimi-Linear), or SiTU-GLU with its two βs (K3). */
export type Activation = { kind: 'silu' } | { kind: 'situ'; beta: number; linearBeta: number };

/** a ← act(a, b) over n values. */
export function activate(k: Kernels, act: Activation, a: Float32Array, b: Float32Array, n: number): void {
  if (act.kind === 'silu') k.siluMul(a, b, n);
  else k.situMul(a, b, n, act.beta, act.linearBeta);
}

/** A gated feed-forward of the T rows of `x` (usually `s.norm`), into `dst` [T][hidden]. */
export function ffn(k: Kernels, act: Activation, w: FfnWeights, T: number, s: FfnScratch, dst: Float32Array, x: Float32Array = s.norm): void {
  const I = w.gate.rows;
  k.matmulMany([w.gate, w.up], x, [s.ffA, s.ffB], T);
  activate(k, act, s.ffA, s.ffB, T * I);
  k.matmul(w.down, s.ffA, dst, T);
}
