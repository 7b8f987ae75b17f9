// Shared helpers for the kernels. Every pointer is a byte offset into the one imported memory (an
// arena); nothing here allocates. Each output element is computed by a fixed sequence of
// operations, so splitting work across threads by output rows never changes a bit of the result.

export const F32: i32 = 0;
export const F16: i32 = 1;
export const Q8G: i32 = 2;
export const Q4G: i32 = 3;

/** IEEE half → float, exact for normals and subnormals (non-finite halves are refused at load). */
// @ts-ignore: decorator
@inline export function f16(h: u32): f32 {
  const mag = reinterpret<f32>((h & 0x7fff) << 13) * reinterpret<f32>(<u32>0x77800000); // × 2^112
  return reinterpret<f32>(reinterpret<u32>(mag) | ((h & 0x8000) << 16));
}

/** Eight halves → two float vectors (lanes 0..3, 4..7). */
// @ts-ignore: decorator
@inline export function f16x8lo(h: v128): v128 {
  const u = i32x4.extend_low_i16x8_u(h);
  const mag = f32x4.mul(i32x4.shl(v128.and(u, i32x4.splat(0x7fff)), 13), f32x4.splat(reinterpret<f32>(<u32>0x77800000)));
  return v128.or(mag, i32x4.shl(v128.and(u, i32x4.splat(0x8000)), 16));
}
// @ts-ignore: decorator
@inline export function f16x8hi(h: v128): v128 {
  const u = i32x4.extend_high_i16x8_u(h);
  const mag = f32x4.mul(i32x4.shl(v128.and(u, i32x4.splat(0x7fff)), 13), f32x4.splat(reinterpret<f32>(<u32>0x77800000)));
  return v128.or(mag, i32x4.shl(v128.and(u, i32x4.splat(0x8000)), 16));
}

/** Horizontal sum in a fixed order: (l0 + l1) + (l2 + l3). */
// @ts-ignore: decorator
@inline export function hsum(v: v128): f32 {
  return (f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1)) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3));
}

// @ts-ignore: decorator
@inline export function ldf(p: usize): f32 {
  return load<f32>(p);
}

/** Sixteen int8 → sum of w·x over them, accumulated lane-wise into acc. */
// @ts-ignore: decorator
@inline export function madd16(acc: v128, w: v128, x: usize): v128 {
  const lo = i16x8.extend_low_i8x16_s(w);
  const hi = i16x8.extend_high_i8x16_s(w);
  acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(lo)), v128.load(x)));
  acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(lo)), v128.load(x, 16)));
  acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(hi)), v128.load(x, 32)));
  acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(hi)), v128.load(x, 48)));
  return acc;
}

/** Weight (row, col) of a stored matrix, dequantized. */
// @ts-ignore: decorator
@inline export function weightAt(fmt: i32, W: usize, S: usize, row: i32, col: i32, cols: i32, rowBytes: i32, groups: i32, G: i32): f32 {
  if (fmt == F32) return load<f32>(W + ((<usize>row * <usize>cols + <usize>col) << 2));
  if (fmt == F16) return f16(<u32>load<u16>(W + ((<usize>row * <usize>cols + <usize>col) << 1)));
  const s = f16(<u32>load<u16>(S + ((<usize>row * <usize>groups + <usize>(col / G)) << 1)));
  if (fmt == Q8G) return <f32>load<i8>(W + <usize>row * <usize>rowBytes + <usize>col) * s;
  const b = <i32>load<u8>(W + <usize>row * <usize>rowBytes + <usize>(col >> 1));
  return <f32>(((col & 1) ? b >> 4 : b & 15) - 8) * s;
}

/** Σ x² over n floats: four lanes, then the tail, in a fixed order. */
// @ts-ignore: decorator
@inline export function sumSquares(x: usize, n: i32): f32 {
  let a = f32x4.splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const v = v128.load(x + (<usize>i << 2));
    a = f32x4.add(a, f32x4.mul(v, v));
  }
  let ss = hsum(a);
  for (; i < n; i++) {
    const v = load<f32>(x + (<usize>i << 2));
    ss += v * v;
  }
  return ss;
}
