import type { Tensor } from '../../container/tensor.js';
import { Fmt } from '../../container/format.js';
import { f16 } from '../../util/f16.js';
import type { Activations, Attend, KdaPrep, Kernels, MlaHeads, VqExpertJob, VqExpertShape, VqGeometry, VqMatrix } from '../types.js';

/**
 * The reference kernels, in plain TypeScript. Sums run in double precision and store to f32, so
 * these are at least as accurate as any SIMD implementation they are used to check.
 */

function rowDot(w: Tensor, row: number, x: Float32Array, xOff: number): number {
  const cols = w.cols;
  switch (w.fmt) {
    case Fmt.F32: {
      const a = w.f32!;
      const base = row * cols;
      let s = 0;
      for (let i = 0; i < cols; i++) s += a[base + i] * x[xOff + i];
      return s;
    }
    case Fmt.F16: {
      const a = w.f16!;
      const base = row * cols;
      let s = 0;
      for (let i = 0; i < cols; i++) s += f16(a[base + i]) * x[xOff + i];
      return s;
    }
    case Fmt.Q8G: {
      const q = w.q!;
      const sc = w.scales!;
      const G = w.group;
      const base = row * w.rowBytes;
      let s = 0;
      for (let g = 0, c0 = 0; g < w.groups; g++, c0 += G) {
        const end = Math.min(cols, c0 + G);
        let p = 0;
        for (let i = c0; i < end; i++) p += ((q[base + i] << 24) >> 24) * x[xOff + i];
        s += f16(sc[row * w.groups + g]) * p;
      }
      return s;
    }
    case Fmt.Q4G: {
      const q = w.q!;
      const sc = w.scales!;
      const G = w.group;
      const base = row * w.rowBytes;
      let s = 0;
      for (let g = 0, c0 = 0; g < w.groups; g++, c0 += G) {
        const end = Math.min(cols, c0 + G);
        let p = 0;
        for (let i = c0; i < end; i++) {
          const b = q[base + (i >> 1)];
          p += ((i & 1 ? b >> 4 : b & 15) - 8) * x[xOff + i];
        }
        s += f16(sc[row * w.groups + g]) * p;
      }
      return s;
    }
    default:
      throw new Error(`matvec: unsupported tensor format ${w.fmt}`);
  }
}

/** Round half to even, as WebAssembly's `nearest`: the integer activations must match it exactly. */
function nearestEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  return d < 0.5 ? f : d > 0.5 ? f + 1 : f % 2 === 0 ? f : f + 1;
}

/**
 * The 16-bit activations of T vectors for groups of G (assembly/prep.ts, act_prep16): per group,
 * X = round(x · 32767 / max|x|) and the f32 factor max|x| / 32767, computed as the kernels do.
 */
function prepare16(X: Float32Array, cols: number, G: number, T: number): { q: Int16Array; factor: Float32Array } {
  const groups = Math.ceil(cols / G);
  const q = new Int16Array(T * cols);
  const factor = new Float32Array(T * groups);
  for (let t = 0; t < T; t++)
    for (let g = 0; g < groups; g++) {
      const c0 = t * cols + g * G;
      const c1 = t * cols + Math.min(cols, (g + 1) * G);
      let m = 0;
      for (let c = c0; c < c1; c++) m = Math.max(m, Math.abs(X[c]));
      const k = m > 0 ? 32767 / m : 0;
      factor[t * groups + g] = m > 0 ? m / 32767 : 0;
      for (let c = c0; c < c1; c++) q[c] = nearestEven(X[c] * k);
    }
  return { q, factor };
}

/** Row `row` of a Q8G or Q4G tensor · one vector of 16-bit activations (prepare16), exact integer sums per group. */
function rowDot16(w: Tensor, row: number, q: Int16Array, qOff: number, factor: Float32Array, fOff: number): number {
  const bytes = w.q!;
  const sc = w.scales!;
  const G = w.group;
  const base = row * w.rowBytes;
  let s = 0;
  for (let g = 0, c0 = 0; g < w.groups; g++, c0 += G) {
    const end = Math.min(w.cols, c0 + G);
    let p = 0;
    if (w.fmt === Fmt.Q8G) for (let i = c0; i < end; i++) p += ((bytes[base + i] << 24) >> 24) * q[qOff + i];
    else
      for (let i = c0; i < end; i++) {
        const b = bytes[base + (i >> 1)];
        p += ((i & 1 ? b >> 4 : b & 15) - 8) * q[qOff + i];
      }
    s += f16(sc[row * w.groups + g]) * factor[fOff + g] * p;
  }
  return s;
}

