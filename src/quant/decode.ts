import type { Codebooks } from '../container/codebooks.js';
import { type ExpertQuant, type RecordLayout, indexOffset } from '../container/format.js';
import { f16 } from '../util/f16.js';

/**
 * One matrix of an expert record expanded to f32 [rows][cols]: W[r, v·dim + d] = scale[r] ·
 * Σ_s book(base + kind·stages + s)[index(r, v, s)][d]. Never on the hot path (the engine computes
 * through lookup tables); this is for measuring a conversion's weight error and for tests.
 */
export function decodeRecordMatrix(rec: Uint8Array, layout: RecordLayout, q: ExpertQuant, books: Codebooks, kind: 0 | 1 | 2): Float32Array {
  const dv = new DataView(rec.buffer, rec.byteOffset, rec.byteLength);
  const base = dv.getUint16(10, true);
  const { rows, cols } = layout.shapes[kind];
  const vectors = cols / q.vecDim;
  const off = [layout.gateOff, layout.upOff, layout.downOff][kind];
  let scaleOff = layout.scaleOff;
  for (let m = 0; m < kind; m++) scaleOff += 2 * layout.shapes[m].rows;
  const per = q.entries * q.vecDim;
  const W = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const s = f16(dv.getUint16(scaleOff + 2 * r, true));
    for (let v = 0; v < vectors; v++) {
      const at = off + indexOffset(r, v, vectors, q);
      for (let st = 0; st < q.stages; st++) {
        const book = (base + kind * q.stages + st) * per + rec[at + st] * q.vecDim;
        for (let d = 0; d < q.vecDim; d++) W[r * cols + v * q.vecDim + d] += books.values[book + d];
      }
      for (let d = 0; d < q.vecDim; d++) W[r * cols + v * q.vecDim + d] *= s;
    }
  }
  return W;
}
