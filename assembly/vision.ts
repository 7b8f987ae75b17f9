// The vision tower's own operations: bidirectional attention over an image's patches and GELU.
import { dotF32 } from './matmul';

/**
 * Full (bidirectional) softmax attention for the query rows q0 + [i0, i1) of a packed qkv buffer
 * [L][3][heads][hd] (row stride 3·heads·hd floats), every head; out [L][heads][hd]. Each output row
 * is computed from its own query and every key and value in one fixed order, so any split of the
 * rows across threads gives the same bits. `tmp` holds L f32 scores.
 */
export function vit_attn(qkv: usize, L: i32, heads: i32, hd: i32, scale: f32, out: usize, q0: i32, tmp: usize, i0: i32, i1: i32): void {
  const Q = <usize>heads * <usize>hd;
  const stride = Q * 12; // a row of qkv: 3·Q floats of 4 bytes
  for (let i = q0 + i0; i < q0 + i1; i++) {
    for (let h = 0; h < heads; h++) {
      const q = qkv + <usize>i * stride + ((<usize>h * <usize>hd) << 2);
      let max: f32 = -Infinity;
      for (let j = 0; j < L; j++) {
        const k = qkv + <usize>j * stride + ((Q + <usize>h * <usize>hd) << 2);
        const s = dotF32(q, k, hd) * scale;
        store<f32>(tmp + (<usize>j << 2), s);
        if (s > max) max = s;
      }
      // weights in f32, their sum in f64: the normaliser carries no rounding of its own
      let sum: f64 = 0;
      for (let j = 0; j < L; j++) {
        const e = <f32>Math.exp(<f64>(load<f32>(tmp + (<usize>j << 2)) - max));
        store<f32>(tmp + (<usize>j << 2), e);
        sum += <f64>e;
      }
      const inv = <f32>(1.0 / sum);
      const o = out + ((<usize>i * Q + <usize>h * <usize>hd) << 2);
      let d = 0;
      for (; d + 4 <= hd; d += 4) {
        let acc = f32x4.splat(0);
        for (let j = 0; j < L; j++) {
          const v = qkv + <usize>j * stride + ((2 * Q + <usize>h * <usize>hd + <usize>d) << 2);
          acc = f32x4.add(acc, f32x4.mul(f32x4.splat(load<f32>(tmp + (<usize>j << 2))), v128.load(v)));
        }
        v128.store(o + (<usize>d << 2), f32x4.mul(acc, f32x4.splat(inv)));
      }
      for (; d < hd; d++) {
        let acc: f32 = 0;
        for (let j = 0; j < L; j++) acc += load<f32>(tmp + (<usize>j << 2)) * load<f32>(qkv + <usize>j * stride + ((2 * Q + <usize>h * <usize>hd + <usize>d) << 2));
        store<f32>(o + (<usize>d << 2), acc * inv);
      }
    }
  }
}

/** erf(x) in f64: its Maclaurin series near zero, the continued fraction of erfc further out. */
function erf64(x: f64): f64 {
  const ax = Math.abs(x);
  if (ax >= 6.0) return x > 0 ? 1.0 : -1.0;
  if (ax <= 2.5) {
    // Σ (−1)^n x^(2n+1) / (n! (2n+1)) · 2/√π; terms fall below 1e-17 of the sum well before n = 60
    const x2 = x * x;
    let term = x;
    let sum = x;
    for (let n = 1; n < 80; n++) {
      term *= -x2 / <f64>n;
      const t = term / <f64>(2 * n + 1);
      sum += t;
      if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
    }
    return sum * 1.1283791670955126;
  }
  // erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + …))))), evaluated bottom-up
  let f: f64 = ax;
  for (let k = 60; k >= 1; k--) f = ax + (<f64>k * 0.5) / f;
  const erfc = Math.exp(-ax * ax) / (f * 1.7724538509055159);
  return x > 0 ? 1.0 - erfc : erfc - 1.0;
}

/**
 * a ← gelu(a) over n values: the tanh approximation (the encoder's `gelu_pytorch_tanh`) or, with
 * `exact`, 0.5·z·(1 + erf(z/√2)) (the projector's `gelu`). Evaluated in f64.
 */
export function gelu(a: usize, n: i32, exact: i32): void {
  for (let i = 0; i < n; i++) {
    const p = a + (<usize>i << 2);
    const z = <f64>load<f32>(p);
    const g = exact ? 0.5 * z * (1.0 + erf64(z * 0.7071067811865476)) : 0.5 * z * (1.0 + Math.tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    store<f32>(p, <f32>g);
  }
}

/** erf at one point, exported for the known-answer test of erf64. */
export function erf_at(x: f64): f64 {
  return erf64(x);
}
