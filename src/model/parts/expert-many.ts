import type { MoeHost } from './moe.js';
import { activate } from './ffn.js';
import type { Scratch } from './scratch.js';

/**
 * One routed expert for several (token, choice) slots of a chunk at once: gate and up for up to
 * `room` tokens in one pass over the record's indices (vqApplyPairMany), each token's activation
 * and down table, then down for all of them (vqApplyMany). The record is read and its indices
 * decoded once per group instead of once per token; each token's arithmetic is the one-token
 * path's, so its output row is bit-identical. Every token's gate/up tables are already built in
 * `sx.lut` ([token][gate, up][lutSize]). Outputs land in `s.expertOut` at [slot][W]. Returns false
 * (nothing done) when the arena's scratch has room for one token only.
 */
export function expertMany(h: MoeHost, rec: Uint8Array, sx: Scratch, s: Scratch, bookD: Float32Array, slots: readonly number[], lutSize: number, W: number): boolean {
  const { topK: K, inter: I } = h.moe;
  const k = h.kernels;
  const geom = h.geom!;
  const lay = h.record!;
  const downSize = (I / geom.vecDim) * geom.stages * geom.entries;
  // tokens the arena's buffers hold at once: [room][inter] ffA/ffB, [room][downSize] down tables, [room][W] outputs
  const room = Math.min(Math.floor(sx.ffA.length / I), Math.floor(sx.lutDown.length / downSize), sx === s ? Infinity : Math.floor(sx.expertOut.length / W));
  if (room < 2) return false;
  const sc = lay.scaleOff;
  for (let a = 0; a < slots.length; a += room) {
    const group = slots.slice(a, a + room);
    const n = group.length;
    const ffA = group.map((_, q) => sx.ffA.subarray(q * I, (q + 1) * I));
    const ffB = group.map((_, q) => sx.ffB.subarray(q * I, (q + 1) * I));
    const lutsG = group.map((slot) => {
      const t = Math.floor(slot / K);
      return sx.lut.subarray(2 * t * lutSize, (2 * t + 1) * lutSize);
    });
    const lutsU = group.map((slot) => {
      const t = Math.floor(slot / K);
      return sx.lut.subarray((2 * t + 1) * lutSize, (2 * t + 2) * lutSize);
    });
    if (n === 1) k.vqApplyPair(rec, { idxOff: lay.gateOff, scaleOff: sc, lut: lutsG[0], y: ffA[0] }, { idxOff: lay.upOff, scaleOff: sc + 2 * I, lut: lutsU[0], y: ffB[0] }, I, W, geom);
    else k.vqApplyPairMany(rec, { idxOff: lay.gateOff, scaleOff: sc, luts: lutsG, ys: ffA }, { idxOff: lay.upOff, scaleOff: sc + 2 * I, luts: lutsU, ys: ffB }, I, W, geom);
    const downs = group.map((_, q) => sx.lutDown.subarray(q * downSize, (q + 1) * downSize));
    for (let q = 0; q < n; q++) {
      activate(k, h.act, ffA[q], ffB[q], I);
      k.vqLut(bookD, geom.stages, geom.entries, geom.vecDim, ffA[q], I, downs[q]);
    }
    // an expert arena holds `room` output rows; the layer's scratch holds them all
    const dst = group.map((slot, q) => (sx === s ? s.expertOut.subarray(slot * W, (slot + 1) * W) : sx.expertOut.subarray(q * W, (q + 1) * W)));
    if (n === 1) k.vqApply(rec, lay.downOff, sc + 4 * I, W, I, geom, downs[0], dst[0]);
    else k.vqApplyMany(rec, { idxOff: lay.downOff, scaleOff: sc + 4 * I, luts: downs, ys: dst }, W, I, geom);
    if (sx !== s) group.forEach((slot, q) => s.expertOut.set(dst[q], slot * W));
  }
  return true;
}