/** Dequantized value W[row][col]. */
function weightAt(w: Tensor, row: number, col: number): number {
  switch (w.fmt) {
    case Fmt.F32:
      return w.f32![row * w.cols + col];
    case Fmt.F16:
      return f16(w.f16![row * w.cols + col]);
    case Fmt.Q8G:
      return ((w.q![row * w.rowBytes + col] << 24) >> 24) * f16(w.scales![row * w.groups + Math.floor(col / w.group)]);
    case Fmt.Q4G: {
      const b = w.q![row * w.rowBytes + (col >> 1)];
      return ((col & 1 ? b >> 4 : b & 15) - 8) * f16(w.scales![row * w.groups + Math.floor(col / w.group)]);
    }
    default:
      throw new Error(`matvecT: unsupported tensor format ${w.fmt}`);
  }
}

const sigmoid = (z: number): number => 1 / (1 + Math.exp(-z));

/** SiTU-GLU: β·tanh(g/β)·σ(g) · β_l·tanh(u/β_l) (u as it is when β_l is 0). */
function situ(g: number, u: number, beta: number, linearBeta: number): number {
  const gate = beta * Math.tanh(g / beta) * sigmoid(g);
  return gate * (linearBeta > 0 ? linearBeta * Math.tanh(u / linearBeta) : u);
}

/** erf in double precision: its series near zero, the continued fraction of erfc further out. */
export function erf(x: number): number {
  const ax = Math.abs(x);
  if (ax >= 6) return Math.sign(x);
  if (ax <= 2.5) {
    const x2 = x * x;
    let term = x;
    let sum = x;
    for (let n = 1; n < 80; n++) {
      term *= -x2 / n;
      const t = term / (2 * n + 1);
      sum += t;
      if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
    }
    return sum * 1.1283791670955126;
  }
  let f = ax;
  for (let k = 60; k >= 1; k--) f = ax + (k * 0.5) / f;
  const erfc = Math.exp(-ax * ax) / (f * 1.7724538509055159);
  return x > 0 ? 1 - erfc : erfc - 1;
}

