// Residual vector-quantized experts through lookup tables: never expanded into weights.
import { f16 } from './common';

/**
 * Bytes of lookup tables one pass of vq_apply walks (see there): well inside the smallest common L2
 * (512 KiB a core on AMD's Zen 2/3, 1–2 MiB on recent Intel), leaving room for the index stream.
 * On Zen 3, 192 KiB looks up 1.09–1.16× faster than 512 KiB did (docs/PERFORMANCE.md); a pass
 * costs only re-reading the rows' running sums, so a core with a larger L2 loses nothing.
 */
const TABLE_BYTES: usize = 192 * 1024;

/** Four table entries, Σ_d x_d · book[d][e…e+3] in d order, from the columns c_d (+ o bytes). */
// @ts-ignore: decorator
@inline function entries4(x0: v128, x1: v128, x2: v128, x3: v128, x4: v128, x5: v128, x6: v128, x7: v128, c0: usize, c1: usize, c2: usize, c3: usize, c4: usize, c5: usize, c6: usize, c7: usize, o: usize): v128 {
  let a = f32x4.add(f32x4.splat(0), f32x4.mul(x0, v128.load(c0 + o)));
  a = f32x4.add(a, f32x4.mul(x1, v128.load(c1 + o)));
  a = f32x4.add(a, f32x4.mul(x2, v128.load(c2 + o)));
  a = f32x4.add(a, f32x4.mul(x3, v128.load(c3 + o)));
  a = f32x4.add(a, f32x4.mul(x4, v128.load(c4 + o)));
  a = f32x4.add(a, f32x4.mul(x5, v128.load(c5 + o)));
  a = f32x4.add(a, f32x4.mul(x6, v128.load(c6 + o)));
  return f32x4.add(a, f32x4.mul(x7, v128.load(c7 + o)));
}

/**
 * lut[(v·stages + s)·entries + e] = x[v·vecDim …] · book_s[e] for v in [v0, v1), reading the
 * stage books transposed as [stage][dim][entry] so the entries vectorize.
 */
export function vq_lut(CT: usize, x: usize, lut: usize, stages: i32, entries: i32, vecDim: i32, _tmp: usize, v0: i32, v1: i32): void {
  const bookStride = <usize>vecDim * <usize>entries * 4;
  // Both models' books have 8-dim vectors: the vector's eight inputs stay splatted in registers and
  // sixteen entries are computed per step (the general loop reloads and splats an input per two
  // vectors of entries): 1.5–1.7× the tables a second, the same additions in the same order.
  if (vecDim == 8 && (entries & 15) == 0) {
    const es = <usize>entries << 2;
    for (let v = v0; v < v1; v++) {
      const xv = x + (<usize>v << 5);
      const x0 = f32x4.splat(load<f32>(xv, 0));
      const x1 = f32x4.splat(load<f32>(xv, 4));
      const x2 = f32x4.splat(load<f32>(xv, 8));
      const x3 = f32x4.splat(load<f32>(xv, 12));
      const x4 = f32x4.splat(load<f32>(xv, 16));
      const x5 = f32x4.splat(load<f32>(xv, 20));
      const x6 = f32x4.splat(load<f32>(xv, 24));
      const x7 = f32x4.splat(load<f32>(xv, 28));
      for (let s = 0; s < stages; s++) {
        const book = CT + <usize>s * bookStride;
        const dst = lut + (<usize>v * <usize>stages + <usize>s) * es;
        for (let e = 0; e < entries; e += 16) {
          const c0 = book + (<usize>e << 2);
          const c1 = c0 + es;
          const c2 = c1 + es;
          const c3 = c2 + es;
          const c4 = c3 + es;
          const c5 = c4 + es;
          const c6 = c5 + es;
          const c7 = c6 + es;
          const d = dst + (<usize>e << 2);
          v128.store(d, entries4(x0, x1, x2, x3, x4, x5, x6, x7, c0, c1, c2, c3, c4, c5, c6, c7, 0), 0);
          v128.store(d, entries4(x0, x1, x2, x3, x4, x5, x6, x7, c0, c1, c2, c3, c4, c5, c6, c7, 16), 16);
          v128.store(d, entries4(x0, x1, x2, x3, x4, x5, x6, x7, c0, c1, c2, c3, c4, c5, c6, c7, 32), 32);
          v128.store(d, entries4(x0, x1, x2, x3, x4, x5, x6, x7, c0, c1, c2, c3, c4, c5, c6, c7, 48), 48);
        }
      }
    }
    return;
  }
  for (let v = v0; v < v1; v++) {
    const xv = x + <usize>v * <usize>vecDim * 4;
    for (let s = 0; s < stages; s++) {
      const book = CT + <usize>s * bookStride;
      const dst = lut + (<usize>v * <usize>stages + <usize>s) * <usize>entries * 4;
      let e = 0;
      for (; e + 8 <= entries; e += 8) {
        let a0 = f32x4.splat(0), a1 = f32x4.splat(0);
        const col = book + (<usize>e << 2);
        for (let d = 0; d < vecDim; d++) {
          const xd = f32x4.splat(load<f32>(xv + (<usize>d << 2)));
          const p = col + <usize>d * <usize>entries * 4;
          a0 = f32x4.add(a0, f32x4.mul(xd, v128.load(p)));
          a1 = f32x4.add(a1, f32x4.mul(xd, v128.load(p, 16)));
        }
        v128.store(dst + (<usize>e << 2), a0);
        v128.store(dst + (<usize>e << 2), a1, 16);
      }
      for (; e < entries; e++) {
        let a: f32 = 0;
        for (let d = 0; d < vecDim; d++) a += load<f32>(xv + (<usize>d << 2)) * load<f32>(book + ((<usize>d * <usize>entries + <usize>e) << 2));
        store<f32>(dst + (<usize>e << 2), a);
      }
    }
  }
}

