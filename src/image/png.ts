import * as zlib from 'node:zlib';
import pngjs from 'pngjs';
import { crc32 } from '../util/crc32.js';
import { checkDimensions, cause, imageError } from './refuse.js';
import type { DecodedImage } from './types.js';

/**
 * PNG through pngjs (all bit depths, palette, gray, gray+alpha, RGBA, Adam7; tRNS applied to
 * the samples as stored; a 16-bit sample becomes its high byte, as the C engine's stb_image and
 * the release's PIL both read it).
 * Before pngjs sees a byte, the chunks are walked here: the size is checked from IHDR, and the
 * image data is inflated with its output capped at what IHDR allows. pngjs inflates interlaced
 * data without a cap, so a small file could otherwise inflate to gigabytes; and a stream that
 * ends early or inflates short would otherwise be decoded as rows of zeros, not refused.
 */

interface Header {
  width: number;
  height: number;
  depth: number;
  colorType: number;
  interlaced: boolean;
}

/** Bit depths each color type allows, and its samples per pixel. */
const COLOR_TYPES: Record<number, { depths: number[]; channels: number }> = {
  0: { depths: [1, 2, 4, 8, 16], channels: 1 }, // gray
  2: { depths: [8, 16], channels: 3 }, // RGB
  3: { depths: [1, 2, 4, 8], channels: 1 }, // palette
  4: { depths: [8, 16], channels: 2 }, // gray + alpha
  6: { depths: [8, 16], channels: 4 }, // RGBA
};

/** Chunks whose meaning a decoder must know; any other critical chunk is refused, as the spec asks. */
const CRITICAL = new Set(['IHDR', 'PLTE', 'IDAT', 'IEND']);

const u32 = (b: Uint8Array, p: number): number => ((b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3]) >>> 0;

function chunkType(b: Uint8Array, p: number): string | undefined {
  let s = '';
  for (let i = 0; i < 4; i++) {
    const c = b[p + i];
    if (!((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a))) return undefined;
    s += String.fromCharCode(c);
  }
  return s;
}

function readHeader(bytes: Uint8Array, name: string): Header {
  if (bytes.length < 33) throw imageError(name, 'truncated PNG data (no complete IHDR chunk)');
  if (u32(bytes, 8) !== 13 || chunkType(bytes, 12) !== 'IHDR') throw imageError(name, 'malformed PNG: the first chunk is not a 13-byte IHDR');
  if (crc32(bytes.subarray(12, 29)) !== u32(bytes, 29)) throw imageError(name, 'corrupt PNG: the IHDR chunk fails its CRC check');
  const width = u32(bytes, 16);
  const height = u32(bytes, 20);
  const depth = bytes[24];
  const colorType = bytes[25];
  if (width > 0x7fffffff || height > 0x7fffffff) throw imageError(name, `malformed PNG: ${width} x ${height} pixels is past PNG's limit of 2^31 - 1`);
  const kind = COLOR_TYPES[colorType];
  if (!kind) throw imageError(name, `malformed PNG: unknown color type ${colorType}`);
  if (!kind.depths.includes(depth)) throw imageError(name, `malformed PNG: bit depth ${depth} is not allowed with color type ${colorType}`);
  if (bytes[26] !== 0 || bytes[27] !== 0) throw imageError(name, 'malformed PNG: unknown compression or filter method');
  if (bytes[28] > 1) throw imageError(name, `malformed PNG: unknown interlace method ${bytes[28]}`);
  return { width, height, depth, colorType, interlaced: bytes[28] === 1 };
}

export function pngSize(bytes: Uint8Array, name: string): { width: number; height: number } {
  const { width, height } = readHeader(bytes, name);
  checkDimensions(name, width, height, Infinity);
  return { width, height };
}

/** The bytes the image data must inflate to: each row (of each Adam7 pass) with its filter byte. */
function inflatedSize(h: Header): number {
  const bits = h.depth * COLOR_TYPES[h.colorType].channels;
  const rows = (w: number, n: number): number => (w > 0 && n > 0 ? n * (1 + Math.ceil((w * bits) / 8)) : 0);
  if (!h.interlaced) return rows(h.width, h.height);
  // Adam7's passes: first column and row, column and row step
  const passes = [
    [0, 0, 8, 8],
    [4, 0, 8, 8],
    [0, 4, 4, 8],
    [2, 0, 4, 4],
    [0, 2, 2, 4],
    [1, 0, 2, 2],
    [0, 1, 1, 2],
  ];
  let n = 0;
  for (const [x0, y0, dx, dy] of passes) n += rows(Math.ceil((h.width - x0) / dx), Math.ceil((h.height - y0) / dy));
  return n;
}

