// Vector-quantization training and encoding for the converter: nearest-centroid search over 8-dim
// (or any small dim) vectors, and the k-means++ distance update. Split by vectors, each vector's
// arithmetic fixed, so a conversion's bytes do not depend on the thread count.

/**
 * For vectors [r0, r1) of X (dim floats each): the index of the nearest of `entries` centroids,
 * given transposed as CT [dim][entries], with cn[e] = ‖c_e‖². The distance compared is
 * ‖c‖² − 2 x·c (the ‖x‖² term is the same for every centroid); ties go to the lower index.
 * Writes idx[r] (u8 when `bytes`, else i32) and, when dist is nonzero, the full squared distance.
 */
export function vq_nearest(X: usize, CT: usize, cn: usize, entries: i32, dim: i32, idx: usize, bytes: i32, dist: usize, tmp: usize, r0: i32, r1: i32): void {
  if (dim == 8 && entries >= 4 && (entries & 3) == 0) {
    nearest8(X, CT, cn, entries, idx, bytes, dist, tmp, r0, r1);
    return;
  }
  const estride = <usize>entries * 4;
  for (let r = r0; r < r1; r++) {
    const x = X + <usize>r * <usize>dim * 4;
    let best = -1;
    let bestV: f32 = Infinity;
    let e = 0;
    if (entries >= 4) {
      let bv = f32x4.splat(Infinity);
      let bi = i32x4.splat(-1);
      let ids = i32x4(0, 1, 2, 3);
      for (; e + 4 <= entries; e += 4) {
        let acc = f32x4.splat(0);
        for (let d = 0; d < dim; d++) acc = f32x4.add(acc, f32x4.mul(f32x4.splat(load<f32>(x + (<usize>d << 2))), v128.load(CT + <usize>d * estride + (<usize>e << 2))));
        const v = f32x4.sub(v128.load(cn + (<usize>e << 2)), f32x4.add(acc, acc));
        const lt = f32x4.lt(v, bv);
        bv = v128.bitselect(v, bv, lt);
        bi = v128.bitselect(ids, bi, lt);
        ids = i32x4.add(ids, i32x4.splat(4));
      }
      // lanes hold the best of entries ≡ lane (mod 4); pick the smallest value, then the lowest index
      v128.store(tmp, bv);
      v128.store(tmp, bi, 16);
      for (let l = 0; l < 4; l++) {
        const v = load<f32>(tmp + (<usize>l << 2));
        const i = load<i32>(tmp + 16 + (<usize>l << 2));
        if (i < 0) continue;
        if (v < bestV || (v == bestV && i < best)) {
          bestV = v;
          best = i;
        }
      }
    }
    for (; e < entries; e++) {
      let acc: f32 = 0;
      for (let d = 0; d < dim; d++) acc += load<f32>(x + (<usize>d << 2)) * load<f32>(CT + <usize>d * estride + (<usize>e << 2));
      const v = load<f32>(cn + (<usize>e << 2)) - (acc + acc);
      if (v < bestV) {
        bestV = v;
        best = e;
      }
    }
    store_nearest(x, dim, r, best, bestV, idx, bytes, dist);
  }
}

/** Record vector r's nearest entry, and its squared distance ‖x‖² + (‖c‖² − 2x·c) when asked. */
@inline
function store_nearest(x: usize, dim: i32, r: i32, best: i32, bestV: f32, idx: usize, bytes: i32, dist: usize): void {
  if (bytes) store<u8>(idx + <usize>r, <u8>best);
  else store<i32>(idx + (<usize>r << 2), best);
  if (dist) {
    let xx: f32 = 0;
    for (let d = 0; d < dim; d++) {
      const v = load<f32>(x + (<usize>d << 2));
      xx += v * v;
    }
    store<f32>(dist + (<usize>r << 2), max<f32>(0, xx + bestV));
  }
}

/**
 * vq_nearest for 8-dim vectors (the VQ3R codec), two vectors per pass so each centroid load
 * serves both, the vector's components held in registers. Each vector's sums are formed in the
 * same order as the general loop, so both paths give the same bits.
 */
