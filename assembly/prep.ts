// Exact integer activations for the quantized matrix products.
//
// Each group of G activations is scaled to 30-bit integers X = round(x · (2^30 − 1) / max|x|)
// and split as X = 2^15·H + L (H signed, L in [0, 32767]), both int16. A group's dot product with
// int8 or int4 weights w is then 2^15·Σw·H + Σw·L, two exact int32 sums from i32x4.dot_i16x8_s,
// and the rounding error is below 2^-31 of the group's largest activation: as accurate as f32,
// with about half the instructions of converting every weight to a float.
//
// Layout per token (stride prepStride(cols, G) bytes): H [groups·G] i16, L [groups·G] i16 (zero
// past cols), factor [groups] f32 = max|x| / (2^30 − 1), sumH [groups] i32, sumL [groups] i32.
// For Q4 weights each 32 activations are stored in the order the weights unpack in when 16 bytes
// are read as eight 16-bit lanes (lane k holds weights 4k … 4k+3, one per nibble): positions
// 0, 4, …, 28, then 1, 5, …, 29, then 2, 6, …, 30, then 3, 7, …, 31.

const SCALE: f64 = 1073741823.0; // 2^30 − 1

export function prepStride(cols: i32, G: i32): usize {
  const groups = (cols + G - 1) / G;
  const n = <usize>groups * <usize>G;
  return ((n * 4 + <usize>groups * 12) + 15) & ~(<usize>15);
}

/** Prepare T activation vectors X[t·cols …] into P (see above); `q4` picks the nibble order. */
export function act_prep(X: usize, cols: i32, G: i32, q4: i32, T: i32, P: usize): void {
  const groups = (cols + G - 1) / G;
  const n = <usize>groups * <usize>G;
  const stride = prepStride(cols, G);
  for (let t = 0; t < T; t++) {
    const x = X + <usize>t * <usize>cols * 4;
    const base = P + <usize>t * stride;
    const Hp = base;
    const Lp = base + n * 2;
    const Fp = base + n * 4;
    const SHp = Fp + <usize>groups * 4;
    const SLp = SHp + <usize>groups * 4;
    for (let g = 0; g < groups; g++) {
      const c0 = g * G;
      const c1 = min(cols, c0 + G);
      let m: f32 = 0;
      for (let c = c0; c < c1; c++) m = max(m, abs(load<f32>(x + (<usize>c << 2))));
      const k: f64 = m > 0 ? SCALE / <f64>m : 0;
      store<f32>(Fp + (<usize>g << 2), m > 0 ? <f32>(<f64>m / SCALE) : 0);
      let sh: i32 = 0, sl: i32 = 0;
      for (let c = c0; c < c0 + G; c++) {
        const v: f64 = c < c1 ? <f64>load<f32>(x + (<usize>c << 2)) * k : 0;
        const Xi = <i32>nearest(v);
        const h = Xi >> 15;
        const l = Xi - (h << 15);
        sh += h;
        sl += l;
        // position of element c in the stored order
        let pos = c;
        if (q4) {
          const within = c & 31;
          pos = (c & ~31) + ((within & 3) << 3) + (within >> 2);
        }
        store<i16>(Hp + (<usize>pos << 1), <i16>h);
        store<i16>(Lp + (<usize>pos << 1), <i16>l);
      }
      store<i32>(SHp + (<usize>g << 2), sh);
      store<i32>(SLp + (<usize>g << 2), sl);
    }
  }
}

// 16-bit activations (the 'a16' mode): each group of G becomes X = round(x · 32767 / max|x|) in
// int16, one multiply per weight instead of two. The rounding error is up to 2^-16 of the group's
// largest activation (about 1.5e-5), far finer than the 8-bit activations other engines use, but
// not f32-exact; the reference kernels (src/kernels/ts) quantize the same way, bit for bit.
//
// Layout per token (stride prep16Stride(cols, G) bytes): X [groups·G] i16 (zero past cols; the Q4
// lane order as above when q4), off [groups] i32x4, factor [groups] f32 = max|x| / 32767. Q4
// nibbles are q + 8, so each lane of a group's dot products carries 8·ΣX over the positions that
// lane sums (positions 2i and 2i+1 of every eight); off holds those four offsets to take off lane
// by lane. Taking them off before the lanes meet the f32 scale keeps each lane's sum small and
// exact, where one total taken off a single lane would leave large lanes to cancel in f32.

const SCALE16: f64 = 32767.0;

export function prep16Stride(cols: i32, G: i32): usize {
  const groups = (cols + G - 1) / G;
  const n = <usize>groups * <usize>G;
  return ((n * 2 + <usize>groups * 20) + 15) & ~(<usize>15);
}

/** Prepare T activation vectors X[t·cols …] as 16-bit groups into P (see above). */
export function act_prep16(X: usize, cols: i32, G: i32, q4: i32, T: i32, P: usize): void {
  const groups = (cols + G - 1) / G;
  const n = <usize>groups * <usize>G;
  const stride = prep16Stride(cols, G);
  for (let t = 0; t < T; t++) {
    const x = X + <usize>t * <usize>cols * 4;
    const base = P + <usize>t * stride;
    const Op = base + n * 2;
    const Fp = Op + <usize>groups * 16;
    for (let g = 0; g < groups; g++) {
      const c0 = g * G;
      const c1 = min(cols, c0 + G);
      let m: f32 = 0;
      for (let c = c0; c < c1; c++) m = max(m, abs(load<f32>(x + (<usize>c << 2))));
      const k: f64 = m > 0 ? SCALE16 / <f64>m : 0;
      store<f32>(Fp + (<usize>g << 2), m > 0 ? <f32>(<f64>m / SCALE16) : 0);
      const o = Op + (<usize>g << 4);
      v128.store(o, i32x4.splat(0));
      for (let c = c0; c < c0 + G; c++) {
        const Xi = c < c1 ? <i32>nearest(<f64>load<f32>(x + (<usize>c << 2)) * k) : 0;
        let pos = c;
        if (q4) {
          const within = c & 31;
          pos = (c & ~31) + ((within & 3) << 3) + (within >> 2);
        }
        store<i16>(base + (<usize>pos << 1), <i16>Xi);
        const lane = o + ((<usize>(pos & 7) >> 1) << 2);
        store<i32>(lane, load<i32>(lane) + 8 * Xi);
      }
    }
  }
}
