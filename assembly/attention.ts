// Causal softmax attention over a key/value cache: the attention of every family whose layers
// keep keys and values (GQA, MQA, MHA; sliding windows; gpt-oss's sinks).
import { dotF32 } from './matmul';

/**
 * One token's query heads [h0, h1) over the cached positions lo..hi (inclusive):
 *   score_j = (q_h · k_j)·scale;  p = softmax(score_lo..hi, and the head's sink logit if any);
 *   out_h = Σ_j p_j v_j.
 * q [H][D] (rotated); the caches K and V are [slots][KVH][D], position j in slot j mod slots (a
 * ring for sliding-window layers, whose slots are the window); query head h reads kv head
 * h / rep (rep = H / KVH). A sink takes part in the normaliser only. Weights are f32 and their sum
 * f64 (as vit_attn), in position order, so any split of the heads gives the same bits.
 * `scores` holds (hi − lo + 1) f32 per head, at h·(hi − lo + 1).
 */
export function attend(q: usize, kc: usize, vc: usize, slots: i32, kvh: i32, D: i32, rep: i32, lo: i32, hi: i32, scale: f32, sinks: usize,
  scores: usize, out: usize, _tmp: usize, h0: i32, h1: i32): void {
  const n = hi - lo + 1;
  const row = <usize>kvh * <usize>D * 4;
  for (let h = h0; h < h1; h++) {
    const kvo = <usize>(h / rep) * <usize>D * 4;
    const qh = q + <usize>h * <usize>D * 4;
    const sc = scores + <usize>h * <usize>n * 4;
    let max: f32 = -Infinity;
    for (let j = lo; j <= hi; j++) {
      const s = dotF32(qh, kc + <usize>(j % slots) * row + kvo, D) * scale;
      store<f32>(sc + (<usize>(j - lo) << 2), s);
      if (s > max) max = s;
    }
    const sink: f32 = sinks ? load<f32>(sinks + (<usize>h << 2)) : -Infinity;
    if (sink > max) max = sink;
    let sum: f64 = sinks ? Math.exp(<f64>(sink - max)) : 0;
    for (let i = 0; i < n; i++) {
      const e = <f32>Math.exp(<f64>(load<f32>(sc + (<usize>i << 2)) - max));
      store<f32>(sc + (<usize>i << 2), e);
      sum += <f64>e;
    }
    const inv = <f32>(1.0 / sum);
    // positions outermost, so each value row is read once, whole; every output element still adds
    // its terms in position order
    const o = out + <usize>h * <usize>D * 4;
    memory.fill(o, 0, <usize>D * 4);
    for (let j = lo; j <= hi; j++) {
      const ps = load<f32>(sc + (<usize>(j - lo) << 2));
      const p = f32x4.splat(ps);
      const v = vc + <usize>(j % slots) * row + kvo;
      let d = 0;
      for (; d + 4 <= D; d += 4) v128.store(o + (<usize>d << 2), f32x4.add(v128.load(o + (<usize>d << 2)), f32x4.mul(p, v128.load(v + (<usize>d << 2)))));
      for (; d < D; d++) store<f32>(o + (<usize>d << 2), load<f32>(o + (<usize>d << 2)) + ps * load<f32>(v + (<usize>d << 2)));
    }
    const iv = f32x4.splat(inv);
    let d = 0;
    for (; d + 4 <= D; d += 4) v128.store(o + (<usize>d << 2), f32x4.mul(v128.load(o + (<usize>d << 2)), iv));
    for (; d < D; d++) store<f32>(o + (<usize>d << 2), load<f32>(o + (<usize>d << 2)) * inv);
  }
}
