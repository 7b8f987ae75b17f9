// Small per-token operations, run on one thread.
import { hsum, sumSquares } from './common';

/** out = w ⊙ x / sqrt(mean(x²) + eps) */
export function rmsnorm(x: usize, w: usize, out: usize, n: i32, eps: f32): void {
  const ss = sumSquares(x, n);
  const r = f32x4.splat(<f32>(1.0 / Math.sqrt(<f64>ss / <f64>n + <f64>eps)));
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    v128.store(out + o, f32x4.mul(f32x4.mul(v128.load(x + o), r), v128.load(w + o)));
  }
  const rs = f32x4.extract_lane(r, 0);
  for (; i < n; i++) store<f32>(out + (<usize>i << 2), load<f32>(x + (<usize>i << 2)) * rs * load<f32>(w + (<usize>i << 2)));
}

/** a ← silu(a) · b */
export function silu_mul(a: usize, b: usize, n: i32): void {
  for (let i = 0; i < n; i++) {
    const o = <usize>i << 2;
    const z = <f64>load<f32>(a + o);
    store<f32>(a + o, <f32>(z / (1.0 + Math.exp(-z))) * load<f32>(b + o));
  }
}

// @ts-ignore: decorator
@inline function sigmoid64(z: f64): f64 {
  return 1.0 / (1.0 + Math.exp(-z));
}

/** a ← SiTU-GLU(a, b) = β·tanh(a/β)·σ(a) · β_l·tanh(b/β_l) (b as it is when β_l is 0) */
export function situ_mul(a: usize, b: usize, n: i32, beta: f32, linearBeta: f32): void {
  const bt = <f64>beta;
  const bl = <f64>linearBeta;
  for (let i = 0; i < n; i++) {
    const o = <usize>i << 2;
    const g = <f64>load<f32>(a + o);
    const u = <f64>load<f32>(b + o);
    const gate = bt * Math.tanh(g / bt) * sigmoid64(g);
    store<f32>(a + o, <f32>(gate * (bl > 0 ? bl * Math.tanh(u / bl) : u)));
  }
}

/** a ← a · σ(g) */
export function sigmoid_mul(a: usize, g: usize, n: i32): void {
  for (let i = 0; i < n; i++) {
    const o = <usize>i << 2;
    store<f32>(a + o, load<f32>(a + o) * <f32>sigmoid64(<f64>load<f32>(g + o)));
  }
}

/**
 * Attention-residual mix: candidates blocks[0..n) ([n][H]) then cur; score_i = (w·v_i) /
 * sqrt(mean(v_i²) + eps); out = Σ softmax(score)_i v_i, in candidate order. Sums in f64 (at most
 * a few candidates of a few thousand values: exactness is cheap here). `scores` holds n + 1 f64.
 */
export function attn_res(blocks: usize, n: i32, cur: usize, w: usize, H: i32, eps: f32, out: usize, scores: usize): void {
  let max: f64 = -Infinity;
  for (let i = 0; i <= n; i++) {
    const v = i < n ? blocks + <usize>i * <usize>H * 4 : cur;
    let ss: f64 = 0, dot: f64 = 0;
    for (let j = 0; j < H; j++) {
      const x = <f64>load<f32>(v + (<usize>j << 2));
      ss += x * x;
      dot += x * <f64>load<f32>(w + (<usize>j << 2));
    }
    const s = dot / Math.sqrt(ss / <f64>H + <f64>eps);
    store<f64>(scores + (<usize>i << 3), s);
    if (s > max) max = s;
  }
  let sum: f64 = 0;
  for (let i = 0; i <= n; i++) {
    const e = Math.exp(load<f64>(scores + (<usize>i << 3)) - max);
    store<f64>(scores + (<usize>i << 3), e);
    sum += e;
  }
  for (let i = 0; i <= n; i++) store<f64>(scores + (<usize>i << 3), load<f64>(scores + (<usize>i << 3)) / sum);
  for (let j = 0; j < H; j++) {
    let acc: f64 = 0;
    for (let i = 0; i <= n; i++) {
      const v = i < n ? blocks + <usize>i * <usize>H * 4 : cur;
      acc += load<f64>(scores + (<usize>i << 3)) * <f64>load<f32>(v + (<usize>j << 2));
    }
    store<f32>(out + (<usize>j << 2), <f32>acc);
  }
}