/**
 * y[r] = scale[r] · Σ_v Σ_s lut[v][s][idx(r, v, s)] for rows [r0, r1) of one expert matrix whose
 * indices are blocked by B rows ([block][vector][row in block][stage]; B = 0 means row-major).
 * A tile of rows walks the vectors in order with the vector's table (stages × entries floats) hot
 * in L1; `tmp` holds the tile's accumulators.
 */
export function vq_apply(rec: usize, idxOff: i32, scaleOff: i32, lut: usize, y: usize, vectors: i32, stages: i32, entries: i32, B: i32, tmp: usize, r0: i32, r1: i32): void {
  const idx = rec + <usize>idxOff;
  const scales = rec + <usize>scaleOff;
  const vstride = <usize>stages * <usize>entries * 4;
  const e1 = <usize>entries << 2;
  const e2 = e1 << 1;
  const st = <usize>stages;
  if (B <= 0) {
    for (let r = r0; r < r1; r++) {
      let acc: f32 = 0;
      let ix = idx + <usize>r * <usize>vectors * st;
      for (let v = 0; v < vectors; v++, ix += st) {
        const T = lut + <usize>v * vstride;
        let t = load<f32>(T + (<usize>load<u8>(ix) << 2));
        for (let s = 1; s < stages; s++) t += load<f32>(T + <usize>s * e1 + (<usize>load<u8>(ix + <usize>s) << 2));
        acc += t;
      }
      store<f32>(y + (<usize>r << 2), acc * f16(<u32>load<u16>(scales + (<usize>r << 1))));
    }
    return;
  }
  // The tables a pass over the rows walks are kept under TABLE_BYTES so they stay in the core's L2
  // (K3's gate and up tables are 1.4 MB, Kimi-Linear's 0.86 MB, its down tables 0.39 MB): wider
  // matrices take several passes over the vectors, each row's running sum kept in y between
  // passes — the same f32 additions in the same order as one pass.
  const passes = max(1, <i32>((<usize>vectors * vstride + TABLE_BYTES - 1) / TABLE_BYTES));
  const per = (vectors + passes - 1) / passes;
  for (let v0 = 0; v0 < vectors; v0 += per) {
    const v1 = min(vectors, v0 + per);
    applyPass(idx, scales, lut, y, vectors, stages, entries, B, tmp, r0, r1, v0, v1);
  }
}

