import { checkDimensions, imageError } from './refuse.js';
import type { DecodedImage } from './types.js';

/**
 * BMP, decoded here: uncompressed 1-, 4- and 8-bit palette images and 16-, 24- and 32-bit ones
 * (channel masks from BI_BITFIELDS; a 32-bit BI_RGB image's fourth byte is padding, as the
 * format says). RLE, embedded JPEG or PNG and OS/2 headers are refused by name. The npm
 * decoders read the header unchecked (a negative width, a palette count of four billion, an
 * offset past the end) or drop the palette, and this much is small enough to check whole.
 */

const BI_RGB = 0;
const BI_BITFIELDS = 3;
const BI_ALPHABITFIELDS = 6;
const COMPRESSION_NAMES: Record<number, string> = { 1: 'RLE8', 2: 'RLE4', 4: 'embedded JPEG', 5: 'embedded PNG' };
/** BITMAPINFOHEADER, its V2 and V3 extensions with masks, V4, V5. */
const INFO_SIZES = [40, 52, 56, 108, 124];

interface Mask {
  shift: number;
  max: number;
}

interface Header {
  width: number;
  height: number;
  topDown: boolean;
  bpp: number;
  dataOffset: number;
  /** for bpp ≤ 8 */
  palette?: Uint8Array;
  paletteSize: number;
  /** for 16 and 32 bits: red, green, blue, alpha (max 0: absent) */
  masks?: Mask[];
}

const u16 = (b: Uint8Array, p: number): number => b[p] | (b[p + 1] << 8);
const u32 = (b: Uint8Array, p: number): number => (b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (b[p + 3] << 24)) >>> 0;
const i32 = (b: Uint8Array, p: number): number => b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (b[p + 3] << 24);

function readMask(m: number, bpp: number, name: string): Mask {
  if (m === 0) return { shift: 0, max: 0 };
  if (bpp < 32 && m >>> bpp !== 0) throw imageError(name, `malformed BMP: channel mask 0x${m.toString(16)} is wider than ${bpp} bits`);
  let shift = 0;
  while (((m >>> shift) & 1) === 0) shift++;
  const max = m >>> shift;
  if ((max & (max + 1)) !== 0) throw imageError(name, `malformed BMP: channel mask 0x${m.toString(16)} is not one run of bits`);
  return { shift, max };
}

function readHeader(b: Uint8Array, name: string): Header {
  if (b.length < 26) throw imageError(name, 'truncated BMP data (in the header)');
  const dataOffset = u32(b, 10);
  const infoSize = u32(b, 14);
  if (infoSize === 12 || infoSize === 64) throw imageError(name, 'unsupported BMP: an OS/2 header');
  if (!INFO_SIZES.includes(infoSize)) throw imageError(name, `malformed BMP: an info header of ${infoSize} bytes`);
  if (b.length < 14 + infoSize) throw imageError(name, 'truncated BMP data (in the header)');
  const width = i32(b, 18);
  const rawHeight = i32(b, 22);
  const bpp = u16(b, 28);
  const compression = u32(b, 30);
  if (width < 0) throw imageError(name, `malformed BMP: negative width ${width}`);
  const height = Math.abs(rawHeight);
  if (u16(b, 26) !== 1) throw imageError(name, `malformed BMP: ${u16(b, 26)} planes`);
  if (COMPRESSION_NAMES[compression]) throw imageError(name, `unsupported BMP: ${COMPRESSION_NAMES[compression]} compression`);
  const bitfields = compression === BI_BITFIELDS || compression === BI_ALPHABITFIELDS;
  if (compression !== BI_RGB && !bitfields) throw imageError(name, `malformed BMP: unknown compression ${compression}`);
  if (![1, 4, 8, 16, 24, 32].includes(bpp)) throw imageError(name, `unsupported BMP: ${bpp} bits per pixel`);
  if (bitfields && bpp !== 16 && bpp !== 32) throw imageError(name, `malformed BMP: channel masks with ${bpp} bits per pixel`);
  let tableAt = 14 + infoSize;
  const header: Header = { width, height, topDown: rawHeight < 0, bpp, dataOffset, paletteSize: 0 };
  if (bitfields) {
    // a bare BITMAPINFOHEADER is followed by the masks; the longer headers hold them
    const count = compression === BI_ALPHABITFIELDS ? 4 : 3;
    const at = infoSize === 40 ? tableAt : 54;
    if (infoSize === 40) tableAt += 4 * count;
    if (b.length < at + 4 * count) throw imageError(name, 'truncated BMP data (in the channel masks)');
    const alpha = count === 4 || infoSize >= 56 ? u32(b, at + 12) : 0;
    header.masks = [u32(b, at), u32(b, at + 4), u32(b, at + 8), alpha].map((m) => readMask(m, bpp, name));
  } else if (bpp === 16) header.masks = [0x7c00, 0x03e0, 0x001f, 0].map((m) => readMask(m, bpp, name));
  else if (bpp === 32) header.masks = [0xff0000, 0xff00, 0xff, 0].map((m) => readMask(m, bpp, name));
  if (bpp <= 8) {
    const used = u32(b, 46);
    // indices past 2^bpp cannot occur, so a longer stated table is only read as far as they reach
    const size = used === 0 || used > 1 << bpp ? 1 << bpp : used;
    if (tableAt + 4 * size > b.length) throw imageError(name, 'truncated BMP data (in the palette)');
    header.palette = b.subarray(tableAt, tableAt + 4 * size);
    header.paletteSize = size;
  }
  if (dataOffset > b.length) throw imageError(name, `malformed BMP: pixel data offset ${dataOffset} is outside the file`);
  if (dataOffset < 14 + infoSize) throw imageError(name, `malformed BMP: pixel data offset ${dataOffset} is inside the header`);
  return header;
}

