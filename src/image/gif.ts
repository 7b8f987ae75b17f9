import { lzwDecode } from './lzw.js';
import { checkDimensions, imageError } from './refuse.js';
import type { DecodedImage } from './types.js';

/**
 * A GIF's first frame, decoded here. omggif was the library to use, but a crafted 64 x 64 GIF
 * sends its LZW decoder into an endless loop (a code used before it is defined lets the
 * table's chains form a cycle), it parses every frame before the first is decoded (memory
 * grows with the frame count, not the image), and it reports short data on stdout, not to the
 * caller. gifuct-js also fills short data with color 0 without a word.
 *
 * The canvas is the logical screen, grown to hold the first frame as browsers do; what the
 * frame leaves uncovered, and its transparent index, are alpha 0. The background color is
 * not painted (browsers do not either).
 */

interface FirstFrame {
  canvasWidth: number;
  canvasHeight: number;
  x: number;
  y: number;
  width: number;
  height: number;
  interlaced: boolean;
  palette: Uint8Array;
  transparent: number | undefined;
  minCodeSize: number;
  /** the first data sub-block */
  data: number;
}

const u16 = (b: Uint8Array, p: number): number => b[p] | (b[p + 1] << 8);

/** Past a run of sub-blocks, to the byte after its empty terminator. */
function skipSubBlocks(b: Uint8Array, p: number, name: string): number {
  for (;;) {
    if (p >= b.length) throw imageError(name, 'truncated GIF data (inside a block)');
    const size = b[p++];
    if (size === 0) return p;
    p += size;
  }
}

function colorTable(b: Uint8Array, p: number, packed: number, name: string): Uint8Array {
  const n = 2 << (packed & 7);
  if (p + 3 * n > b.length) throw imageError(name, 'truncated GIF data (in a color table)');
  return b.subarray(p, p + 3 * n);
}

function readFirstFrame(b: Uint8Array, name: string): FirstFrame {
  if (b.length < 13) throw imageError(name, 'truncated GIF data (in the header)');
  const screenWidth = u16(b, 6);
  const screenHeight = u16(b, 8);
  let p = 13;
  let global: Uint8Array | undefined;
  if (b[10] & 0x80) {
    global = colorTable(b, p, b[10], name);
    p += global.length;
  }
  let transparent: number | undefined;
  for (;;) {
    if (p >= b.length) throw imageError(name, 'truncated GIF data (no image)');
    const block = b[p++];
    if (block === 0x3b) throw imageError(name, 'malformed GIF: no image before the trailer');
    if (block === 0x21) {
      if (p >= b.length) throw imageError(name, 'truncated GIF data (in an extension)');
      const label = b[p++];
      // the graphic control extension before an image says which index is transparent in it
      if (label === 0xf9 && p + 5 <= b.length && b[p] === 4) transparent = b[p + 1] & 1 ? b[p + 4] : undefined;
      p = skipSubBlocks(b, p, name);
      continue;
    }
    if (block !== 0x2c) throw imageError(name, `malformed GIF: unknown block 0x${block.toString(16)} at byte ${p - 1}`);
    if (p + 9 > b.length) throw imageError(name, 'truncated GIF data (in an image descriptor)');
    const x = u16(b, p);
    const y = u16(b, p + 2);
    const width = u16(b, p + 4);
    const height = u16(b, p + 6);
    const packed = b[p + 8];
    p += 9;
    let palette = global;
    if (packed & 0x80) {
      palette = colorTable(b, p, packed, name);
      p += palette.length;
    }
    if (!palette) throw imageError(name, 'malformed GIF: the first image has no color table');
    if (p >= b.length) throw imageError(name, 'truncated GIF data (no image data)');
    const minCodeSize = b[p++];
    if (minCodeSize < 1 || minCodeSize > 8) throw imageError(name, `malformed GIF: LZW minimum code size ${minCodeSize}`);
    // the whole frame must be there before a pixel of it is decoded
    skipSubBlocks(b, p, name);
    const canvasWidth = Math.max(screenWidth, x + width);
    const canvasHeight = Math.max(screenHeight, y + height);
    return { canvasWidth, canvasHeight, x, y, width, height, interlaced: (packed & 0x40) !== 0, palette, transparent, minCodeSize, data: p };
  }
}

export function gifSize(bytes: Uint8Array, name: string): { width: number; height: number } {
  const f = readFirstFrame(bytes, name);
  checkDimensions(name, f.width, f.height, Infinity);
  return { width: f.canvasWidth, height: f.canvasHeight };
}

/** Which canvas row each decoded row is: an interlaced frame sends every 8th row from 0, from 4, every 4th from 2, every 2nd from 1. */
function rowOrder(height: number, interlaced: boolean): Int32Array {
  const rows = new Int32Array(height);
  if (!interlaced) for (let i = 0; i < height; i++) rows[i] = i;
  else {
    let i = 0;
    for (const [start, step] of [
      [0, 8],
      [4, 8],
      [2, 4],
      [1, 2],
    ])
      for (let r = start; r < height; r += step) rows[i++] = r;
  }
  return rows;
}

export function decodeGif(b: Uint8Array, name: string, maxPixels: number): DecodedImage {
  const f = readFirstFrame(b, name);
  checkDimensions(name, f.width, f.height, maxPixels);
  const { canvasWidth: cw, canvasHeight: ch } = f;
  checkDimensions(name, cw, ch, maxPixels);
  const indices = new Uint8Array(f.width * f.height);
  const got = lzwDecode(b, f.data, f.minCodeSize, indices, name);
  if (got < indices.length) throw imageError(name, `truncated GIF image data (${got} of ${indices.length} pixels)`);
  const colors = f.palette.length / 3;
  const covers = f.x === 0 && f.y === 0 && f.width === cw && f.height === ch;
  const rgb = new Uint8Array(cw * ch * 3);
  const alpha = f.transparent !== undefined || !covers ? new Uint8Array(cw * ch) : undefined;
  const rows = rowOrder(f.height, f.interlaced);
  for (let i = 0; i < f.height; i++) {
    let o = (f.y + rows[i]) * cw + f.x;
    for (let x = 0, s = i * f.width; x < f.width; x++, s++, o++) {
      const k = indices[s];
      if (k === f.transparent) continue;
      if (k >= colors) throw imageError(name, `malformed GIF: pixel index ${k} is past the color table of ${colors} colors`);
      rgb[3 * o] = f.palette[3 * k];
      rgb[3 * o + 1] = f.palette[3 * k + 1];
      rgb[3 * o + 2] = f.palette[3 * k + 2];
      if (alpha) alpha[o] = 255;
    }
  }
  return alpha ? { width: cw, height: ch, rgb, alpha, format: 'gif' } : { width: cw, height: ch, rgb, format: 'gif' };
}
