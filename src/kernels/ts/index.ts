import type { Tensor } from '../../container/tensor.js';
import { Fmt } from '../../container/format.js';
import { f16 } from '../../util/f16.js';
import type { Kernels, VqGeometry } from '../types.js';

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

export const tsKernels: Kernels = {
  name: 'typescript',

  matvec(w, x, y, row0 = 0, n = w.rows - row0) {
    for (let i = 0; i < n; i++) y[i] = rowDot(w, row0 + i, x, 0);
  },

  matmul(w, X, Y, T) {
    for (let t = 0; t < T; t++) for (let i = 0; i < w.rows; i++) Y[t * w.rows + i] = rowDot(w, i, X, t * w.cols);
  },

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

  vqLut(books, base, stages, entries, vecDim, x, n, lut) {
    const vectors = n / vecDim;
    const per = entries * vecDim;
    for (let v = 0; v < vectors; v++) {
      for (let s = 0; s < stages; s++) {
        const book = (base + s) * per;
        const dst = (v * stages + s) * entries;
        for (let e = 0; e < entries; e++) {
          let t = 0;
          for (let d = 0; d < vecDim; d++) t += x[v * vecDim + d] * books[book + e * vecDim + d];
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

  kdaStep(H, D, q, k, v, g, beta, S, o) {
    const u = new Float64Array(D);
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
      const out = new Float64Array(D);
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

  attendLatent(qLat, qPe, qPeOff, cache, n, stride, kvl, rope, scale, scores, ctx) {
    let max = -Infinity;
    for (let s = 0; s < n; s++) {
      const base = s * stride;
      let a = 0;
      for (let j = 0; j < kvl; j++) a += qLat[j] * cache[base + j];
      for (let j = 0; j < rope; j++) a += qPe[qPeOff + j] * cache[base + kvl + j];
      const sc = a * scale;
      scores[s] = sc;
      if (sc > max) max = sc;
    }
    let sum = 0;
    for (let s = 0; s < n; s++) {
      const e = Math.exp(scores[s] - max);
      scores[s] = e;
      sum += e;
    }
    const acc = new Float64Array(kvl);
    for (let s = 0; s < n; s++) {
      const p = scores[s] / sum;
      const base = s * stride;
      for (let j = 0; j < kvl; j++) acc[j] += p * cache[base + j];
    }
    for (let j = 0; j < kvl; j++) ctx[j] = acc[j];
  },
};