function nearest8(X: usize, CT: usize, cn: usize, entries: i32, idx: usize, bytes: i32, dist: usize, tmp: usize, r0: i32, r1: i32): void {
  const es = <usize>entries * 4;
  let r = r0;
  for (; r + 2 <= r1; r += 2) {
    const x = X + (<usize>r << 5);
    const y = x + 32;
    const a0 = f32x4.splat(load<f32>(x)), a1 = f32x4.splat(load<f32>(x, 4)), a2 = f32x4.splat(load<f32>(x, 8)), a3 = f32x4.splat(load<f32>(x, 12));
    const a4 = f32x4.splat(load<f32>(x, 16)), a5 = f32x4.splat(load<f32>(x, 20)), a6 = f32x4.splat(load<f32>(x, 24)), a7 = f32x4.splat(load<f32>(x, 28));
    const b0 = f32x4.splat(load<f32>(y)), b1 = f32x4.splat(load<f32>(y, 4)), b2 = f32x4.splat(load<f32>(y, 8)), b3 = f32x4.splat(load<f32>(y, 12));
    const b4 = f32x4.splat(load<f32>(y, 16)), b5 = f32x4.splat(load<f32>(y, 20)), b6 = f32x4.splat(load<f32>(y, 24)), b7 = f32x4.splat(load<f32>(y, 28));
    let av = f32x4.splat(Infinity);
    let bv = f32x4.splat(Infinity);
    let ai = i32x4.splat(-1);
    let bi = i32x4.splat(-1);
    let ids = i32x4(0, 1, 2, 3);
    for (let e: usize = 0; e < <usize>entries; e += 4) {
      const p = CT + (e << 2);
      const c0 = v128.load(p), c1 = v128.load(p + es), c2 = v128.load(p + 2 * es), c3 = v128.load(p + 3 * es);
      const c4 = v128.load(p + 4 * es), c5 = v128.load(p + 5 * es), c6 = v128.load(p + 6 * es), c7 = v128.load(p + 7 * es);
      const n = v128.load(cn + (e << 2));
      let s = f32x4.mul(a0, c0);
      s = f32x4.add(s, f32x4.mul(a1, c1));
      s = f32x4.add(s, f32x4.mul(a2, c2));
      s = f32x4.add(s, f32x4.mul(a3, c3));
      s = f32x4.add(s, f32x4.mul(a4, c4));
      s = f32x4.add(s, f32x4.mul(a5, c5));
      s = f32x4.add(s, f32x4.mul(a6, c6));
      s = f32x4.add(s, f32x4.mul(a7, c7));
      let t = f32x4.mul(b0, c0);
      t = f32x4.add(t, f32x4.mul(b1, c1));
      t = f32x4.add(t, f32x4.mul(b2, c2));
      t = f32x4.add(t, f32x4.mul(b3, c3));
      t = f32x4.add(t, f32x4.mul(b4, c4));
      t = f32x4.add(t, f32x4.mul(b5, c5));
      t = f32x4.add(t, f32x4.mul(b6, c6));
      t = f32x4.add(t, f32x4.mul(b7, c7));
      const va = f32x4.sub(n, f32x4.add(s, s));
      const vb = f32x4.sub(n, f32x4.add(t, t));
      const la = f32x4.lt(va, av);
      const lb = f32x4.lt(vb, bv);
      av = v128.bitselect(va, av, la);
      ai = v128.bitselect(ids, ai, la);
      bv = v128.bitselect(vb, bv, lb);
      bi = v128.bitselect(ids, bi, lb);
      ids = i32x4.add(ids, i32x4.splat(4));
    }
    finish(x, av, ai, r, idx, bytes, dist, tmp);
    finish(y, bv, bi, r + 1, idx, bytes, dist, tmp);
  }
  if (r < r1) {
    const x = X + (<usize>r << 5);
    const a0 = f32x4.splat(load<f32>(x)), a1 = f32x4.splat(load<f32>(x, 4)), a2 = f32x4.splat(load<f32>(x, 8)), a3 = f32x4.splat(load<f32>(x, 12));
    const a4 = f32x4.splat(load<f32>(x, 16)), a5 = f32x4.splat(load<f32>(x, 20)), a6 = f32x4.splat(load<f32>(x, 24)), a7 = f32x4.splat(load<f32>(x, 28));
    let av = f32x4.splat(Infinity);
    let ai = i32x4.splat(-1);
    let ids = i32x4(0, 1, 2, 3);
    for (let e: usize = 0; e < <usize>entries; e += 4) {
      const p = CT + (e << 2);
      let s = f32x4.mul(a0, v128.load(p));
      s = f32x4.add(s, f32x4.mul(a1, v128.load(p + es)));
      s = f32x4.add(s, f32x4.mul(a2, v128.load(p + 2 * es)));
      s = f32x4.add(s, f32x4.mul(a3, v128.load(p + 3 * es)));
      s = f32x4.add(s, f32x4.mul(a4, v128.load(p + 4 * es)));
      s = f32x4.add(s, f32x4.mul(a5, v128.load(p + 5 * es)));
      s = f32x4.add(s, f32x4.mul(a6, v128.load(p + 6 * es)));
      s = f32x4.add(s, f32x4.mul(a7, v128.load(p + 7 * es)));
      const va = f32x4.sub(v128.load(cn + (e << 2)), f32x4.add(s, s));
      const la = f32x4.lt(va, av);
      av = v128.bitselect(va, av, la);
      ai = v128.bitselect(ids, ai, la);
      ids = i32x4.add(ids, i32x4.splat(4));
    }
    finish(x, av, ai, r, idx, bytes, dist, tmp);
  }
}

