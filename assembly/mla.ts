// Multi-head latent attention without RoPE over the cache of compressed latents, with kv_b_proj
// absorbed into the query (W_UK) and the output (W_UV): per head, one pass, no decompressed K or V.
import { Q4G, Q8G, hsum } from './common';
import { act_prep } from './prep';
import { dotRow, mvt } from './matmul';

// @ts-ignore: decorator
@inline function dot(a: usize, b: usize, n: i32): f32 {
  let acc = f32x4.splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) acc = f32x4.add(acc, f32x4.mul(v128.load(a + (<usize>i << 2)), v128.load(b + (<usize>i << 2))));
  let s = hsum(acc);
  for (; i < n; i++) s += load<f32>(a + (<usize>i << 2)) * load<f32>(b + (<usize>i << 2));
  return s;
}

/**
 * Heads [h0, h1) of one query at position n−1 over latents cache[0..n) (each `latd` wide: the
 * normalised latent of kvl values, then the rope key of `rope` values):
 *   qlat = W_UK[h]ᵀ q_nope;  score_s = (qlat·c_s + q_pe·k_pe_s)·scale;  p = softmax(score);
 *   ctx = Σ_s p_s c_s;  o[h] = W_UV[h] · ctx.
 * `qlat`, `scores` ([H][n]) and `ctx` are per-head scratch; kv_b_proj is W (rows head-major,
 * nope rows of W_UK then vh rows of W_UV per head, kvl columns).
 */
export function mla_heads(fmt: i32, W: usize, S: usize, rowBytes: i32, groups: i32, G: i32,
  q: usize, nope: i32, rope: i32, vh: i32, kvl: i32, cache: usize, latd: i32, n: i32, scale: f32,
  qlat: usize, scores: usize, ctx: usize, o: usize, tmp: usize, h0: i32, h1: i32): void {
  const qd = nope + rope;
  for (let h = h0; h < h1; h++) {
    const qh = q + <usize>h * <usize>qd * 4;
    const ql = qlat + <usize>h * <usize>kvl * 4;
    const sc = scores + <usize>h * <usize>n * 4;
    const cx = ctx + <usize>h * <usize>kvl * 4;
    const wrow = h * (nope + vh);
    mvt(fmt, W, S, qh, ql, wrow, nope, kvl, rowBytes, groups, G, tmp, 0, kvl);
    let mx: f32 = -Infinity;
    for (let s = 0; s < n; s++) {
      const c = cache + <usize>s * <usize>latd * 4;
      const a = (dot(ql, c, kvl) + dot(qh + (<usize>nope << 2), c + (<usize>kvl << 2), rope)) * scale;
      store<f32>(sc + (<usize>s << 2), a);
      if (a > mx) mx = a;
    }
    let sum: f32 = 0;
    for (let s = 0; s < n; s++) {
      const e = <f32>Math.exp(<f64>(load<f32>(sc + (<usize>s << 2)) - mx));
      store<f32>(sc + (<usize>s << 2), e);
      sum += e;
    }
    for (let j = 0; j < kvl; j++) store<f32>(cx + (<usize>j << 2), 0);
    for (let s = 0; s < n; s++) {
      const p = f32x4.splat(load<f32>(sc + (<usize>s << 2)) / sum);
      const ps = load<f32>(sc + (<usize>s << 2)) / sum;
      const c = cache + <usize>s * <usize>latd * 4;
      let j = 0;
      for (; j + 4 <= kvl; j += 4) {
        const o4 = <usize>j << 2;
        v128.store(cx + o4, f32x4.add(v128.load(cx + o4), f32x4.mul(p, v128.load(c + o4))));
      }
      for (; j < kvl; j++) store<f32>(cx + (<usize>j << 2), load<f32>(cx + (<usize>j << 2)) + ps * load<f32>(c + (<usize>j << 2)));
    }
    if (fmt == Q8G || fmt == Q4G) act_prep(cx, kvl, G, fmt == Q4G ? 1 : 0, 1, tmp);
    for (let i = 0; i < vh; i++) {
      store<f32>(o + (<usize>(h * vh + i) << 2), dotRow(fmt, W, S, wrow + nope + i, cx, tmp, kvl, rowBytes, groups, G));
    }
  }
}
