import { imageError } from './refuse.js';

/**
 * GIF's variable-width LZW, read from sub-blocks whose run the caller has already found to
 * end inside `b`. Every entry's prefix is an older entry, so a string is at most 4096 long and
 * writing one always ends; a code past the next free entry is refused, never guessed at.
 * Returns how many indices the stream held (at most `out.length` are kept; any past that are
 * ignored, as browsers ignore them).
 */
export function lzwDecode(b: Uint8Array, p: number, minCodeSize: number, out: Uint8Array, name: string): number {
  const clear = 1 << minCodeSize;
  const end = clear + 1;
  const prefix = new Uint16Array(4096);
  const suffix = new Uint8Array(4096);
  const first = new Uint8Array(4096);
  const length = new Uint16Array(4096);
  for (let i = 0; i < clear; i++) {
    suffix[i] = i;
    first[i] = i;
    length[i] = 1;
  }
  let next = clear + 2;
  let size = minCodeSize + 1;
  let prev = -1;
  let bits = 0;
  let nbits = 0;
  let left = 0; // bytes left in the current sub-block
  let o = 0;
  const n = out.length;
  while (o < n) {
    while (nbits < size) {
      if (left === 0) {
        left = b[p++];
        if (left === 0) return o;
      }
      left--;
      bits |= b[p++] << nbits;
      nbits += 8;
    }
    const code = bits & ((1 << size) - 1);
    bits >>>= size;
    nbits -= size;
    if (code === clear) {
      next = clear + 2;
      size = minCodeSize + 1;
      prev = -1;
      continue;
    }
    if (code === end) return o;
    if (prev < 0) {
      if (code > clear) throw imageError(name, `malformed GIF: LZW code ${code} before any is defined`);
      out[o++] = code;
      prev = code;
      continue;
    }
    if (code > next) throw imageError(name, `malformed GIF: LZW code ${code} used before it is defined`);
    if (next < 4096) {
      prefix[next] = prev;
      suffix[next] = code < next ? first[code] : first[prev];
      first[next] = first[prev];
      length[next] = length[prev] + 1;
      next++;
      if (next === 1 << size && size < 12) size++;
    }
    // written back to front, along the chain of prefixes
    const len = length[code];
    for (let i = o + len - 1, k = code; i >= o; i--, k = prefix[k]) if (i < n) out[i] = suffix[k];
    o += len;
    prev = code;
  }
  return o;
}