/** Reduce the four lanes' best (smallest value, then lowest index) and store it. */
@inline
function finish(x: usize, bv: v128, bi: v128, r: i32, idx: usize, bytes: i32, dist: usize, tmp: usize): void {
  v128.store(tmp, bv);
  v128.store(tmp, bi, 16);
  let best = -1;
  let bestV: f32 = Infinity;
  for (let l = 0; l < 4; l++) {
    const v = load<f32>(tmp + (<usize>l << 2));
    const i = load<i32>(tmp + 16 + (<usize>l << 2));
    if (i < 0) continue;
    if (v < bestV || (v == bestV && i < best)) {
      bestV = v;
      best = i;
    }
  }
  store_nearest(x, 8, r, best, bestV, idx, bytes, dist);
}

/** dmin[r] = min(dmin[r], ‖X[r] − c‖²) for vectors [r0, r1): the k-means++ seeding update. */
export function dist_update(X: usize, c: usize, dim: i32, dmin: usize, _tmp: usize, r0: i32, r1: i32): void {
  if (dim == 8) {
    // two lanes of four: (x − c)² summed lane-wise, then across lanes in a fixed order
    const c0 = v128.load(c);
    const c1 = v128.load(c, 16);
    for (let r = r0; r < r1; r++) {
      const x = X + (<usize>r << 5);
      const d0 = f32x4.sub(v128.load(x), c0);
      const d1 = f32x4.sub(v128.load(x, 16), c1);
      const q = f32x4.add(f32x4.mul(d0, d0), f32x4.mul(d1, d1));
      const s = f32x4.extract_lane(q, 0) + f32x4.extract_lane(q, 1) + (f32x4.extract_lane(q, 2) + f32x4.extract_lane(q, 3));
      const o = dmin + (<usize>r << 2);
      if (s < load<f32>(o)) store<f32>(o, s);
    }
    return;
  }
  for (let r = r0; r < r1; r++) {
    const x = X + <usize>r * <usize>dim * 4;
    let s: f32 = 0;
    for (let d = 0; d < dim; d++) {
      const v = load<f32>(x + (<usize>d << 2)) - load<f32>(c + (<usize>d << 2));
      s += v * v;
    }
    const o = dmin + (<usize>r << 2);
    if (s < load<f32>(o)) store<f32>(o, s);
  }
}

/**
 * For vectors [r0, r1) of X: X[r] ← X[r] − c_{idx[r]} (idx u8), the centroids given transposed as
 * CT [dim][entries]: what a residual stage leaves for the next one (an exact f32 subtraction, the
 * same whatever does it).
 */
export function vq_subtract(X: usize, CT: usize, entries: i32, dim: i32, idx: usize, _tmp: usize, r0: i32, r1: i32): void {
  const estride = <usize>entries * 4;
  for (let r = r0; r < r1; r++) {
    const x = X + <usize>r * <usize>dim * 4;
    const e = <usize>load<u8>(idx + <usize>r) << 2;
    for (let d = 0; d < dim; d++) store<f32>(x + (<usize>d << 2), load<f32>(x + (<usize>d << 2)) - load<f32>(CT + <usize>d * estride + e));
  }
}
