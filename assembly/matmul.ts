// Matrix products over stored trunk tensors (F32, F16, Q8G, Q4G) with f32 activations.
// A row's dot product always runs the same sequence of operations, so a batched call, a single
// row and any split of rows across threads give bit-identical results.
import { F16, F32, Q4G, Q8G, f16, f16x8hi, f16x8lo, hsum, weightAt } from './common';

// @ts-ignore: decorator
@inline function dotF32(w: usize, x: usize, cols: i32): f32 {
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let i = 0;
  for (; i + 16 <= cols; i += 16) {
    const o = <usize>i << 2;
    a0 = f32x4.add(a0, f32x4.mul(v128.load(w + o), v128.load(x + o)));
    a1 = f32x4.add(a1, f32x4.mul(v128.load(w + o, 16), v128.load(x + o, 16)));
    a2 = f32x4.add(a2, f32x4.mul(v128.load(w + o, 32), v128.load(x + o, 32)));
    a3 = f32x4.add(a3, f32x4.mul(v128.load(w + o, 48), v128.load(x + o, 48)));
  }
  let s = hsum(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (; i < cols; i++) s += load<f32>(w + (<usize>i << 2)) * load<f32>(x + (<usize>i << 2));
  return s;
}

// @ts-ignore: decorator
@inline function dotF16(w: usize, x: usize, cols: i32): f32 {
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0);
  let i = 0;
  for (; i + 8 <= cols; i += 8) {
    const h = v128.load(w + (<usize>i << 1));
    const o = <usize>i << 2;
    a0 = f32x4.add(a0, f32x4.mul(f16x8lo(h), v128.load(x + o)));
    a1 = f32x4.add(a1, f32x4.mul(f16x8hi(h), v128.load(x + o, 16)));
  }
  let s = hsum(f32x4.add(a0, a1));
  for (; i < cols; i++) s += f16(<u32>load<u16>(w + (<usize>i << 1))) * load<f32>(x + (<usize>i << 2));
  return s;
}

/** One group of int8 weights (n valid values) against f32 activations. */
// @ts-ignore: decorator
@inline function groupQ8(w: usize, x: usize, n: i32): f32 {
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  let i = 0;
  for (; i + 16 <= n; i += 16) {
    const v = v128.load(w + <usize>i);
    const xo = x + (<usize>i << 2);
    const lo = i16x8.extend_low_i8x16_s(v);
    const hi = i16x8.extend_high_i8x16_s(v);
    a0 = f32x4.add(a0, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(lo)), v128.load(xo)));
    a1 = f32x4.add(a1, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(lo)), v128.load(xo, 16)));
    a2 = f32x4.add(a2, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(hi)), v128.load(xo, 32)));
    a3 = f32x4.add(a3, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(hi)), v128.load(xo, 48)));
  }
  let s = hsum(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (; i < n; i++) s += <f32>load<i8>(w + <usize>i) * load<f32>(x + (<usize>i << 2));
  return s;
}

/** One group of 4-bit weights (two per byte, even element in the low nibble, stored q + 8). */
// @ts-ignore: decorator
@inline function groupQ4(w: usize, x: usize, n: i32): f32 {
  let a0 = f32x4.splat(0), a1 = f32x4.splat(0), a2 = f32x4.splat(0), a3 = f32x4.splat(0);
  const mask = i8x16.splat(0x0f);
  const eight = i8x16.splat(8);
  let i = 0;
  for (; i + 32 <= n; i += 32) {
    const b = v128.load(w + (<usize>i >> 1));
    const lo = v128.and(b, mask);
    const hi = i8x16.shr_u(b, 4);
    const e0 = i8x16.sub(i8x16.shuffle(lo, hi, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), eight);
    const e1 = i8x16.sub(i8x16.shuffle(lo, hi, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), eight);
    const xo = x + (<usize>i << 2);
    let l = i16x8.extend_low_i8x16_s(e0);
    let h = i16x8.extend_high_i8x16_s(e0);
    a0 = f32x4.add(a0, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(l)), v128.load(xo)));
    a1 = f32x4.add(a1, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(l)), v128.load(xo, 16)));
    a2 = f32x4.add(a2, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(h)), v128.load(xo, 32)));
    a3 = f32x4.add(a3, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(h)), v128.load(xo, 48)));
    l = i16x8.extend_low_i8x16_s(e1);
    h = i16x8.extend_high_i8x16_s(e1);
    a0 = f32x4.add(a0, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(l)), v128.load(xo, 64)));
    a1 = f32x4.add(a1, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(l)), v128.load(xo, 80)));
    a2 = f32x4.add(a2, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(h)), v128.load(xo, 96)));
    a3 = f32x4.add(a3, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(h)), v128.load(xo, 112)));
  }
  let s = hsum(f32x4.add(f32x4.add(a0, a1), f32x4.add(a2, a3)));
  for (; i < n; i++) {
    const b = <i32>load<u8>(w + (<usize>i >> 1));
    s += <f32>(((i & 1) ? b >> 4 : b & 15) - 8) * load<f32>(x + (<usize>i << 2));
  }
  return s;
}

