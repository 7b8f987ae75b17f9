import type { Tensor } from '../../container/tensor.js';
import type { Kernels } from '../../kernels/types.js';

/**
 * Gated DeltaNet (Qwen3-Next, Qwen3.5): the gated delta rule with one decay per value head, which
 * is KDA's recurrence (blocks/kda.ts) with its per-channel gate constant across a head, so the
 * step itself is the kernels' `kdaStep`. Around it: a causal depthwise conv over [q | k | v] with
 * SiLU, q and k L2-normed per key head (q also by dk^-1/2) and shared by the value heads of their
 * group, g = −exp(A_log)·softplus(a + dt_bias), β = σ(b), and the output per value head through
 * RMSNorm(o)·w·SiLU(z).
 */
export interface GdnShape {
  /** Key heads (q, k) and value heads (v, z, the state); vHeads a multiple of kHeads. */
  kHeads: number;
  vHeads: number;
  /** Head widths: key (q, k) and value; equal (the step's state is square per head). */
  headDim: number;
  convKernel: number;
  /** How the input projections pack: Qwen3-Next's per-key-head groups [q k v… z…] and [b… a…], or Qwen3.5's separate matrices. */
  packing: 'grouped' | 'split';
}

export interface GdnWeights {
  kind: 'gdn';
  /** grouped: [in_proj_qkvz, in_proj_ba]; split: [in_proj_qkv, in_proj_z, in_proj_b, in_proj_a]. */
  proj: Tensor[];
  /** [channels][K] the conv taps over [q | k | v], the last tap multiplying the current token. */
  conv: Float32Array;
  dtBias: Float32Array;
  aLog: Float32Array;
  /** [headDim] the output norm's weight (not zero-centred). */
  norm: Float32Array;
  out: Tensor;
}

/** One sequence's state in one layer: the conv's last K − 1 inputs [channels][K − 1], and S [vHeads][headDim][headDim]. */
export interface GdnState {
  conv: Float32Array;
  S: Float32Array;
}

/** The working buffers Gated DeltaNet uses ([T][…] rows of the chunk in flight). */
export interface GdnScratch {
  norm: Float32Array;
  out: Float32Array;
  /** [T][projection outputs] the raw projections (grouped: qkvz then ba). */
  pA: Float32Array;
  pB: Float32Array;
  pC: Float32Array;
  pD: Float32Array;
  /** [channels] one token's [q | k | v], convolved in place. */
  mixed: Float32Array;
  /** [T][vHeads·headDim] the output gate z, then the gated outputs. */
  z: Float32Array;
  /** [vHeads·headDim] one token's q and k repeated to the value heads, its decay per channel, v, o. */
  qx: Float32Array;
  kx: Float32Array;
  gx: Float32Array;
  vx: Float32Array;
  ox: Float32Array;
  /** [vHeads] one token's β and a. */
  beta: Float32Array;
  a: Float32Array;
}

/** Channels the conv runs over: q and k of every key head, v of every value head. */
export const gdnChannels = (c: GdnShape) => 2 * c.kHeads * c.headDim + c.vHeads * c.headDim;

/** The input projections' output widths. */
export function gdnProjWidths(c: GdnShape): number[] {
  const D = c.headDim;
  const vw = c.vHeads * D;
  return c.packing === 'grouped' ? [2 * c.kHeads * D + 2 * vw, 2 * c.vHeads] : [2 * c.kHeads * D + vw, vw, c.vHeads, c.vHeads];
}

const L2_EPS = 1e-6;
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/**
 * Gated DeltaNet over the T normed tokens in `s.norm` (output in `s.out`). `state(t)` is row t's
 * sequence state (one sequence's for a prefill chunk, each row's own in a batched step).
 */
