import { WasteError } from '../util/errors.js';

/**
 * MXFP4 (OCP microscaling, as compressed-tensors packs Kimi K3's routed experts): a matrix [R, N]
 * is `weight_packed` [R, N/2] — two FP4 (E2M1) values a byte, the even column in the low nibble —
 * and `weight_scale` [R, N/32] — one E8M0 exponent byte per group of 32 columns, scale 2^(e − 127).
 * Every value is exactly representable in f32, so decoding is exact.
 */
export const MXFP4_GROUP = 32;

/** |E2M1| by its three low bits; bit 3 is the sign. */
const MAGNITUDE = [0, 0.5, 1, 1.5, 2, 3, 4, 6];

/** 2^(e − 127) for every E8M0 byte; 255 is "not a number" in OCP MX and refused. */
const SCALE = Array.from({ length: 255 }, (_, e) => 2 ** (e - 127));

/**
 * Decode rows of an MXFP4 matrix of `cols` columns into f32: `packed` holds n × cols/2 bytes,
 * `scales` n × cols/32. `what` names the tensor in errors.
 */
export function decodeMxfp4(packed: Uint8Array, scales: Uint8Array, n: number, cols: number, out: Float32Array, what: string, row0 = 0): void {
  if (cols % MXFP4_GROUP !== 0) throw new WasteError('E_FORMAT', `${what}: ${cols} columns are not whole groups of ${MXFP4_GROUP}`);
  const half = cols / 2;
  const groups = cols / MXFP4_GROUP;
  for (let r = 0; r < n; r++)
    for (let g = 0; g < groups; g++) {
      const e = scales[r * groups + g];
      // e = 0 is 2^-127 in OCP MX (the C engine reads it as 0: the difference is below any weight)
      if (e === 255) throw new WasteError('E_FORMAT', `${what}: row ${row0 + r} group ${g} has the E8M0 scale 0xFF, which is not a number`);
      const s = SCALE[e];
      for (let j = 0; j < MXFP4_GROUP / 2; j++) {
        const c = g * MXFP4_GROUP + 2 * j;
        const b = packed[r * half + (c >> 1)];
        out[r * cols + c] = fp4(b & 15) * s;
        out[r * cols + c + 1] = fp4(b >> 4) * s;
      }
    }
}

const fp4 = (nib: number) => (nib & 8 ? -MAGNITUDE[nib & 7] : MAGNITUDE[nib & 7]);

/**
 * Encode f32 rows as MXFP4 (for synthetic checkpoints): each group's scale is the power of two that
 * brings its largest magnitude to at most 6, each value the nearest E2M1 (ties to the smaller magnitude).
 */
export function encodeMxfp4(x: Float32Array, rows: number, cols: number): { packed: Uint8Array; scales: Uint8Array } {
  const groups = cols / MXFP4_GROUP;
  const packed = new Uint8Array((rows * cols) / 2);
  const scales = new Uint8Array(rows * groups);
  for (let r = 0; r < rows; r++)
    for (let g = 0; g < groups; g++) {
      let amax = 0;
      for (let j = 0; j < MXFP4_GROUP; j++) amax = Math.max(amax, Math.abs(x[r * cols + g * MXFP4_GROUP + j]));
      const e = amax > 0 ? Math.min(254, Math.max(1, 127 + Math.ceil(Math.log2(amax / 6)))) : 127;
      scales[r * groups + g] = e;
      const s = 2 ** (e - 127);
      for (let j = 0; j < MXFP4_GROUP; j++) {
        const c = g * MXFP4_GROUP + j;
        const v = x[r * cols + c] / s;
        let best = 0;
        for (let k = 1; k < 8; k++) if (Math.abs(Math.abs(v) - MAGNITUDE[k]) < Math.abs(Math.abs(v) - MAGNITUDE[best])) best = k;
        const nib = best | (v < 0 && best ? 8 : 0);
        const at = (r * cols + c) >> 1;
        packed[at] |= c & 1 ? nib << 4 : nib;
      }
    }
  return { packed, scales };
}
