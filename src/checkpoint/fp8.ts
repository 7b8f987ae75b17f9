import { WasteError } from '../util/errors.js';

/**
 * FP8 block-scaled weights as DeepSeek-V3 and Kimi K2 release them (quantization_config
 * {quant_method "fp8", fmt "e4m3", weight_block_size [128, 128]}): a matrix [R, C] stored F8_E4M3
 * (OCP E4M3 "fn": sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, 0x7F and 0xFF
 * not a number) beside `weight_scale_inv` F32 [⌈R/128⌉, ⌈C/128⌉]; W[i][j] = fp8[i][j] ·
 * scale_inv[i/128][j/128]. Each E4M3 value is exact in f32; the product is rounded to f32 once.
 */
export const FP8_BLOCK = 128;

/** Every E4M3 byte's value (NaN for the two not-a-number codes). */
export const E4M3 = Float32Array.from({ length: 256 }, (_, b) => {
  const sign = b & 0x80 ? -1 : 1;
  const e = (b >> 3) & 15;
  const m = b & 7;
  if (e === 15 && m === 7) return NaN;
  return e === 0 ? sign * (m / 8) * 2 ** -6 : sign * (1 + m / 8) * 2 ** (e - 7);
});

/**
 * Decode rows [row0, row0 + n) of an FP8 matrix of `cols` columns: `bytes` holds their n × cols
 * values, `scales` the scale rows of their blocks (from row0's block on, ⌈cols/128⌉ a row).
 */
export function decodeFp8(bytes: Uint8Array, scales: Float32Array, row0: number, n: number, cols: number, out: Float32Array, what: string): void {
  const sc = Math.ceil(cols / FP8_BLOCK);
  const b0 = Math.floor(row0 / FP8_BLOCK);
  for (let r = 0; r < n; r++) {
    const srow = (Math.floor((row0 + r) / FP8_BLOCK) - b0) * sc;
    for (let j = 0; j < cols; j++) {
      const v = E4M3[bytes[r * cols + j]];
      if (v !== v) throw new WasteError('E_FORMAT', `${what}: row ${row0 + r} column ${j} is an FP8 not-a-number`);
      out[r * cols + j] = v * scales[srow + Math.floor(j / FP8_BLOCK)];
    }
  }
}

/** The nearest E4M3 byte to x (ties to the even code), saturating at ±448: for synthetic checkpoints. */
export function encodeE4M3(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.min(Math.abs(x), 448);
  // the positive codes 0..0x7E are in increasing order
  let lo = 0;
  let hi = 0x7e;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (E4M3[mid] <= a) lo = mid;
    else hi = mid;
  }
  const dl = a - E4M3[lo];
  const dh = E4M3[hi] - a;
  const code = dl < dh ? lo : dh < dl ? hi : lo % 2 === 0 ? lo : hi;
  return sign | code;
}

/** A matrix [rows, cols] quantized as a release stores it: each 128 × 128 block scaled so its largest magnitude is 448. */
export function encodeFp8(v: Float32Array, rows: number, cols: number): { bytes: Uint8Array; scales: Float32Array } {
  const sr = Math.ceil(rows / FP8_BLOCK);
  const sc = Math.ceil(cols / FP8_BLOCK);
  const scales = new Float32Array(sr * sc);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < cols; j++) {
      const s = Math.floor(i / FP8_BLOCK) * sc + Math.floor(j / FP8_BLOCK);
      scales[s] = Math.max(scales[s], Math.abs(v[i * cols + j]));
    }
  for (let s = 0; s < scales.length; s++) scales[s] = scales[s] ? scales[s] / 448 : 1;
  const bytes = new Uint8Array(rows * cols);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < cols; j++) bytes[i * cols + j] = encodeE4M3(v[i * cols + j] / scales[Math.floor(i / FP8_BLOCK) * sc + Math.floor(j / FP8_BLOCK)]);
  return { bytes, scales };
}
