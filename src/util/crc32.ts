import * as zlib from 'node:zlib';

/**
 * CRC-32 with zlib's polynomial, as written in every expert record header. Node ≥ 20.15 exposes
 * zlib's own (hardware-accelerated) crc32; older Node 20 releases fall back to slice-by-8 here.
 */
const TABLES = buildTables();

function buildTables(): Uint32Array[] {
  const t0 = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t0[n] = c >>> 0;
  }
  const tables = [t0];
  for (let s = 1; s < 8; s++) {
    const prev = tables[s - 1];
    const t = new Uint32Array(256);
    for (let n = 0; n < 256; n++) t[n] = (prev[n] >>> 8) ^ t0[prev[n] & 0xff];
    tables.push(t);
  }
  return tables;
}

/** Portable implementation; exported so tests can check it against zlib's. */
export function crc32Portable(data: Uint8Array, seed = 0): number {
  const [t0, t1, t2, t3, t4, t5, t6, t7] = TABLES;
  let c = ~seed >>> 0;
  let i = 0;
  const n = data.length;
  for (; i + 8 <= n; i += 8) {
    const a = (c ^ (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24))) >>> 0;
    c =
      t7[a & 0xff] ^
      t6[(a >>> 8) & 0xff] ^
      t5[(a >>> 16) & 0xff] ^
      t4[a >>> 24] ^
      t3[data[i + 4]] ^
      t2[data[i + 5]] ^
      t1[data[i + 6]] ^
      t0[data[i + 7]];
  }
  for (; i < n; i++) c = t0[(c ^ data[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

type NativeCrc = (data: Uint8Array, value?: number) => number;
const native: NativeCrc | undefined = (zlib as unknown as { crc32?: NativeCrc }).crc32;

export function crc32(data: Uint8Array, seed = 0): number {
  return native ? native(data, seed) >>> 0 : crc32Portable(data, seed);
}
