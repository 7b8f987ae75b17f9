// Matrix products over stored trunk tensors (F32, F16, Q8G, Q4G) with f32 activations.
// A row's dot product always runs the same sequence of operations, so a batched call, a single
// row and any split of rows across threads give bit-identical results.
import { F16, F32, Q4G, Q8G, f16, f16x8hi, f16x8lo, hsum, weightAt } from './common';
import { prep16Stride, prepStride } from './prep';

/** a · b over n floats with four accumulators, summed in a fixed order. */
// @ts-ignore: decorator
@inline export function dotF32(w: usize, x: usize, cols: i32): f32 {
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

// A group's lane sums are exact int32 (A from the high halves, B from the low); they meet the
// group's scale in f32: (A·2^15 + B)·(scale·factor), lane-wise, into an f32x4 accumulator.
// Rounding A to f32 costs at most 2^-24 of it, the precision an f32 dot product has anyway.
// @ts-ignore: decorator
@inline function combine(acc: v128, a: v128, b: v128, f: f32): v128 {
  const v = f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(a), f32x4.splat(32768.0)), f32x4.convert_i32x4_s(b));
  return f32x4.add(acc, f32x4.mul(v, f32x4.splat(f)));
}

/** Row of int8 weights · prepared activations (G a multiple of 32; padding activations are 0). */
// @ts-ignore: decorator
@inline function dotQ8(row: usize, sc: usize, p: usize, groups: i32, G: i32): f32 {
  const n = <usize>groups * <usize>G;
  const L = p + n * 2;
  const F = p + n * 4;
  const g8 = <usize>G;
  let acc = f32x4.splat(0);
  let w = row, h = p, l = L;
  for (let g = 0; g < groups; g++) {
    // two integer accumulators and pointers that step: fewer live registers than one per half
    // (V8 spilled the four of the first version), 6 % faster
    let ah = i32x4.splat(0), al = i32x4.splat(0);
    for (let i: usize = 0; i < g8; i += 32) {
      const o = i << 1;
      let v = v128.load(w + i);
      let lo = i16x8.extend_low_i8x16_s(v);
      let hi = i16x8.extend_high_i8x16_s(v);
      ah = i32x4.add(ah, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(h + o)), i32x4.dot_i16x8_s(hi, v128.load(h + o, 16))));
      al = i32x4.add(al, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(l + o)), i32x4.dot_i16x8_s(hi, v128.load(l + o, 16))));
      v = v128.load(w + i, 16);
      lo = i16x8.extend_low_i8x16_s(v);
      hi = i16x8.extend_high_i8x16_s(v);
      ah = i32x4.add(ah, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(h + o, 32)), i32x4.dot_i16x8_s(hi, v128.load(h + o, 48))));
      al = i32x4.add(al, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(l + o, 32)), i32x4.dot_i16x8_s(hi, v128.load(l + o, 48))));
    }
    const f = f16(<u32>load<u16>(sc + (<usize>g << 1))) * load<f32>(F + (<usize>g << 2));
    acc = combine(acc, ah, al, f);
    w += g8;
    h += g8 << 1;
    l += g8 << 1;
  }
  return hsum(acc);
}

/**
 * Row of 4-bit weights (two per byte, even element in the low nibble, stored q + 8) · prepared
 * activations in lane order (see prep.ts): the nibbles multiply unsigned and 8·(2^15·ΣH + ΣL) is
 * taken off. Sixteen bytes read as eight 16-bit lanes give their 32 weights with one mask or
 * shift each, half the instructions of widening bytes to 16 bits (1.5× faster, docs/PERFORMANCE.md).
 */
