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

/**
 * The gated activation of every FFN: SiLU(g)·u (Kimi-Linear), SiTU-GLU with its two βs (K3), or
 * gpt-oss's clamped GLU: g' = min(g, limit), u' = clamp(u, ±limit), g'·σ(α·g')·(u' + 1).
 */
export type Activation = { kind: 'silu' } | { kind: 'situ'; beta: number; linearBeta: number } | { kind: 'clamped'; alpha: number; limit: number };

/** a ← act(a, b) over n values. */
export function activate(k: Kernels, act: Activation, a: Float32Array, b: Float32Array, n: number): void {
  if (act.kind === 'silu') k.siluMul(a, b, n);
  else if (act.kind === 'situ') k.situMul(a, b, n, act.beta, act.linearBeta);
  else clampedGlu(a, b, n, act.alpha, act.limit);
}

/**
 * gpt-oss's GLU, elementwise on the calling thread (in f64, each value rounded to f32 once): the
 * same bits whatever the kernels or their threads. No kernel computes it fused (the kernels'
 * vqExperts is never given it: the MoE block runs such experts one product at a time).
 */
export function clampedGlu(a: Float32Array, b: Float32Array, n: number, alpha: number, limit: number): void {
  for (let i = 0; i < n; i++) {
    const g = Math.min(a[i], limit);
    const u = Math.min(limit, Math.max(-limit, b[i]));
    a[i] = ((g / (1 + Math.exp(-alpha * g))) * (u + 1));
  }
}

/** A gated feed-forward of the T rows of `x` (usually `s.norm`), into `dst` [T][hidden]. */
export function ffn(k: Kernels, act: Activation, w: FfnWeights, T: number, s: FfnScratch, dst: Float32Array, x: Float32Array = s.norm): void {
  const I = w.gate.rows;
  k.matmulMany([w.gate, w.up], x, [s.ffA, s.ffB], T);
  activate(k, act, s.ffA, s.ffB, T * I);
  k.matmul(w.down, s.ffA, dst, T);
}
