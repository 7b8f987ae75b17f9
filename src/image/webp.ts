import { checkDimensions, imageError } from './refuse.js';

/**
 * WebP's size, from its first chunk; its pixels are refused (see decode.ts). Lossy (VP8),
 * lossless (VP8L) and extended (VP8X) files each state the size in their own way.
 */
export function webpSize(b: Uint8Array, name: string): { width: number; height: number } {
  if (b.length < 30) throw imageError(name, 'truncated WebP data (in the header)');
  const fourcc = String.fromCharCode(b[12], b[13], b[14], b[15]);
  let width: number;
  let height: number;
  if (fourcc === 'VP8 ') {
    if (b[23] !== 0x9d || b[24] !== 0x01 || b[25] !== 0x2a) throw imageError(name, 'malformed WebP: no VP8 start code');
    width = (b[26] | (b[27] << 8)) & 0x3fff;
    height = (b[28] | (b[29] << 8)) & 0x3fff;
  } else if (fourcc === 'VP8L') {
    if (b[20] !== 0x2f) throw imageError(name, 'malformed WebP: no VP8L signature');
    const bits = (b[21] | (b[22] << 8) | (b[23] << 16) | (b[24] << 24)) >>> 0;
    width = (bits & 0x3fff) + 1;
    height = ((bits >>> 14) & 0x3fff) + 1;
  } else if (fourcc === 'VP8X') {
    width = 1 + (b[24] | (b[25] << 8) | (b[26] << 16));
    height = 1 + (b[27] | (b[28] << 8) | (b[29] << 16));
  } else throw imageError(name, 'malformed WebP: the first chunk is not VP8, VP8L or VP8X');
  checkDimensions(name, width, height, Infinity);
  return { width, height };
}