export function gatedDeltaNet(k: Kernels, c: GdnShape, eps: number, w: GdnWeights, T: number, state: (t: number) => GdnState, s: GdnScratch): void {
  const { kHeads: NK, vHeads: NV, headDim: D, convKernel: K } = c;
  const r = NV / NK;
  const kw = NK * D;
  const vw = NV * D;
  const C = gdnChannels(c);
  const widths = gdnProjWidths(c);
  const bufs = [s.pA, s.pB, s.pC, s.pD].slice(0, w.proj.length);
  k.matmulMany(w.proj, s.norm, bufs, T);
  const R = K - 1;
  const qScale = 1 / Math.sqrt(D);
  for (let t = 0; t < T; t++) {
    const st = state(t);
    const z = s.z.subarray(t * vw, (t + 1) * vw);
    // unpack this token's projections into [q | k | v], z, b (→ beta) and a
    if (c.packing === 'grouped') {
      const qkvz = s.pA.subarray(t * widths[0], (t + 1) * widths[0]);
      const ba = s.pB.subarray(t * widths[1], (t + 1) * widths[1]);
      const G = 2 * D + 2 * r * D;
      for (let g = 0; g < NK; g++) {
        const o = g * G;
        s.mixed.set(qkvz.subarray(o, o + D), g * D);
        s.mixed.set(qkvz.subarray(o + D, o + 2 * D), kw + g * D);
        s.mixed.set(qkvz.subarray(o + 2 * D, o + 2 * D + r * D), 2 * kw + g * r * D);
        z.set(qkvz.subarray(o + 2 * D + r * D, o + G), g * r * D);
        for (let j = 0; j < r; j++) {
          s.beta[g * r + j] = ba[g * 2 * r + j];
          s.a[g * r + j] = ba[g * 2 * r + r + j];
        }
      }
    } else {
      s.mixed.set(s.pA.subarray(t * widths[0], (t + 1) * widths[0]));
      z.set(s.pB.subarray(t * vw, (t + 1) * vw));
      s.beta.set(s.pC.subarray(t * NV, (t + 1) * NV));
      s.a.set(s.pD.subarray(t * NV, (t + 1) * NV));
    }
    // the causal conv, its last K − 1 inputs carried in the state, then SiLU
    const ring = st.conv;
    for (let ch = 0; ch < C; ch++) {
      let acc = 0;
      for (let j = 0; j < R; j++) acc += ring[ch * R + j] * w.conv[ch * K + j];
      const cur = s.mixed[ch];
      acc += cur * w.conv[ch * K + R];
      for (let j = 0; j + 1 < R; j++) ring[ch * R + j] = ring[ch * R + j + 1];
      if (R > 0) ring[ch * R + R - 1] = cur;
      const a = Math.fround(acc);
      s.mixed[ch] = a / (1 + Math.exp(-a));
    }
    // q, k L2-normed per key head and repeated to the value heads of their group
    for (let g = 0; g < NK; g++) {
      let sq = 0;
      let sk = 0;
      for (let j = 0; j < D; j++) {
        sq += s.mixed[g * D + j] ** 2;
        sk += s.mixed[kw + g * D + j] ** 2;
      }
      const rq = qScale / Math.sqrt(sq + L2_EPS);
      const rk = 1 / Math.sqrt(sk + L2_EPS);
      for (let h = g * r; h < (g + 1) * r; h++)
        for (let j = 0; j < D; j++) {
          s.qx[h * D + j] = s.mixed[g * D + j] * rq;
          s.kx[h * D + j] = s.mixed[kw + g * D + j] * rk;
        }
    }
    s.vx.set(s.mixed.subarray(2 * kw, 2 * kw + vw));
    // the decay and β per value head
    for (let h = 0; h < NV; h++) {
      const x = s.a[h] + w.dtBias[h];
      const g = -Math.exp(w.aLog[h]) * (x > 20 ? x : Math.log1p(Math.exp(x)));
      s.gx.fill(g, h * D, (h + 1) * D);
      s.beta[h] = sigmoid(s.beta[h]);
    }
    k.kdaStep(NV, D, s.qx, s.kx, s.vx, s.gx, s.beta, st.S, s.ox);
    // RMSNorm(o)·w per value head, times SiLU(z): into z, which o_proj reads
    for (let h = 0; h < NV; h++) k.rmsnorm(s.ox, w.norm, eps, s.ox, D, h * D, h * D);
    k.siluMul(z, s.ox, vw);
  }
  k.matmul(w.out, s.z, s.out, T);
}
