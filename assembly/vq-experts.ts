// Whole routed experts as jobs: a thread computes each of its experts from start to end.
import { silu_mul, situ_mul } from './elementwise';
import { vq_apply, vq_lut } from './vq';

/** Bytes of each thread's scratch (mirrors TMP_STRIDE in src/kernels/wasm/index.ts). */
const TMP_STRIDE: usize = 64 * 1024;

/**
 * Jobs [j0, j1) of a list at `jobs`, each [rec, lutG, lutU, y] (i32 byte offsets): one expert record
 * applied to one token whose gate and up tables are built. Per job, exactly the calls the
 * expert-by-expert form makes, in its order: gate and up (vq_apply, `I` rows over W/vecDim
 * vectors), the gated activation (act 0: SiLU, 1: SiTU with beta and linearBeta), the down table
 * from `booksD` (vq_lut) and down (vq_apply, W rows over I/vecDim vectors) into y [W]. So a job's
 * output is bit-identical to the expert-by-expert form's, whichever thread runs it.
 * Each thread's own [ffA (I) | ffB (I) | down table] is at work + index · workStride, its index
 * found from where its scratch `tmp` sits past the first thread's `tmp0`.
 */
export function vq_experts(
  jobs: usize, gateOff: i32, upOff: i32, downOff: i32, scaleOff: i32, I: i32, W: i32,
  stages: i32, entries: i32, vecDim: i32, B: i32, booksD: usize, act: i32, beta: f32, linearBeta: f32,
  work: usize, workStride: i32, tmp0: usize, tmp: usize, j0: i32, j1: i32,
): void {
  const mine = work + ((tmp - tmp0) / TMP_STRIDE) * <usize>workStride;
  const ffA = mine;
  const ffB = mine + (<usize>I << 2);
  const lutD = mine + (<usize>I << 3);
  const inVectors = W / vecDim;
  const midVectors = I / vecDim;
  for (let j = j0; j < j1; j++) {
    const d = jobs + (<usize>j << 4);
    const rec = <usize>load<u32>(d);
    vq_apply(rec, gateOff, scaleOff, <usize>load<u32>(d, 4), ffA, inVectors, stages, entries, B, tmp, 0, I);
    vq_apply(rec, upOff, scaleOff + 2 * I, <usize>load<u32>(d, 8), ffB, inVectors, stages, entries, B, tmp, 0, I);
    if (act == 0) silu_mul(ffA, ffB, I);
    else situ_mul(ffA, ffB, I, beta, linearBeta);
    vq_lut(booksD, ffA, lutD, stages, entries, vecDim, tmp, 0, midVectors);
    vq_apply(rec, downOff, scaleOff + 4 * I, lutD, <usize>load<u32>(d, 12), midVectors, stages, entries, B, tmp, 0, W);
  }
}