const common: Omit<Kernels, 'name' | 'activations' | 'matmul' | 'matmulMany'> = {
  matvecT(w, c, y, row0, n) {
    const cols = w.cols;
    const acc = new Float64Array(cols);
    for (let i = 0; i < n; i++) {
      const ci = c[i];
      if (ci === 0) continue;
      for (let j = 0; j < cols; j++) acc[j] += ci * weightAt(w, row0 + i, j);
    }
    for (let j = 0; j < cols; j++) y[j] = acc[j];
  },

  rmsnorm(x, w, eps, out, n, xOff = 0, outOff = 0) {
    let ss = 0;
    for (let i = 0; i < n; i++) ss += x[xOff + i] * x[xOff + i];
    const r = 1 / Math.sqrt(ss / n + eps);
    for (let i = 0; i < n; i++) out[outOff + i] = x[xOff + i] * r * w[i];
  },

  siluMul(a, b, n) {
    for (let i = 0; i < n; i++) a[i] = (a[i] / (1 + Math.exp(-a[i]))) * b[i];
  },

  situMul(a, b, n, beta, linearBeta) {
    for (let i = 0; i < n; i++) a[i] = situ(a[i], b[i], beta, linearBeta);
  },

  sigmoidMul(a, g, n) {
    for (let i = 0; i < n; i++) a[i] *= sigmoid(g[i]);
  },

  attendAll(qkv, L, heads, hd, scale, out, from = 0, to = L) {
    const Q = heads * hd;
    const scores = new Float64Array(L);
    for (let i = from; i < to; i++)
      for (let h = 0; h < heads; h++) {
        const q = i * 3 * Q + h * hd;
        let max = -Infinity;
        for (let j = 0; j < L; j++) {
          const k = j * 3 * Q + Q + h * hd;
          let s = 0;
          for (let d = 0; d < hd; d++) s += qkv[q + d] * qkv[k + d];
          scores[j] = s * scale;
          if (scores[j] > max) max = scores[j];
        }
        let sum = 0;
        for (let j = 0; j < L; j++) sum += scores[j] = Math.exp(scores[j] - max);
        for (let d = 0; d < hd; d++) {
          let acc = 0;
          for (let j = 0; j < L; j++) acc += scores[j] * qkv[j * 3 * Q + 2 * Q + h * hd + d];
          out[i * Q + h * hd + d] = acc / sum;
        }
      }
  },

  gelu(a, n, exact) {
    for (let i = 0; i < n; i++) {
      const z = a[i];
      a[i] = exact ? 0.5 * z * (1 + erf(z * Math.SQRT1_2)) : 0.5 * z * (1 + Math.tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    }
  },

  attnRes(blocks, n, cur, w, H, eps, out) {
    // candidate i is block i for i < n, the current partial sum last
    const at = (i: number) => (i < n ? blocks.subarray(i * H, (i + 1) * H) : cur);
    const score = new Float64Array(n + 1);
    let max = -Infinity;
    for (let i = 0; i <= n; i++) {
      const v = at(i);
      let ss = 0;
      let dot = 0;
      for (let j = 0; j < H; j++) {
        ss += v[j] * v[j];
        dot += v[j] * w[j];
      }
      score[i] = dot / Math.sqrt(ss / H + eps);
      max = Math.max(max, score[i]);
    }
    let sum = 0;
    for (let i = 0; i <= n; i++) sum += (score[i] = Math.exp(score[i] - max));
    for (let i = 0; i <= n; i++) score[i] /= sum;
    for (let j = 0; j < H; j++) {
      let acc = 0;
      for (let i = 0; i <= n; i++) acc += score[i] * at(i)[j];
      out[j] = acc;
    }
  },

  add(x, y, n) {
    for (let i = 0; i < n; i++) x[i] += y[i];
  },

  vqLut(booksT, stages, entries, vecDim, x, n, lut) {
    const vectors = n / vecDim;
    for (let v = 0; v < vectors; v++) {
      for (let s = 0; s < stages; s++) {
        const book = s * vecDim * entries;
        const dst = (v * stages + s) * entries;
        for (let e = 0; e < entries; e++) {
          let t = 0;
          for (let d = 0; d < vecDim; d++) t += x[v * vecDim + d] * booksT[book + d * entries + e];
          lut[dst + e] = t;
        }
      }
    }
  },

  vqApply(rec, idxOff, scaleOff, rows, cols, g: VqGeometry, lut, y) {
    const vectors = cols / g.vecDim;
    const st = g.stages;
    const en = g.entries;
    const B = g.indexBlock;
    for (let r = 0; r < rows; r++) {
      let acc = 0;
      const blk = B > 0 ? Math.floor(r / B) : 0;
      const rin = B > 0 ? r - blk * B : 0;
      for (let v = 0; v < vectors; v++) {
        const o = idxOff + (B > 0 ? ((blk * vectors + v) * B + rin) * st : (r * vectors + v) * st);
        const t0 = v * st * en;
        for (let s = 0; s < st; s++) acc += lut[t0 + s * en + rec[o + s]];
      }
      y[r] = acc * f16(rec[scaleOff + 2 * r] | (rec[scaleOff + 2 * r + 1] << 8));
    }
  },

  vqLutPair(booksA, booksB, stages, entries, vecDim, x, n, lutA, lutB) {
    common.vqLut(booksA, stages, entries, vecDim, x, n, lutA);
    common.vqLut(booksB, stages, entries, vecDim, x, n, lutB);
  },

  vqApplyPair(rec, a: VqMatrix, b: VqMatrix, rows, cols, g: VqGeometry) {
    common.vqApply(rec, a.idxOff, a.scaleOff, rows, cols, g, a.lut, a.y);
    common.vqApply(rec, b.idxOff, b.scaleOff, rows, cols, g, b.lut, b.y);
  },

  vqExperts(jobs: readonly VqExpertJob[], x: VqExpertShape) {
    const I = x.inter;
    const W = x.width;
    const g = x.g;
    const a = new Float32Array(I);
    const b = new Float32Array(I);
    const lutD = new Float32Array((I / g.vecDim) * g.stages * g.entries);
    for (const j of jobs) {
      common.vqApplyPair(j.rec, { idxOff: x.gateOff, scaleOff: x.scaleOff, lut: j.lutGate, y: a }, { idxOff: x.upOff, scaleOff: x.scaleOff + 2 * I, lut: j.lutUp, y: b }, I, W, g);
      if (x.act.kind === 'silu') common.siluMul(a, b, I);
      else common.situMul(a, b, I, x.act.beta, x.act.linearBeta);
      common.vqLut(x.booksDown, g.stages, g.entries, g.vecDim, a, I, lutD);
      common.vqApply(j.rec, x.downOff, x.scaleOff + 4 * I, W, I, g, lutD, j.y);
    }
    return true;
  },

  kdaPrep(p: KdaPrep) {
    const { C, K, H, D } = p;
    const R = K - 1;
    const bufs = [p.q, p.k, p.v];
    for (let which = 0; which < 3; which++) {
      const x = bufs[which];
      const tap = p.taps[which];
      const ring = p.ring.subarray(which * C * R, (which + 1) * C * R);
      for (let c = 0; c < C; c++) {
        let acc = 0;
        for (let j = 0; j < R; j++) acc += ring[c * R + j] * tap[c * K + j];
        const cur = x[c];
        acc += cur * tap[c * K + R];
        for (let j = 0; j + 1 < R; j++) ring[c * R + j] = ring[c * R + j + 1];
        if (R > 0) ring[c * R + R - 1] = cur;
        const a = Math.fround(acc);
        x[c] = a / (1 + Math.exp(-a));
      }
    }
    const qScale = 1 / Math.sqrt(D);
    for (let h = 0; h < H; h++) {
      let sq = 0;
      let sk = 0;
      for (let j = 0; j < D; j++) {
        sq += p.q[h * D + j] ** 2;
        sk += p.k[h * D + j] ** 2;
      }
      const rq = qScale / Math.sqrt(sq + p.l2eps);
      const rk = 1 / Math.sqrt(sk + p.l2eps);
      for (let j = 0; j < D; j++) {
        p.q[h * D + j] *= rq;
        p.k[h * D + j] *= rk;
      }
      const a = Math.exp(p.aLog[h]);
      const lb = p.lowerBound;
      for (let j = 0; j < D; j++) {
        const i = h * D + j;
        const z = p.g[i] + p.dtBias[i];
        p.g[i] = lb === undefined ? -a * (z > 20 ? z : Math.log1p(Math.exp(z))) : lb * sigmoid(a * z);
      }
      p.beta[h] = sigmoid(p.beta[h]);
    }
  },

  kdaStep(H, D, q, k, v, g, beta, S, o) {
    const u = new Float64Array(D);
    const out = new Float64Array(D);
    for (let h = 0; h < H; h++) {
      const hb = h * D;
      const sb = h * D * D;
      u.fill(0);
      for (let j = 0; j < D; j++) {
        const decay = Math.exp(g[hb + j]);
        const kj = k[hb + j];
        const row = sb + j * D;
        for (let c = 0; c < D; c++) {
          const s = Math.fround(S[row + c] * decay);
          S[row + c] = s;
          u[c] += s * kj;
        }
      }
      const b = beta[h];
      for (let c = 0; c < D; c++) u[c] = Math.fround(b * (v[hb + c] - u[c]));
      out.fill(0);
      for (let j = 0; j < D; j++) {
        const kj = k[hb + j];
        const qj = q[hb + j];
        const row = sb + j * D;
        for (let c = 0; c < D; c++) {
          const s = Math.fround(S[row + c] + kj * u[c]);
          S[row + c] = s;
          out[c] += s * qj;
        }
      }
      for (let c = 0; c < D; c++) o[hb + c] = out[c];
    }
  },

  kdaOut(o, gate, w, H, D, eps) {
    for (let h = 0; h < H; h++) {
      let ss = 0;
      for (let j = 0; j < D; j++) ss += o[h * D + j] ** 2;
      const r = 1 / Math.sqrt(ss / D + eps);
      for (let j = 0; j < D; j++) o[h * D + j] = o[h * D + j] * r * w[j] * sigmoid(gate[h * D + j]);
    }
  },

  attend(p: Attend) {
    const { heads, kvHeads, headDim: D, lo, hi, slots } = p;
    const rep = heads / kvHeads;
    const n = hi - lo + 1;
    const scores = new Float64Array(n);
    for (let h = 0; h < heads; h++) {
      const kv = Math.floor(h / rep) * D;
      const at = (j: number) => (j % slots) * kvHeads * D + kv;
      let max = p.sinks ? p.sinks[h] : -Infinity;
      for (let j = lo; j <= hi; j++) {
        let s = 0;
        for (let d = 0; d < D; d++) s += p.q[h * D + d] * p.k[at(j) + d];
        scores[j - lo] = s * p.scale;
        if (scores[j - lo] > max) max = scores[j - lo];
      }
      let sum = p.sinks ? Math.exp(p.sinks[h] - max) : 0;
      for (let i = 0; i < n; i++) sum += scores[i] = Math.exp(scores[i] - max);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        for (let j = lo; j <= hi; j++) acc += scores[j - lo] * p.v[at(j) + d];
        p.out[h * D + d] = acc / sum;
      }
    }
  },

  mlaHeads(p: MlaHeads) {
    const { heads, nope, rope, vh, kvl, n } = p;
    const qd = nope + rope;
    const latd = kvl + rope;
    for (let h = 0; h < heads; h++) {
      const rows = h * (nope + vh);
      const qLat = p.qLat.subarray(h * kvl, (h + 1) * kvl);
      tsKernels.matvecT(p.kvB, p.q.subarray(h * qd, h * qd + nope), qLat, rows, nope);
      const scores = p.scores.subarray(h * n, (h + 1) * n);
      let max = -Infinity;
      for (let s = 0; s < n; s++) {
        const base = s * latd;
        let a = 0;
        for (let j = 0; j < kvl; j++) a += qLat[j] * p.cache[base + j];
        for (let j = 0; j < rope; j++) a += p.q[h * qd + nope + j] * p.cache[base + kvl + j];
        scores[s] = a * p.scale;
        if (scores[s] > max) max = scores[s];
      }
      let sum = 0;
      for (let s = 0; s < n; s++) {
        scores[s] = Math.exp(scores[s] - max);
        sum += scores[s];
      }
      const ctx = new Float64Array(kvl);
      for (let s = 0; s < n; s++) {
        const pr = scores[s] / sum;
        for (let j = 0; j < kvl; j++) ctx[j] += pr * p.cache[s * latd + j];
      }
      const c32 = p.ctx.subarray(h * kvl, (h + 1) * kvl);
      c32.set(ctx);
      for (let i = 0; i < vh; i++) p.o[h * vh + i] = rowDot(p.kvB, rows + nope + i, c32, 0);
    }
  },

  moeRoute(logits, bias, E, K, ids, w, renorm, scale) {
    for (let e = 0; e < E; e++) logits[e] = sigmoid(logits[e]);
    for (let j = 0; j < K; j++) {
      let best = -1;
      let bestV = -Infinity;
      for (let e = 0; e < E; e++) {
        let taken = false;
        for (let p = 0; p < j; p++) if (ids[p] === e) taken = true;
        if (taken) continue;
        const v = Math.fround(logits[e] + bias[e]);
        if (best < 0 || v > bestV) {
          bestV = v;
          best = e;
        }
      }
      ids[j] = best;
      w[j] = logits[best];
    }
    if (renorm && K > 1) {
      let sum = 0;
      for (let j = 0; j < K; j++) sum += w[j];
      for (let j = 0; j < K; j++) w[j] /= sum + 1e-20;
    }
    for (let j = 0; j < K; j++) w[j] *= scale;
  },

  moeCombine(out, eo, w, K, H, shared) {
    for (let i = 0; i < H; i++) {
      let acc = 0;
      for (let j = 0; j < K; j++) acc += w[j] * eo[j * H + i];
      out[i] = shared ? Math.fround(acc) + shared[i] : acc;
    }
  },
};