/** Row r of a stored matrix · x (the same arithmetic wherever it is called from). */
// @ts-ignore: decorator
@inline export function dotRow(fmt: i32, W: usize, S: usize, r: i32, x: usize, cols: i32, rowBytes: i32, groups: i32, G: i32): f32 {
  if (fmt == F32) return dotF32(W + <usize>r * <usize>cols * 4, x, cols);
  if (fmt == F16) return dotF16(W + <usize>r * <usize>cols * 2, x, cols);
  const row = W + <usize>r * <usize>rowBytes;
  const sc = S + <usize>r * <usize>groups * 2;
  let s: f32 = 0;
  for (let g = 0; g < groups; g++) {
    const c0 = g * G;
    const n = min(G, cols - c0);
    const p = fmt == Q8G ? groupQ8(row + <usize>c0, x + (<usize>c0 << 2), n) : groupQ4(row + (<usize>c0 >> 1), x + (<usize>c0 << 2), n);
    s += f16(<u32>load<u16>(sc + (<usize>g << 1))) * p;
  }
  return s;
}

/**
 * Y[t·ystride + r] = W[r] · X[t·cols …] for r in [r0, r1), t < T. The row stays in cache across
 * the T tokens; T = 1 is a matrix-vector product.
 */
export function mm(fmt: i32, W: usize, S: usize, X: usize, Y: usize, ystride: i32, cols: i32, rowBytes: i32, groups: i32, G: i32, T: i32, _tmp: usize, r0: i32, r1: i32): void {
  for (let r = r0; r < r1; r++) {
    for (let t = 0; t < T; t++) {
      store<f32>(Y + ((<usize>t * <usize>ystride + <usize>r) << 2), dotRow(fmt, W, S, r, X + <usize>t * <usize>cols * 4, cols, rowBytes, groups, G));
    }
  }
}

/**
 * y[j] = Σ_{i<n} c[i] · W[row0 + i][j] for j in [j0, j1): a product with the transposed rows of a
 * stored matrix (MLA's absorbed query). Split by output column, each column's sum runs over i in order.
 */
export function mvt(fmt: i32, W: usize, S: usize, c: usize, y: usize, row0: i32, n: i32, cols: i32, rowBytes: i32, groups: i32, G: i32, _tmp: usize, j0: i32, j1: i32): void {
  for (let j = j0; j < j1; j++) store<f32>(y + (<usize>j << 2), 0);
  for (let i = 0; i < n; i++) {
    const ci = load<f32>(c + (<usize>i << 2));
    if (ci == 0) continue;
    const r = row0 + i;
    const cv = f32x4.splat(ci);
    let j = j0;
    if (fmt == F32) {
      const row = W + <usize>r * <usize>cols * 4;
      for (; j + 4 <= j1; j += 4) {
        const o = <usize>j << 2;
        v128.store(y + o, f32x4.add(v128.load(y + o), f32x4.mul(cv, v128.load(row + o))));
      }
    } else if (fmt == Q8G && (j & 3) == 0) {
      const row = W + <usize>r * <usize>rowBytes;
      for (; j + 4 <= j1; j += 4) {
        const s = f32x4.splat(f16(<u32>load<u16>(S + ((<usize>r * <usize>groups + <usize>(j / G)) << 1))));
        const q = f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(i16x8.extend_low_i8x16_s(v128.load32_zero(row + <usize>j))));
        const o = <usize>j << 2;
        v128.store(y + o, f32x4.add(v128.load(y + o), f32x4.mul(cv, f32x4.mul(q, s))));
      }
    } else if (fmt == Q4G && (j & 7) == 0) {
      const row = W + <usize>r * <usize>rowBytes;
      for (; j + 8 <= j1; j += 8) {
        const s = f32x4.splat(f16(<u32>load<u16>(S + ((<usize>r * <usize>groups + <usize>(j / G)) << 1))));
        const b = v128.load32_zero(row + (<usize>j >> 1));
        const e = i8x16.sub(i8x16.shuffle(v128.and(b, i8x16.splat(0x0f)), i8x16.shr_u(b, 4), 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), i8x16.splat(8));
        const w16 = i16x8.extend_low_i8x16_s(e);
        const o = <usize>j << 2;
        v128.store(y + o, f32x4.add(v128.load(y + o), f32x4.mul(cv, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(w16)), s))));
        v128.store(y + o + 16, f32x4.add(v128.load(y + o + 16), f32x4.mul(cv, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(w16)), s))));
      }
    }
    for (; j < j1; j++) {
      const o = y + (<usize>j << 2);
      store<f32>(o, load<f32>(o) + ci * weightAt(fmt, W, S, r, j, cols, rowBytes, groups, G));
    }
  }
}