export function bmpSize(bytes: Uint8Array, name: string): { width: number; height: number } {
  const { width, height } = readHeader(bytes, name);
  checkDimensions(name, width, height, Infinity);
  return { width, height };
}

export function decodeBmp(b: Uint8Array, name: string, maxPixels: number): DecodedImage {
  const h = readHeader(b, name);
  const { width, height, bpp } = h;
  checkDimensions(name, width, height, maxPixels);
  const stride = Math.ceil((width * bpp) / 32) * 4;
  if (h.dataOffset + stride * height > b.length) throw imageError(name, `truncated BMP data (the pixel data needs ${stride * height} bytes from byte ${h.dataOffset})`);
  const rgb = new Uint8Array(width * height * 3);
  const alphaMask = h.masks?.[3];
  const alpha = alphaMask && alphaMask.max > 0 ? new Uint8Array(width * height) : undefined;
  const scale = h.masks?.map((m) => (m.max > 0 ? 255 / m.max : 0));
  for (let y = 0; y < height; y++) {
    const row = h.dataOffset + (h.topDown ? y : height - 1 - y) * stride;
    let o = y * width;
    if (h.palette) {
      const perByte = 8 / bpp;
      const valueMask = (1 << bpp) - 1;
      for (let x = 0; x < width; x++, o++) {
        const byte = b[row + Math.floor(x / perByte)];
        const index = (byte >> (8 - bpp * ((x % perByte) + 1))) & valueMask;
        if (index >= h.paletteSize) throw imageError(name, `malformed BMP: pixel index ${index} is past the palette of ${h.paletteSize} colors`);
        rgb[3 * o] = h.palette[4 * index + 2];
        rgb[3 * o + 1] = h.palette[4 * index + 1];
        rgb[3 * o + 2] = h.palette[4 * index];
      }
    } else if (bpp === 24) {
      for (let x = 0, p = row; x < width; x++, o++, p += 3) {
        rgb[3 * o] = b[p + 2];
        rgb[3 * o + 1] = b[p + 1];
        rgb[3 * o + 2] = b[p];
      }
    } else {
      const masks = h.masks as Mask[];
      const s = scale as number[];
      const bytes = bpp / 8;
      for (let x = 0, p = row; x < width; x++, o++, p += bytes) {
        const v = bytes === 2 ? u16(b, p) : u32(b, p);
        for (let c = 0; c < 3; c++) rgb[3 * o + c] = Math.round((((v >>> masks[c].shift) & masks[c].max) >>> 0) * s[c]);
        if (alpha) alpha[o] = Math.round((((v >>> masks[3].shift) & masks[3].max) >>> 0) * s[3]);
      }
    }
  }
  return alpha ? { width, height, rgb, alpha, format: 'bmp' } : { width, height, rgb, format: 'bmp' };
}