/** The reference kernels with the given activations for Q8G/Q4G products (see Activations). */
export function makeTsKernels(activations: Activations = 'exact'): Kernels {
  const matmul: Kernels['matmul'] =
    activations === 'exact'
      ? (w, X, Y, T) => {
          for (let t = 0; t < T; t++) for (let i = 0; i < w.rows; i++) Y[t * w.rows + i] = rowDot(w, i, X, t * w.cols);
        }
      : (w, X, Y, T) => {
          if (w.fmt !== Fmt.Q8G && w.fmt !== Fmt.Q4G) {
            for (let t = 0; t < T; t++) for (let i = 0; i < w.rows; i++) Y[t * w.rows + i] = rowDot(w, i, X, t * w.cols);
            return;
          }
          const { q, factor } = prepare16(X, w.cols, w.group, T);
          for (let t = 0; t < T; t++) for (let i = 0; i < w.rows; i++) Y[t * w.rows + i] = rowDot16(w, i, q, t * w.cols, factor, t * w.groups);
        };
  // through this.matmul, so a wrapper of matmul (a test's, a profiler's) sees every product
  const matmulMany: Kernels['matmulMany'] = function (this: Kernels, ws, X, Ys, T) {
    ws.forEach((w, i) => this.matmul(w, X, Ys[i], T));
  };
  return { ...common, name: activations === 'exact' ? 'typescript' : `typescript, ${activations} activations`, activations, matmul, matmulMany };
}

/** The reference kernels with exact activations. */
export const tsKernels: Kernels = makeTsKernels('exact');
