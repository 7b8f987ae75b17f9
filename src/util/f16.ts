/**
 * IEEE half precision. Decoding handles subnormals exactly (mantissa × 2⁻²⁴): flushing them to zero
 * silently zeroes whole quantization groups whose scale is tiny (the C engine measured 1.08% of K3's
 * trunk scales as subnormal).
 */
const F16_TABLE = buildTable();

function buildTable(): Float32Array {
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) t[h] = decodeF16(h);
  return t;
}

export function decodeF16(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const man = h & 0x3ff;
  if (exp === 0) return sign * man * 2 ** -24;
  if (exp === 31) return man ? NaN : sign * Infinity;
  return sign * (1 + man / 1024) * 2 ** (exp - 15);
}

/** Table lookup: the hot-path decode. */
export function f16(h: number): number {
  return F16_TABLE[h & 0xffff];
}

/** Round-to-nearest-even f32/f64 → f16 bits. Used by writers (synth, convert). */
export function encodeF16(value: number): number {
  const f = Math.fround(value);
  if (Number.isNaN(f)) return 0x7e00;
  const sign = f < 0 || Object.is(f, -0) ? 0x8000 : 0;
  const a = Math.abs(f);
  if (a === Infinity) return sign | 0x7c00;
  if (a >= 65520) return sign | 0x7c00; // rounds past the largest half
  if (a < 2 ** -24 * 0.5) return sign; // rounds to zero
  if (a < 2 ** -14) {
    // subnormal: value = m × 2⁻²⁴
    const m = roundHalfEven(a * 2 ** 24);
    return sign | m; // m may reach 1024, which is exactly the smallest normal's bits
  }
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1;
  if (2 ** (e + 1) <= a) e += 1;
  let m = roundHalfEven((a / 2 ** e - 1) * 1024);
  if (m === 1024) {
    m = 0;
    e += 1;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | ((e + 15) << 10) | m;
}

function roundHalfEven(x: number): number {
  const r = Math.round(x);
  if (Math.abs(x % 1) === 0.5 && r % 2 !== 0) return r - 1;
  return r;
}