// @ts-ignore: decorator
@inline function dotQ4(row: usize, sc: usize, p: usize, groups: i32, G: i32): f32 {
  const n = <usize>groups * <usize>G;
  const L = p + n * 2;
  const F = p + n * 4;
  const SH = F + <usize>groups * 4;
  const SL = SH + <usize>groups * 4;
  const m = i16x8.splat(0x000f);
  const half = <usize>G >> 1;
  let acc = f32x4.splat(0);
  let w = row, h = p, l = L;
  for (let g = 0; g < groups; g++) {
    let ah = i32x4.splat(0), al = i32x4.splat(0);
    for (let i: usize = 0; i < half; i += 16) {
      const b = v128.load(w + i);
      const o = i << 2;
      const e0 = v128.and(b, m);
      const e1 = v128.and(i16x8.shr_u(b, 4), m);
      ah = i32x4.add(ah, i32x4.add(i32x4.dot_i16x8_s(e0, v128.load(h + o)), i32x4.dot_i16x8_s(e1, v128.load(h + o, 16))));
      al = i32x4.add(al, i32x4.add(i32x4.dot_i16x8_s(e0, v128.load(l + o)), i32x4.dot_i16x8_s(e1, v128.load(l + o, 16))));
      const e2 = v128.and(i16x8.shr_u(b, 8), m);
      const e3 = i16x8.shr_u(b, 12);
      ah = i32x4.add(ah, i32x4.add(i32x4.dot_i16x8_s(e2, v128.load(h + o, 32)), i32x4.dot_i16x8_s(e3, v128.load(h + o, 48))));
      al = i32x4.add(al, i32x4.add(i32x4.dot_i16x8_s(e2, v128.load(l + o, 32)), i32x4.dot_i16x8_s(e3, v128.load(l + o, 48))));
    }
    // the −8 offset of every nibble, as exact integers folded into lane 0
    const a = i32x4.sub(ah, i32x4.replace_lane(i32x4.splat(0), 0, 8 * load<i32>(SH + (<usize>g << 2))));
    const b = i32x4.sub(al, i32x4.replace_lane(i32x4.splat(0), 0, 8 * load<i32>(SL + (<usize>g << 2))));
    const f = f16(<u32>load<u16>(sc + (<usize>g << 1))) * load<f32>(F + (<usize>g << 2));
    acc = combine(acc, a, b, f);
    w += half;
    h += <usize>G << 1;
    l += <usize>G << 1;
  }
  return hsum(acc);
}

// A group's exact int32 lane sums meet its scale: acc + f32(a) · f. The one-token and four-token
// forms below both step through it, which is what keeps their bits the same.
// @ts-ignore: decorator
@inline function addGroup(acc: v128, a: v128, f: f32): v128 {
  return f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(a), f32x4.splat(f)));
}

// The 16-bit activation forms (prep.ts, act_prep16): one i32x4.dot_i16x8_s per eight weights and
// one int32 accumulator per group; its exact lane sums meet the group's scale in f32.
// A lane adds G/4 products of at most 128 · 32767, which stays below 2^31 for groups up to 1024.
// @ts-ignore: decorator
@inline function dotQ8a16(row: usize, sc: usize, p: usize, groups: i32, G: i32): f32 {
  const n = <usize>groups * <usize>G;
  const F = p + n * 2 + <usize>groups * 16;
  const g8 = <usize>G;
  let acc = f32x4.splat(0);
  let w = row, x = p;
  for (let g = 0; g < groups; g++) {
    let a = i32x4.splat(0);
    for (let i: usize = 0; i < g8; i += 32) {
      const o = i << 1;
      let v = v128.load(w + i);
      a = i32x4.add(a, i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(v), v128.load(x + o)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(v), v128.load(x + o, 16))));
      v = v128.load(w + i, 16);
      a = i32x4.add(a, i32x4.add(i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(v), v128.load(x + o, 32)), i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(v), v128.load(x + o, 48))));
    }
    const f = f16(<u32>load<u16>(sc + (<usize>g << 1))) * load<f32>(F + (<usize>g << 2));
    acc = addGroup(acc, a, f);
    w += g8;
    x += g8 << 1;
  }
  return hsum(acc);
}