/** Vectors [v0, v1) of vq_apply's blocked form for rows [r0, r1): from zero when v0 = 0 (else from the sums in y), scaled when v1 = vectors (else the sums left in y). */
function applyPass(idx: usize, scales: usize, lut: usize, y: usize, vectors: i32, stages: i32, entries: i32, B: i32, tmp: usize, r0: i32, r1: i32, v0: i32, v1: i32): void {
  const vstride = <usize>stages * <usize>entries * 4;
  const e1 = <usize>entries << 2;
  const e2 = e1 << 1;
  const st = <usize>stages;
  let rs = r0;
  while (rs < r1) {
    const b = rs / B;
    const re = min(r1, (b + 1) * B);
    const nr = re - rs;
    const rin0 = rs - b * B;
    if (v0 == 0) for (let r = 0; r < nr; r++) store<f32>(tmp + (<usize>r << 2), 0);
    else for (let r = 0; r < nr; r++) store<f32>(tmp + (<usize>r << 2), load<f32>(y + (<usize>(rs + r) << 2)));
    for (let v = v0; v < v1; v++) {
      const T = lut + <usize>v * vstride;
      let ix = idx + ((<usize>b * <usize>vectors + <usize>v) * <usize>B + <usize>rin0) * st;
      if (stages == 3) {
        const T1 = T + e1;
        const T2 = T + e2;
        let r = 0;
        // One byte load per index: V8 makes each a single movzx with the offset folded, where
        // taking three bytes out of a 32-bit word cost a copy, a shift and a mask each (and spilled
        // registers): 1.09–1.20× the lookups a second (docs/PERFORMANCE.md).
        for (; r + 4 <= nr; r += 4, ix += 12) {
          const t0 = load<f32>(T + (<usize>load<u8>(ix) << 2)) + load<f32>(T1 + (<usize>load<u8>(ix, 1) << 2)) + load<f32>(T2 + (<usize>load<u8>(ix, 2) << 2));
          const t1 = load<f32>(T + (<usize>load<u8>(ix, 3) << 2)) + load<f32>(T1 + (<usize>load<u8>(ix, 4) << 2)) + load<f32>(T2 + (<usize>load<u8>(ix, 5) << 2));
          const t2 = load<f32>(T + (<usize>load<u8>(ix, 6) << 2)) + load<f32>(T1 + (<usize>load<u8>(ix, 7) << 2)) + load<f32>(T2 + (<usize>load<u8>(ix, 8) << 2));
          const t3 = load<f32>(T + (<usize>load<u8>(ix, 9) << 2)) + load<f32>(T1 + (<usize>load<u8>(ix, 10) << 2)) + load<f32>(T2 + (<usize>load<u8>(ix, 11) << 2));
          const a = tmp + (<usize>r << 2);
          const t = f32x4.replace_lane(f32x4.replace_lane(f32x4.replace_lane(f32x4.splat(t0), 1, t1), 2, t2), 3, t3);
          v128.store(a, f32x4.add(v128.load(a), t));
        }
        for (; r < nr; r++, ix += 3) {
          const t = load<f32>(T + (<usize>load<u8>(ix) << 2)) + load<f32>(T1 + (<usize>load<u8>(ix, 1) << 2)) + load<f32>(T2 + (<usize>load<u8>(ix, 2) << 2));
          const a = tmp + (<usize>r << 2);
          store<f32>(a, load<f32>(a) + t);
        }
      } else {
        for (let r = 0; r < nr; r++, ix += st) {
          let t = load<f32>(T + (<usize>load<u8>(ix) << 2));
          for (let s = 1; s < stages; s++) t += load<f32>(T + <usize>s * e1 + (<usize>load<u8>(ix + <usize>s) << 2));
          const a = tmp + (<usize>r << 2);
          store<f32>(a, load<f32>(a) + t);
        }
      }
    }
    if (v1 == vectors)
      for (let r = 0; r < nr; r++) {
        const row = rs + r;
        store<f32>(y + (<usize>row << 2), load<f32>(tmp + (<usize>r << 2)) * f16(<u32>load<u16>(scales + (<usize>row << 1))));
      }
    else for (let r = 0; r < nr; r++) store<f32>(y + (<usize>(rs + r) << 2), load<f32>(tmp + (<usize>r << 2)));
    rs = re;
  }
}

/**
 * Two tables from one input in one call (an expert's gate and up books): rows [0, vectors) of the
 * pair are vq_lut with CTa into lutA, rows [vectors, 2·vectors) the same with CTb into lutB. One
 * dispatch to the pool instead of two; each table entry is computed exactly as vq_lut computes it.
 */
export function vq_lut2(CTa: usize, CTb: usize, x: usize, lutA: usize, lutB: usize, vectors: i32, stages: i32, entries: i32, vecDim: i32, tmp: usize, v0: i32, v1: i32): void {
  if (v0 < vectors) vq_lut(CTa, x, lutA, stages, entries, vecDim, tmp, v0, min(v1, vectors));
  if (v1 > vectors) vq_lut(CTb, x, lutB, stages, entries, vecDim, tmp, max(v0, vectors) - vectors, v1 - vectors);
}

/**
 * Two matrices of one record with the same shape (an expert's gate and up) in one call: rows
 * [0, rows) of the pair are vq_apply of the first into yA, rows [rows, 2·rows) of the second into
 * yB. One dispatch to the pool instead of two; every row is computed exactly as vq_apply does.
 */
export function vq_apply2(rec: usize, idxA: i32, scaleA: i32, lutA: usize, yA: usize, idxB: i32, scaleB: i32, lutB: usize, yB: usize, rows: i32, vectors: i32, stages: i32, entries: i32, B: i32, tmp: usize, r0: i32, r1: i32): void {
  if (r0 < rows) vq_apply(rec, idxA, scaleA, lutA, yA, vectors, stages, entries, B, tmp, r0, min(r1, rows));
  if (r1 > rows) vq_apply(rec, idxB, scaleB, lutB, yB, vectors, stages, entries, B, tmp, max(r0, rows) - rows, r1 - rows);
}
