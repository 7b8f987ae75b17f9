// Kimi Delta Attention: the per-token preparation (short convolutions, L2 norms, decay gate, β),
// the gated delta-rule recurrence, and the gated output norm.
import { sumSquares } from './common';

// @ts-ignore: decorator
@inline function sigmoid(z: f32): f32 {
  return <f32>(1.0 / (1.0 + Math.exp(-<f64>z)));
}

/**
 * One token, in place on q, k, v [C] and g [C], beta [H]:
 * causal depthwise conv (history ring oldest first, the current input last) + SiLU for q, k, v;
 * per-head L2 norm of q and k (eps inside the root), q scaled by D^-1/2;
 * g = −exp(A_log[h]) · softplus(g + dt_bias) (identity above 20), or with a lower bound lb < 0
 * (K3's bounded gate) g = lb · sigmoid(exp(A_log[h]) · (g + dt_bias)); beta = sigmoid(beta).
 */
export function kda_prep(q: usize, k: usize, v: usize, tq: usize, tk: usize, tv: usize, ring: usize, C: i32, K: i32,
  g: usize, dtBias: usize, aLog: usize, beta: usize, H: i32, D: i32, l2eps: f32, lb: f32): void {
  const R = K - 1;
  for (let which = 0; which < 3; which++) {
    const x = which == 0 ? q : which == 1 ? k : v;
    const taps = which == 0 ? tq : which == 1 ? tk : tv;
    const rg = ring + <usize>which * <usize>C * <usize>R * 4;
    for (let c = 0; c < C; c++) {
      const r0 = rg + <usize>c * <usize>R * 4;
      const w0 = taps + <usize>c * <usize>K * 4;
      let acc: f32 = 0;
      for (let j = 0; j < R; j++) acc += load<f32>(r0 + (<usize>j << 2)) * load<f32>(w0 + (<usize>j << 2));
      const cur = load<f32>(x + (<usize>c << 2));
      acc += cur * load<f32>(w0 + (<usize>R << 2));
      for (let j = 0; j + 1 < R; j++) store<f32>(r0 + (<usize>j << 2), load<f32>(r0 + (<usize>(j + 1) << 2)));
      if (R > 0) store<f32>(r0 + (<usize>(R - 1) << 2), cur);
      store<f32>(x + (<usize>c << 2), <f32>(<f64>acc / (1.0 + Math.exp(-<f64>acc))));
    }
  }
  const qScale = 1.0 / Math.sqrt(<f64>D);
  for (let h = 0; h < H; h++) {
    const qh = q + <usize>h * <usize>D * 4;
    const kh = k + <usize>h * <usize>D * 4;
    let sq: f32 = 0, sk: f32 = 0;
    for (let j = 0; j < D; j++) {
      const a = load<f32>(qh + (<usize>j << 2));
      const b = load<f32>(kh + (<usize>j << 2));
      sq += a * a;
      sk += b * b;
    }
    const rq = <f32>(qScale / Math.sqrt(<f64>sq + <f64>l2eps));
    const rk = <f32>(1.0 / Math.sqrt(<f64>sk + <f64>l2eps));
    for (let j = 0; j < D; j++) {
      store<f32>(qh + (<usize>j << 2), load<f32>(qh + (<usize>j << 2)) * rq);
      store<f32>(kh + (<usize>j << 2), load<f32>(kh + (<usize>j << 2)) * rk);
    }
    const a = Math.exp(<f64>load<f32>(aLog + (<usize>h << 2)));
    for (let j = 0; j < D; j++) {
      const i = <usize>(h * D + j) << 2;
      const z = <f64>(load<f32>(g + i) + load<f32>(dtBias + i));
      if (lb < 0) {
        store<f32>(g + i, <f32>(<f64>lb / (1.0 + Math.exp(-a * z))));
      } else {
        const sp = z > 20 ? z : Math.log1p(Math.exp(z));
        store<f32>(g + i, <f32>(-a * sp));
      }
    }
    store<f32>(beta + (<usize>h << 2), sigmoid(load<f32>(beta + (<usize>h << 2))));
  }
}