/** The concatenated IDAT data, once the chunk structure has been checked end to end. */
function imageData(bytes: Uint8Array, name: string, h: Header): { data: Uint8Array; transparency: boolean } {
  const parts: Uint8Array[] = [];
  let total = 0;
  let palette = false;
  let transparency = false;
  let idatEnded = false;
  let p = 33;
  for (;;) {
    if (p + 8 > bytes.length) throw imageError(name, 'truncated PNG data (no IEND chunk)');
    const length = u32(bytes, p);
    const type = chunkType(bytes, p + 4);
    if (type === undefined) throw imageError(name, `malformed PNG: a chunk at byte ${p} has no valid type`);
    if (length > 0x7fffffff) throw imageError(name, `malformed PNG: the ${type} chunk claims ${length} bytes`);
    const end = p + 12 + length;
    if (end > bytes.length) throw imageError(name, `truncated PNG data (the ${type} chunk runs past the end)`);
    // pngjs checks them too, but says only "Crc error" and two numbers
    if (crc32(bytes.subarray(p + 4, p + 8 + length)) !== u32(bytes, p + 8 + length)) throw imageError(name, `corrupt PNG: the ${type} chunk fails its CRC check`);
    if (type === 'IEND') break;
    if (type === 'IDAT') {
      if (idatEnded) throw imageError(name, 'malformed PNG: the IDAT chunks are not consecutive');
      parts.push(bytes.subarray(p + 8, p + 8 + length));
      total += length;
    } else if (parts.length > 0) idatEnded = true;
    if (type === 'IHDR') throw imageError(name, 'malformed PNG: a second IHDR chunk');
    if (type === 'PLTE') {
      if (length === 0 || length % 3 !== 0 || length > 768) throw imageError(name, `malformed PNG: a PLTE chunk of ${length} bytes`);
      palette = true;
    }
    if (type === 'tRNS') transparency = true;
    // bit 5 of the first letter clear (upper case): critical
    if (!CRITICAL.has(type) && (bytes[p + 4] & 0x20) === 0) throw imageError(name, `unsupported PNG: unknown critical chunk ${type}`);
    p = end;
  }
  if (parts.length === 0) throw imageError(name, 'malformed PNG: no IDAT chunk');
  if (h.colorType === 3 && !palette) throw imageError(name, 'malformed PNG: a palette image without a PLTE chunk');
  const data = parts.length === 1 ? parts[0] : new Uint8Array(total);
  if (parts.length > 1) {
    let o = 0;
    for (const part of parts) {
      data.set(part, o);
      o += part.length;
    }
  }
  return { data, transparency };
}

/** Refuse image data that does not inflate to exactly `expected` bytes, holding at most that many. */
function checkInflate(data: Uint8Array, expected: number, name: string): void {
  let got: number;
  try {
    got = zlib.inflateSync(data, { maxOutputLength: expected }).length;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ERR_BUFFER_TOO_LARGE') throw imageError(name, `malformed PNG: the image data inflates to more than the ${expected} bytes its size allows`);
    if (code === 'Z_BUF_ERROR') throw imageError(name, 'truncated PNG data (the compressed image data ends early)');
    throw imageError(name, `corrupt PNG image data (${cause(e)})`);
  }
  if (got !== expected) throw imageError(name, `truncated PNG data (the image data inflates to ${got} of the ${expected} bytes its size needs)`);
}

export function decodePng(bytes: Uint8Array, name: string, maxPixels: number): DecodedImage {
  const header = readHeader(bytes, name);
  const { width, height } = header;
  checkDimensions(name, width, height, maxPixels);
  const { data, transparency } = imageData(bytes, name, header);
  checkInflate(data, inflatedSize(header), name);
  let rgba: Uint8Array;
  try {
    // pngjs rounds 16-bit samples to the nearest 8-bit value; the engines this one is checked against keep the high byte
    const deep = header.depth === 16;
    const data = pngjs.PNG.sync.read(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), { skipRescale: deep }).data as unknown as ArrayLike<number>;
    if (deep) {
      rgba = new Uint8Array(data.length);
      for (let i = 0; i < data.length; i++) rgba[i] = data[i] >> 8;
    } else rgba = data as Uint8Array;
  } catch (e) {
    throw imageError(name, `malformed PNG (${cause(e)})`);
  }
  const n = width * height;
  if (rgba.length !== n * 4) throw imageError(name, `malformed PNG: decoded ${rgba.length} bytes for ${width} x ${height} pixels`);
  const rgb = new Uint8Array(n * 3);
  for (let i = 0, j = 0; i < n * 4; i += 4, j += 3) {
    rgb[j] = rgba[i];
    rgb[j + 1] = rgba[i + 1];
    rgb[j + 2] = rgba[i + 2];
  }
  const image: DecodedImage = { width, height, rgb, format: 'png' };
  if (header.colorType === 4 || header.colorType === 6 || transparency) {
    const alpha = new Uint8Array(n);
    for (let i = 0; i < n; i++) alpha[i] = rgba[i * 4 + 3];
    image.alpha = alpha;
  }
  return image;
}