// @ts-ignore: decorator
@inline function dotQ4a16(row: usize, sc: usize, p: usize, groups: i32, G: i32): f32 {
  const n = <usize>groups * <usize>G;
  const O = p + n * 2;
  const F = O + <usize>groups * 16;
  const m = i16x8.splat(0x000f);
  const half = <usize>G >> 1;
  let acc = f32x4.splat(0);
  let w = row, x = p;
  for (let g = 0; g < groups; g++) {
    let a = i32x4.splat(0);
    for (let i: usize = 0; i < half; i += 16) {
      const b = v128.load(w + i);
      const o = i << 2;
      a = i32x4.add(a, i32x4.add(i32x4.dot_i16x8_s(v128.and(b, m), v128.load(x + o)), i32x4.dot_i16x8_s(v128.and(i16x8.shr_u(b, 4), m), v128.load(x + o, 16))));
      a = i32x4.add(a, i32x4.add(i32x4.dot_i16x8_s(v128.and(i16x8.shr_u(b, 8), m), v128.load(x + o, 32)), i32x4.dot_i16x8_s(i16x8.shr_u(b, 12), v128.load(x + o, 48))));
    }
    a = i32x4.sub(a, v128.load(O + (<usize>g << 4)));
    const f = f16(<u32>load<u16>(sc + (<usize>g << 1))) * load<f32>(F + (<usize>g << 2));
    acc = addGroup(acc, a, f);
    w += half;
    x += <usize>G << 1;
  }
  return hsum(acc);
}

/**
 * mm for Q8G/Q4G rows with 16-bit activations: P holds the T vectors prepared by act_prep16 (same
 * G, the Q4 order for Q4G). A row's arithmetic is the same wherever the rows are split.
 */
/** The four tokens' sums to y, y + ys, y + 2·ys, y + 3·ys (each summed as hsum sums one token's). */
// @ts-ignore: decorator
@inline function store4(y: usize, ys: usize, c0: v128, c1: v128, c2: v128, c3: v128): void {
  store<f32>(y, hsum(c0));
  store<f32>(y + ys, hsum(c1));
  store<f32>(y + 2 * ys, hsum(c2));
  store<f32>(y + 3 * ys, hsum(c3));
}

// Four tokens' dot products with one row at once: each weight vector is loaded and widened (Q8G) or
// its nibbles taken out (Q4G) once for several tokens, which is a third to a half of the per-token
// work at 16-bit activations. Each token's integer lane sums and f32 steps are dotQ8a16's /
// dotQ4a16's, in the same order, so the bits are those of four single-token calls: batched decode
// and prefill chunks run 1.1–1.3× faster in these products, and 1.07–1.32× more with the steps below
// (docs/PERFORMANCE.md). Q8G steps 16 weights at a time for the four: with 32 a step, V8 loaded
// the sixteen activation vectors early and spilled them to the stack. Q4G takes the four as two
// pairs over the row (its bytes stay in L1), for the same reason: four tokens × four nibble
// vectors left too few registers.
// @ts-ignore: decorator
@inline function dotQ8a16x4(row: usize, sc: usize, p: usize, ps: usize, groups: i32, G: i32, y: usize, ys: usize): void {
  const n = <usize>groups * <usize>G;
  const Foff = n * 2 + <usize>groups * 16;
  const g8 = <usize>G;
  let c0 = f32x4.splat(0), c1 = f32x4.splat(0), c2 = f32x4.splat(0), c3 = f32x4.splat(0);
  let w = row, x = p;
  for (let g = 0; g < groups; g++) {
    let a0 = i32x4.splat(0), a1 = i32x4.splat(0), a2 = i32x4.splat(0), a3 = i32x4.splat(0);
    for (let i: usize = 0; i < g8; i += 16) {
      const o = i << 1;
      const v = v128.load(w + i);
      const lo = i16x8.extend_low_i8x16_s(v), hi = i16x8.extend_high_i8x16_s(v);
      a0 = i32x4.add(a0, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(x + o)), i32x4.dot_i16x8_s(hi, v128.load(x + o, 16))));
      a1 = i32x4.add(a1, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(x + ps + o)), i32x4.dot_i16x8_s(hi, v128.load(x + ps + o, 16))));
      a2 = i32x4.add(a2, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(x + 2 * ps + o)), i32x4.dot_i16x8_s(hi, v128.load(x + 2 * ps + o, 16))));
      a3 = i32x4.add(a3, i32x4.add(i32x4.dot_i16x8_s(lo, v128.load(x + 3 * ps + o)), i32x4.dot_i16x8_s(hi, v128.load(x + 3 * ps + o, 16))));
    }
    const s = f16(<u32>load<u16>(sc + (<usize>g << 1)));
    const fo = Foff + (<usize>g << 2);
    c0 = addGroup(c0, a0, s * load<f32>(p + fo));
    c1 = addGroup(c1, a1, s * load<f32>(p + ps + fo));
    c2 = addGroup(c2, a2, s * load<f32>(p + 2 * ps + fo));
    c3 = addGroup(c3, a3, s * load<f32>(p + 3 * ps + fo));
    w += g8;
    x += g8 << 1;
  }
  store4(y, ys, c0, c1, c2, c3);
}

