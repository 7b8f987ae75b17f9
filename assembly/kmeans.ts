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
}

/** dmin[r] = min(dmin[r], ‖X[r] − c‖²) for vectors [r0, r1): the k-means++ seeding update. */
export function dist_update(X: usize, c: usize, dim: i32, dmin: usize, _tmp: usize, r0: i32, r1: i32): void {
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