/**
 * The gated delta rule for heads [h0, h1), in place on S [H][D][D] (key × value):
 * S ← diag(exp(g))·S; u = β(v − Sᵀk); S ← S + k⊗u; o = Sᵀq (read after the update).
 * Each value column is updated lane-wise, its sums over key rows in order.
 */
export function kda_step(q: usize, k: usize, v: usize, g: usize, beta: usize, S: usize, o: usize, D: i32, tmp: usize, h0: i32, h1: i32): void {
  const u = tmp;
  const rowBytes = <usize>D * 4;
  for (let h = h0; h < h1; h++) {
    const hb = <usize>h * <usize>D * 4;
    const Sh = S + <usize>h * <usize>D * rowBytes;
    for (let c = 0; c < D; c++) store<f32>(u + (<usize>c << 2), 0);
    for (let j = 0; j < D; j++) {
      const d = <f32>Math.exp(<f64>load<f32>(g + hb + (<usize>j << 2)));
      const kj = load<f32>(k + hb + (<usize>j << 2));
      const row = Sh + <usize>j * rowBytes;
      const dv = f32x4.splat(d);
      const kv = f32x4.splat(kj);
      let c = 0;
      for (; c + 4 <= D; c += 4) {
        const o4 = <usize>c << 2;
        const s = f32x4.mul(v128.load(row + o4), dv);
        v128.store(row + o4, s);
        v128.store(u + o4, f32x4.add(v128.load(u + o4), f32x4.mul(s, kv)));
      }
      for (; c < D; c++) {
        const o4 = <usize>c << 2;
        const s = load<f32>(row + o4) * d;
        store<f32>(row + o4, s);
        store<f32>(u + o4, load<f32>(u + o4) + s * kj);
      }
    }
    const b = load<f32>(beta + (<usize>h << 2));
    for (let c = 0; c < D; c++) {
      const o4 = <usize>c << 2;
      store<f32>(u + o4, b * (load<f32>(v + hb + o4) - load<f32>(u + o4)));
    }
    const oh = o + hb;
    for (let c = 0; c < D; c++) store<f32>(oh + (<usize>c << 2), 0);
    for (let j = 0; j < D; j++) {
      const kj = load<f32>(k + hb + (<usize>j << 2));
      const qj = load<f32>(q + hb + (<usize>j << 2));
      const row = Sh + <usize>j * rowBytes;
      const kv = f32x4.splat(kj);
      const qv = f32x4.splat(qj);
      let c = 0;
      for (; c + 4 <= D; c += 4) {
        const o4 = <usize>c << 2;
        const s = f32x4.add(v128.load(row + o4), f32x4.mul(kv, v128.load(u + o4)));
        v128.store(row + o4, s);
        v128.store(oh + o4, f32x4.add(v128.load(oh + o4), f32x4.mul(s, qv)));
      }
      for (; c < D; c++) {
        const o4 = <usize>c << 2;
        const s = load<f32>(row + o4) + kj * load<f32>(u + o4);
        store<f32>(row + o4, s);
        store<f32>(oh + o4, load<f32>(oh + o4) + s * qj);
      }
    }
  }
}

/** Per head: o ← RMSNorm(o)·w · sigmoid(gate) (the weight [D] is shared by all heads). */
export function kda_out(o: usize, gate: usize, w: usize, H: i32, D: i32, eps: f32): void {
  for (let h = 0; h < H; h++) {
    const oh = o + <usize>h * <usize>D * 4;
    const gh = gate + <usize>h * <usize>D * 4;
    const r = <f32>(1.0 / Math.sqrt(<f64>sumSquares(oh, D) / <f64>D + <f64>eps));
    for (let j = 0; j < D; j++) {
      const i = <usize>j << 2;
      store<f32>(oh + i, load<f32>(oh + i) * r * load<f32>(w + i) * sigmoid(load<f32>(gh + i)));
    }
  }
}