/** x ← x + y */
export function add(x: usize, y: usize, n: i32): void {
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const o = <usize>i << 2;
    v128.store(x + o, f32x4.add(v128.load(x + o), v128.load(y + o)));
  }
  for (; i < n; i++) store<f32>(x + (<usize>i << 2), load<f32>(x + (<usize>i << 2)) + load<f32>(y + (<usize>i << 2)));
}

/**
 * Router for one token: scores = sigmoid(logits) in place; pick the top k of score + bias (ties to
 * the lower id) into ids; their combine weights use the unbiased score, renormalised (if asked)
 * and scaled.
 */
export function moe_route(logits: usize, bias: usize, E: i32, K: i32, ids: usize, w: usize, renorm: i32, scale: f32): void {
  for (let e = 0; e < E; e++) {
    const o = <usize>e << 2;
    store<f32>(logits + o, <f32>(1.0 / (1.0 + Math.exp(-<f64>load<f32>(logits + o)))));
  }
  for (let j = 0; j < K; j++) {
    let best = -1;
    let bestV: f32 = 0;
    for (let e = 0; e < E; e++) {
      let taken = false;
      for (let p = 0; p < j; p++) if (load<i32>(ids + (<usize>p << 2)) == e) taken = true;
      if (taken) continue;
      const v = load<f32>(logits + (<usize>e << 2)) + load<f32>(bias + (<usize>e << 2));
      if (best < 0 || v > bestV) {
        best = e;
        bestV = v;
      }
    }
    store<i32>(ids + (<usize>j << 2), best);
    store<f32>(w + (<usize>j << 2), load<f32>(logits + (<usize>best << 2)));
  }
  if (renorm && K > 1) {
    let s: f32 = 0;
    for (let j = 0; j < K; j++) s += load<f32>(w + (<usize>j << 2));
    s += 1e-20;
    for (let j = 0; j < K; j++) store<f32>(w + (<usize>j << 2), load<f32>(w + (<usize>j << 2)) / s);
  }
  for (let j = 0; j < K; j++) store<f32>(w + (<usize>j << 2), load<f32>(w + (<usize>j << 2)) * scale);
}

/** out[i] = Σ_j w[j]·eo[j][i] (j in order) + shared[i] when `shared` is nonzero. */
export function moe_combine(out: usize, eo: usize, w: usize, K: i32, H: i32, shared: usize): void {
  for (let i = 0; i < H; i++) {
    let acc: f32 = 0;
    for (let j = 0; j < K; j++) acc += load<f32>(w + (<usize>j << 2)) * load<f32>(eo + ((<usize>j * <usize>H + <usize>i) << 2));
    if (shared) acc += load<f32>(shared + (<usize>i << 2));
    store<f32>(out + (<usize>i << 2), acc);
  }
}

/**
 * The memory read bandwidth probe: rows [r0, r1) of `rowBytes` each are summed with v128 loads in
 * four independent streams, one float per row stored to `out` so nothing is optimised away.
 */
export function read_bw(p: usize, rowBytes: i32, out: usize, _tmp: usize, r0: i32, r1: i32): void {
  const q = <usize>rowBytes >> 2;
  for (let r = r0; r < r1; r++) {
    const base = p + <usize>r * <usize>rowBytes;
    let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
    for (let i: usize = 0; i + 32 <= q; i += 32) {
      a0 = f32x4.add(a0, v128.load(base + i));
      a1 = f32x4.add(a1, v128.load(base + q + i));
      a2 = f32x4.add(a2, v128.load(base + 2 * q + i));
      a3 = f32x4.add(a3, v128.load(base + 3 * q + i));
      a0 = f32x4.add(a0, v128.load(base + i, 16));
      a1 = f32x4.add(a1, v128.load(base + q + i, 16));
      a2 = f32x4.add(a2, v128.load(base + 2 * q + i, 16));
      a3 = f32x4.add(a3, v128.load(base + 3 * q + i, 16));
    }
    store<f32>(out + (<usize>r << 2), hsum(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3))));
  }
}