// @ts-ignore: decorator
@inline function dotQ4a16x4(row: usize, sc: usize, p: usize, ps: usize, groups: i32, G: i32, y: usize, ys: usize): void {
  dotQ4a16x2(row, sc, p, ps, groups, G, y, ys);
  dotQ4a16x2(row, sc, p + 2 * ps, ps, groups, G, y + 2 * ys, ys);
}

/** Two tokens' sums for one row to y and y + ys: dotQ4a16x4 takes its four as two such pairs. */
// @ts-ignore: decorator
@inline function dotQ4a16x2(row: usize, sc: usize, p: usize, ps: usize, groups: i32, G: i32, y: usize, ys: usize): void {
  const n = <usize>groups * <usize>G;
  const Ooff = n * 2;
  const Foff = Ooff + <usize>groups * 16;
  const m = i16x8.splat(0x000f);
  const half = <usize>G >> 1;
  let c0 = f32x4.splat(0), c1 = f32x4.splat(0);
  let w = row, x = p;
  for (let g = 0; g < groups; g++) {
    let a0 = i32x4.splat(0), a1 = i32x4.splat(0);
    for (let i: usize = 0; i < half; i += 16) {
      const b = v128.load(w + i);
      const o = i << 2;
      let e0 = v128.and(b, m), e1 = v128.and(i16x8.shr_u(b, 4), m);
      a0 = i32x4.add(a0, i32x4.add(i32x4.dot_i16x8_s(e0, v128.load(x + o)), i32x4.dot_i16x8_s(e1, v128.load(x + o, 16))));
      a1 = i32x4.add(a1, i32x4.add(i32x4.dot_i16x8_s(e0, v128.load(x + ps + o)), i32x4.dot_i16x8_s(e1, v128.load(x + ps + o, 16))));
      e0 = v128.and(i16x8.shr_u(b, 8), m);
      e1 = i16x8.shr_u(b, 12);
      a0 = i32x4.add(a0, i32x4.add(i32x4.dot_i16x8_s(e0, v128.load(x + o, 32)), i32x4.dot_i16x8_s(e1, v128.load(x + o, 48))));
      a1 = i32x4.add(a1, i32x4.add(i32x4.dot_i16x8_s(e0, v128.load(x + ps + o, 32)), i32x4.dot_i16x8_s(e1, v128.load(x + ps + o, 48))));
    }
    const go = <usize>g << 4;
    a0 = i32x4.sub(a0, v128.load(p + Ooff + go));
    a1 = i32x4.sub(a1, v128.load(p + ps + Ooff + go));
    const s = f16(<u32>load<u16>(sc + (<usize>g << 1)));
    const fo = Foff + (<usize>g << 2);
    c0 = addGroup(c0, a0, s * load<f32>(p + fo));
    c1 = addGroup(c1, a1, s * load<f32>(p + ps + fo));
    w += half;
    x += <usize>G << 1;
  }
  store<f32>(y, hsum(c0));
  store<f32>(y + ys, hsum(c1));
}

export function mm16(fmt: i32, W: usize, S: usize, P: usize, Y: usize, ystride: i32, cols: i32, rowBytes: i32, groups: i32, G: i32, T: i32, _tmp: usize, r0: i32, r1: i32): void {
  const pstride = prep16Stride(cols, G);
  for (let r = r0; r < r1; r++) {
    const row = W + <usize>r * <usize>rowBytes;
    const sc = S + <usize>r * <usize>groups * 2;
    let t0 = 0;
    for (; t0 + 4 <= T; t0 += 4) {
      const p = P + <usize>t0 * pstride;
      const y = Y + ((<usize>t0 * <usize>ystride + <usize>r) << 2);
      if (fmt == Q8G) dotQ8a16x4(row, sc, p, pstride, groups, G, y, <usize>ystride << 2);
      else dotQ4a16x4(row, sc, p, pstride, groups, G, y, <usize>ystride << 2);
    }
    for (let t = t0; t < T; t++) {
      const p = P + <usize>t * pstride;
      const v = fmt == Q8G ? dotQ8a16(row, sc, p, groups, G) : dotQ4a16(row, sc, p, groups, G);
      store<f32>(Y + ((<usize>t * <usize>ystride + <usize>r) << 2), v);
    }
  }
}

