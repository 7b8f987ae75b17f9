// One expert matrix applied to several tokens' lookup tables in one pass over its indices.
// In a batched step or a prefill chunk an expert often serves several tokens; applying its record
// token after token decodes every index byte once per token. Here each block of indices is decoded
// once and its table offsets added into every token's accumulators, the record read once.
import { f16 } from './common';
import { vq_apply } from './vq';

/**
 * Token i's table and output are the u32 byte offsets at D + i·ds and D + i·ds + 4. Every output
 * row runs the same additions in the same order as vq_apply (a stage sum from stage 0 up, added to
 * the row's accumulator vector after vector, then times the row's scale), so each token's y is
 * bit-identical to its own vq_apply call. `tmp` holds n·B accumulators (B = the index block).
 */
function applyMany(rec: usize, idxOff: i32, scaleOff: i32, D: usize, ds: usize, n: i32, vectors: i32, stages: i32, entries: i32, B: i32, tmp: usize, r0: i32, r1: i32): void {
  if (B <= 0 || stages != 3) {
    // the row-major and other stage counts: one call per token (the same code, so the same bits)
    for (let i = 0; i < n; i++) {
      const d = D + <usize>i * ds;
      vq_apply(rec, idxOff, scaleOff, <usize>load<u32>(d), <usize>load<u32>(d, 4), vectors, stages, entries, B, tmp, r0, r1);
    }
    return;
  }
  const idx = rec + <usize>idxOff;
  const scales = rec + <usize>scaleOff;
  const vstride = <usize>stages * <usize>entries * 4;
  const e1 = <usize>entries << 2;
  const e2 = e1 << 1;
  // [n][B] one accumulator per row of the tile per token
  const tstride = <usize>B << 2;
  let rs = r0;
  while (rs < r1) {
    const b = rs / B;
    const re = min(r1, (b + 1) * B);
    const nr = re - rs;
    const rin0 = rs - b * B;
    for (let i = 0; i < n; i++) for (let r = 0; r < nr; r++) store<f32>(tmp + <usize>i * tstride + (<usize>r << 2), 0);
    for (let v = 0; v < vectors; v++) {
      const voff = <usize>v * vstride;
      let ix = idx + ((<usize>b * <usize>vectors + <usize>v) * <usize>B + <usize>rin0) * 3;
      let r = 0;
      for (; r + 4 <= nr; r += 4, ix += 12) {
        const w0 = load<u32>(ix);
        const w1 = load<u32>(ix, 4);
        const w2 = load<u32>(ix, 8);
        // the twelve table offsets of four rows, decoded once for every token
        const o0 = (w0 & 0xff) << 2, o1 = e1 + (((w0 >> 8) & 0xff) << 2), o2 = e2 + (((w0 >> 16) & 0xff) << 2);
        const o3 = (w0 >> 24) << 2, o4 = e1 + ((w1 & 0xff) << 2), o5 = e2 + (((w1 >> 8) & 0xff) << 2);
        const o6 = ((w1 >> 16) & 0xff) << 2, o7 = e1 + ((w1 >> 24) << 2), o8 = e2 + ((w2 & 0xff) << 2);
        const o9 = ((w2 >> 8) & 0xff) << 2, o10 = e1 + (((w2 >> 16) & 0xff) << 2), o11 = e2 + ((w2 >> 24) << 2);
        for (let i = 0; i < n; i++) {
          const T = <usize>load<u32>(D + <usize>i * ds) + voff;
          const t0 = load<f32>(T + o0) + load<f32>(T + o1) + load<f32>(T + o2);
          const t1 = load<f32>(T + o3) + load<f32>(T + o4) + load<f32>(T + o5);
          const t2 = load<f32>(T + o6) + load<f32>(T + o7) + load<f32>(T + o8);
          const t3 = load<f32>(T + o9) + load<f32>(T + o10) + load<f32>(T + o11);
          const a = tmp + <usize>i * tstride + (<usize>r << 2);
          const t = f32x4.replace_lane(f32x4.replace_lane(f32x4.replace_lane(f32x4.splat(t0), 1, t1), 2, t2), 3, t3);
          v128.store(a, f32x4.add(v128.load(a), t));
        }
      }
      for (; r < nr; r++, ix += 3) {
        const o0 = <usize>load<u8>(ix) << 2, o1 = e1 + (<usize>load<u8>(ix, 1) << 2), o2 = e2 + (<usize>load<u8>(ix, 2) << 2);
        for (let i = 0; i < n; i++) {
          const T = <usize>load<u32>(D + <usize>i * ds) + voff;
          const t = load<f32>(T + o0) + load<f32>(T + o1) + load<f32>(T + o2);
          const a = tmp + <usize>i * tstride + (<usize>r << 2);
          store<f32>(a, load<f32>(a) + t);
        }
      }
    }
    for (let r = 0; r < nr; r++) {
      const row = rs + r;
      const s = f16(<u32>load<u16>(scales + (<usize>row << 1)));
      for (let i = 0; i < n; i++) {
        const y = <usize>load<u32>(D + <usize>i * ds, 4);
        store<f32>(y + (<usize>row << 2), load<f32>(tmp + <usize>i * tstride + (<usize>r << 2)) * s);
      }
    }
    rs = re;
  }
}

/** One matrix for n tokens: D holds n pairs of u32 (table, output) offsets. */
export function vq_apply_many(rec: usize, idxOff: i32, scaleOff: i32, D: usize, n: i32, vectors: i32, stages: i32, entries: i32, B: i32, tmp: usize, r0: i32, r1: i32): void {
  applyMany(rec, idxOff, scaleOff, D, 8, n, vectors, stages, entries, B, tmp, r0, r1);
}

/**
 * An expert's gate and up for n tokens in one call: D holds n quadruples of u32 offsets (gate
 * table, gate output, up table, up output); rows [0, rows) are the gate's, [rows, 2·rows) the up's.
 */
export function vq_apply2_many(rec: usize, idxA: i32, scaleA: i32, idxB: i32, scaleB: i32, D: usize, n: i32, rows: i32, vectors: i32, stages: i32, entries: i32, B: i32, tmp: usize, r0: i32, r1: i32): void {
  if (r0 < rows) applyMany(rec, idxA, scaleA, D, 16, n, vectors, stages, entries, B, tmp, r0, min(r1, rows));
  if (r1 > rows) applyMany(rec, idxB, scaleB, D + 8, 16, n, vectors, stages, entries, B, tmp, max(r0, rows) - rows, r1 - rows);
}
