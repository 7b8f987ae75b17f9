import { WasteError } from '../util/errors.js';

/**
 * INT4 group-quantized matrices as compressed-tensors' `pack-quantized` format stores them (Kimi
 * K2-Thinking's routed experts: symmetric, groups of 32 along a row): `weight_packed` I32
 * [R, ⌈C/8⌉] — eight 4-bit values a word, column j in bits 4·(j mod 8), each stored as q + 8 —,
 * `weight_scale` [R, C/g] (BF16 in the release), `weight_shape` I32 [2] = [R, C].
 * W[i][j] = q[i][j] · scale[i][j/g]; a small integer times a bf16 scale is exact in f32.
 */

/** Decode n rows of `cols` columns: `packed` their ⌈cols/8⌉ little-endian words a row, `scales` their cols/group scales a row. */
export function decodeInt4(packed: Uint8Array, scales: Float32Array, n: number, cols: number, group: number, out: Float32Array): void {
  const words = Math.ceil(cols / 8);
  const dv = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  const G = cols / group;
  for (let r = 0; r < n; r++)
    for (let j = 0; j < cols; j++) {
      const word = dv.getUint32(4 * (r * words + (j >> 3)), true);
      const q = ((word >>> (4 * (j & 7))) & 15) - 8;
      out[r * cols + j] = q * scales[r * G + Math.floor(j / group)];
    }
}

/** The bf16 nearest to x (ties to even), as the f32 it stands for. */
function toBf16Value(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  u[0] = ((u[0] + 0x7fff + ((u[0] >>> 16) & 1)) >>> 16) << 16;
  return f[0];
}

/** A matrix quantized as compressed-tensors packs it (for synthetic checkpoints): symmetric, scale = max|w| / 7 of each group, rounded to bf16. */
export function encodeInt4(v: Float32Array, rows: number, cols: number, group: number): { packed: Uint8Array; scales: Float32Array } {
  if (cols % group) throw new WasteError('E_ARG', `${cols} columns are not whole groups of ${group}`);
  const G = cols / group;
  const words = Math.ceil(cols / 8);
  const scales = new Float32Array(rows * G);
  const packed = new Uint8Array(rows * words * 4);
  const dv = new DataView(packed.buffer);
  for (let r = 0; r < rows; r++)
    for (let g = 0; g < G; g++) {
      let m = 0;
      for (let j = g * group; j < (g + 1) * group; j++) m = Math.max(m, Math.abs(v[r * cols + j]));
      const s = toBf16Value(m ? m / 7 : 1);
      scales[r * G + g] = s;
      for (let j = g * group; j < (g + 1) * group; j++) {
        const q = Math.max(-8, Math.min(7, Math.round(v[r * cols + j] / s)));
        const at = 4 * (r * words + (j >> 3));
        dv.setUint32(at, (dv.getUint32(at, true) | ((q + 8) << (4 * (j & 7)))) >>> 0, true);
      }
    }
  return { packed, scales };
}