/**
 * Row r of a stored matrix · one activation vector: x (f32) for F32/F16 rows, its prepared integer
 * form p (see prep.ts) for Q8G/Q4G rows. The same arithmetic wherever it is called from.
 */
// @ts-ignore: decorator
@inline export function dotRow(fmt: i32, W: usize, S: usize, r: i32, x: usize, p: usize, cols: i32, rowBytes: i32, groups: i32, G: i32): f32 {
  if (fmt == F32) return dotF32(W + <usize>r * <usize>cols * 4, x, cols);
  if (fmt == F16) return dotF16(W + <usize>r * <usize>cols * 2, x, cols);
  const row = W + <usize>r * <usize>rowBytes;
  const sc = S + <usize>r * <usize>groups * 2;
  return fmt == Q8G ? dotQ8(row, sc, p, groups, G) : dotQ4(row, sc, p, groups, G);
}

/**
 * Y[t·ystride + r] = W[r] · X[t·cols …] for r in [r0, r1), t < T. The row stays in cache across
 * the T tokens; T = 1 is a matrix-vector product. For Q8G/Q4G, P holds the T activation vectors
 * prepared by act_prep (same G, and the Q4 order for Q4G).
 */
export function mm(fmt: i32, W: usize, S: usize, X: usize, P: usize, Y: usize, ystride: i32, cols: i32, rowBytes: i32, groups: i32, G: i32, T: i32, _tmp: usize, r0: i32, r1: i32): void {
  if (fmt == Q8G || fmt == Q4G) {
    const pstride = prepStride(cols, G);
    for (let r = r0; r < r1; r++) {
      const row = W + <usize>r * <usize>rowBytes;
      const sc = S + <usize>r * <usize>groups * 2;
      for (let t = 0; t < T; t++) {
        const p = P + <usize>t * pstride;
        const v = fmt == Q8G ? dotQ8(row, sc, p, groups, G) : dotQ4(row, sc, p, groups, G);
        store<f32>(Y + ((<usize>t * <usize>ystride + <usize>r) << 2), v);
      }
    }
    return;
  }
  for (let r = r0; r < r1; r++) {
    for (let t = 0; t < T; t++) {
      store<f32>(Y + ((<usize>t * <usize>ystride + <usize>r) << 2), dotRow(fmt, W, S, r, X + <usize>t * <usize>cols * 4, 0, cols, rowBytes, groups, G));
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

/**
 * Several matrices with the same input in one call (a layer's projections of its normed tokens):
 * D holds n descriptors of six i32 — fmt, W, S, rows, rowBytes, Y — and rows [r0, r1) count
 * through the matrices in order. Each part is mm16 (a16 = 1, P from act_prep16) or mm (P from
 * act_prep, X the f32 input) over its own rows, so every row is computed exactly as one matrix at a
 * time computes it: one dispatch to the pool and one preparation of the activations instead of n.
 */
export function mmn(n: i32, D: usize, a16: i32, X: usize, P: usize, cols: i32, groups: i32, G: i32, T: i32, tmp: usize, r0: i32, r1: i32): void {
  let base = 0;
  for (let i = 0; i < n && base < r1; i++) {
    const d = D + <usize>i * 24;
    const rows = load<i32>(d, 12);
    const lo = max(r0, base), hi = min(r1, base + rows);
    if (lo < hi) {
      const fmt = load<i32>(d), W = <usize>load<u32>(d, 4), S = <usize>load<u32>(d, 8), rowBytes = load<i32>(d, 16), Y = <usize>load<u32>(d, 20);
      if (a16) mm16(fmt, W, S, P, Y, rows, cols, rowBytes, groups, G, T, tmp, lo - base, hi - base);
      else mm(fmt, W, S, X, P, Y, rows, cols, rowBytes, groups, G, T, tmp, lo - base, hi - base);
    }
    base += rows;
  }
}
