import { Fmt } from '../container/format.js';
import { storedSizes } from '../container/tensor.js';
import { WasteError } from '../util/errors.js';
import { decodeF16, encodeF16 } from '../util/f16.js';

/**
 * Trunk quantization: symmetric int8 (Q8G) or int4 (Q4G) per group of `group` inputs, one f16
 * scale per group (absmax/127 or absmax/7, rounded to f16 first, so the values are quantized
 * against the scale the reader will use), rows padded with zeros to whole groups.
 */
export function quantizeRows(
  fmt: typeof Fmt.Q8G | typeof Fmt.Q4G,
  x: Float32Array,
  rows: number,
  cols: number,
  group = 128,
  what = 'a tensor',
): { payload: Uint8Array; scales: Uint16Array } {
  const s = storedSizes(fmt, rows, cols, group);
  const payload = new Uint8Array(s.payload);
  const scales = new Uint16Array(rows * s.groups);
  const qmax = fmt === Fmt.Q8G ? 127 : 7;
  const qmin = fmt === Fmt.Q8G ? -127 : -8;
  for (let r = 0; r < rows; r++) {
    const row = r * cols;
    const out = r * s.rowBytes;
    for (let g = 0; g < s.groups; g++) {
      const c0 = g * group;
      const c1 = Math.min(cols, c0 + group);
      let amax = 0;
      for (let c = c0; c < c1; c++) {
        const v = Math.abs(x[row + c]);
        if (!(v <= amax)) {
          if (!Number.isFinite(v)) throw new WasteError('E_FORMAT', `${what} holds a non-finite value at row ${r}, column ${c}`);
          amax = v;
        }
      }
      const h = encodeF16(amax / qmax);
      if (!Number.isFinite(decodeF16(h))) throw new WasteError('E_UNSUPPORTED', `${what}: row ${r} holds ${amax}, too large for an f16 group scale`);
      scales[r * s.groups + g] = h;
      const scale = decodeF16(h);
      for (let c = c0; c < c0 + group; c++) {
        let q = 0;
        if (c < c1 && scale > 0) q = Math.min(qmax, Math.max(qmin, roundHalfEven(x[row + c] / scale)));
        if (fmt === Fmt.Q8G) payload[out + c] = q & 0xff;
        else {
          const i = out + (c >> 1);
          payload[i] |= (c & 1 ? (q + 8) << 4 : q + 8) & 0xff;
        }
      }
    }
  }
  return { payload, scales };
}

export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}
