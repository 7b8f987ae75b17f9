// Multi-head latent attention without RoPE over the cache of compressed latents, with kv_b_proj
// absorbed into the query (W_UK) and the output (W_UV): per head, one pass, no decompressed K or V.
import { Q4G, Q8G } from './common';
import { act_prep } from './prep';
import { dotF32 as dot, dotRow, mvt } from './matmul';

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
  const lb = <usize>latd * 4;
  for (let h = h0; h < h1; h++)
    mvt(fmt, W, S, q + <usize>h * <usize>qd * 4, qlat + <usize>h * <usize>kvl * 4, h * (nope + vh), nope, kvl, rowBytes, groups, G, tmp, 0, kvl);
  // Positions outermost, so the cache streams through once for all the heads of this range.
  for (let s = 0; s < n; s++) {
    const c = cache + <usize>s * lb;
    for (let h = h0; h < h1; h++) {
      const a = (dot(qlat + <usize>h * <usize>kvl * 4, c, kvl) + dot(q + (<usize>(h * qd + nope) << 2), c + (<usize>kvl << 2), rope)) * scale;
      store<f32>(scores + ((<usize>h * <usize>n + <usize>s) << 2), a);
    }
  }
  for (let h = h0; h < h1; h++) {
    const sc = scores + <usize>h * <usize>n * 4;
    let mx: f32 = -Infinity;
    for (let s = 0; s < n; s++) mx = max(mx, load<f32>(sc + (<usize>s << 2)));
    let sum: f32 = 0;
    for (let s = 0; s < n; s++) {
      const e = <f32>Math.exp(<f64>(load<f32>(sc + (<usize>s << 2)) - mx));
      store<f32>(sc + (<usize>s << 2), e);
      sum += e;
    }
    for (let s = 0; s < n; s++) store<f32>(sc + (<usize>s << 2), load<f32>(sc + (<usize>s << 2)) / sum);
    const cx = ctx + <usize>h * <usize>kvl * 4;
    for (let j = 0; j < kvl; j++) store<f32>(cx + (<usize>j << 2), 0);
  }
  for (let s = 0; s < n; s++) {
    const c = cache + <usize>s * lb;
    for (let h = h0; h < h1; h++) {
      const ps = load<f32>(scores + ((<usize>h * <usize>n + <usize>s) << 2));
      const p = f32x4.splat(ps);
      const cx = ctx + <usize>h * <usize>kvl * 4;
      let j = 0;
      for (; j + 4 <= kvl; j += 4) {
        const o4 = <usize>j << 2;
        v128.store(cx + o4, f32x4.add(v128.load(cx + o4), f32x4.mul(p, v128.load(c + o4))));
      }
      for (; j < kvl; j++) store<f32>(cx + (<usize>j << 2), load<f32>(cx + (<usize>j << 2)) + ps * load<f32>(c + (<usize>j << 2)));
    }
  }
  for (let h = h0; h < h1; h++) {
    const cx = ctx + <usize>h * <usize>kvl * 4;
    if (fmt == Q8G || fmt == Q4G) act_prep(cx, kvl, G, fmt == Q4G ? 1 : 0, 1, tmp);
    const wrow = h * (nope + vh);
    for (let i = 0; i < vh; i++) {
      store<f32>(o + (<usize>(h * vh + i) << 2), dotRow(fmt, W, S, wrow + nope + i, cx, tmp, kvl, rowBytes, groups, G));
    }
  }
}
