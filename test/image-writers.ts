/**
 * Images made in the tests, byte by byte where a library encoder cannot make the case (palette
 * and sub-byte PNGs, Adam7, every BMP layout, a GIF with its LZW codes chosen, a JPEG whose
 * decoded pixels are known exactly), so no binary fixture is committed.
 */
import * as zlib from 'node:zlib';
import { crc32 } from '../src/util/crc32.js';

export function concat(...parts: ArrayLike<number>[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

const be32 = (v: number): number[] => [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
const le16 = (v: number): number[] => [v & 255, (v >>> 8) & 255];
const le32 = (v: number): number[] => [v & 255, (v >>> 8) & 255, (v >>> 16) & 255, (v >>> 24) & 255];
const ascii = (s: string): number[] => [...s].map((c) => c.charCodeAt(0));

// ---------------------------------------------------------------- PNG

export const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const CHANNELS: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

export function pngChunk(type: string, data: ArrayLike<number> = []): Uint8Array {
  const body = concat(ascii(type), data);
  return concat(be32(data.length), body, be32(crc32(body)));
}

export function ihdr(width: number, height: number, depth: number, colorType: number, interlace = 0): Uint8Array {
  return pngChunk('IHDR', [...be32(width), ...be32(height), depth, colorType, 0, 0, interlace]);
}

export interface PngSpec {
  width: number;
  height: number;
  colorType: 0 | 2 | 3 | 4 | 6;
  depth: 1 | 2 | 4 | 8 | 16;
  /** width·height·channels samples at `depth` bits (palette indices for color type 3) */
  samples: ArrayLike<number>;
  palette?: number[][];
  trns?: number[];
  interlace?: boolean;
}

/** Rows of the given pixels (x, y) with filter byte 0. */
function rawRows(spec: PngSpec, xs: number[], ys: number[]): number[] {
  const ch = CHANNELS[spec.colorType];
  const out: number[] = [];
  for (const y of ys) {
    out.push(0);
    let acc = 0;
    let nbits = 0;
    for (const x of xs)
      for (let c = 0; c < ch; c++) {
        const v = spec.samples[(y * spec.width + x) * ch + c];
        if (spec.depth === 16) out.push(v >> 8, v & 255);
        else if (spec.depth === 8) out.push(v);
        else {
          acc = (acc << spec.depth) | v;
          nbits += spec.depth;
          if (nbits === 8) {
            out.push(acc);
            acc = 0;
            nbits = 0;
          }
        }
      }
    if (nbits > 0) out.push(acc << (8 - nbits));
  }
  return out;
}

const range = (from: number, to: number, step: number): number[] => {
  const r: number[] = [];
  for (let i = from; i < to; i += step) r.push(i);
  return r;
};

export function pngRaw(spec: PngSpec): number[] {
  if (!spec.interlace) return rawRows(spec, range(0, spec.width, 1), range(0, spec.height, 1));
  const passes = [
    [0, 0, 8, 8],
    [4, 0, 8, 8],
    [0, 4, 4, 8],
    [2, 0, 4, 4],
    [0, 2, 2, 4],
    [1, 0, 2, 2],
    [0, 1, 1, 2],
  ];
  const out: number[] = [];
  for (const [x0, y0, dx, dy] of passes) {
    const xs = range(x0, spec.width, dx);
    const ys = range(y0, spec.height, dy);
    if (xs.length && ys.length) out.push(...rawRows(spec, xs, ys));
  }
  return out;
}

export function writePng(spec: PngSpec, idat: Uint8Array = zlib.deflateSync(Uint8Array.from(pngRaw(spec)))): Uint8Array {
  return concat(
    PNG_SIGNATURE,
    ihdr(spec.width, spec.height, spec.depth, spec.colorType, spec.interlace ? 1 : 0),
    spec.palette ? pngChunk('PLTE', spec.palette.flat()) : [],
    spec.trns ? pngChunk('tRNS', spec.trns) : [],
    pngChunk('IDAT', idat),
    pngChunk('IEND'),
  );
}

// ---------------------------------------------------------------- BMP

export interface BmpSpec {
  width: number;
  height: number;
  bpp: 1 | 4 | 8 | 16 | 24 | 32;
  /** bpp ≤ 8: indices; 24: r, g, b per pixel; 16 and 32: the raw pixel value */
  pixels: ArrayLike<number>;
  palette?: number[][];
  topDown?: boolean;
  compression?: number;
  masks?: number[];
  infoSize?: 40 | 108 | 124;
}

export function writeBmp(spec: BmpSpec): Uint8Array {
  const infoSize = spec.infoSize ?? 40;
  const compression = spec.compression ?? 0;
  const masksAfter = infoSize === 40 && spec.masks ? spec.masks.flatMap(le32) : [];
  const palette = (spec.palette ?? []).flatMap(([r, g, b]) => [b, g, r, 0]);
  const stride = Math.ceil((spec.width * spec.bpp) / 32) * 4;
  const rows: number[][] = [];
  for (let y = 0; y < spec.height; y++) {
    const row = new Array<number>(stride).fill(0);
    for (let x = 0; x < spec.width; x++) {
      const i = y * spec.width + x;
      if (spec.bpp <= 8) {
        const bit = x * spec.bpp;
        row[bit >> 3] |= spec.pixels[i] << (8 - spec.bpp - (bit & 7));
      } else if (spec.bpp === 24) {
        row[3 * x] = spec.pixels[3 * i + 2];
        row[3 * x + 1] = spec.pixels[3 * i + 1];
        row[3 * x + 2] = spec.pixels[3 * i];
      } else {
        const bytes = spec.bpp === 16 ? le16(spec.pixels[i]) : le32(spec.pixels[i]);
        row.splice(x * bytes.length, bytes.length, ...bytes);
      }
    }
    rows.push(row);
  }
  if (!spec.topDown) rows.reverse();
  const info = new Array<number>(infoSize).fill(0);
  const put = (at: number, bytes: number[]): void => void info.splice(at, bytes.length, ...bytes);
  put(0, le32(infoSize));
  put(4, le32(spec.width));
  put(8, le32(spec.topDown ? -spec.height : spec.height));
  put(12, le16(1));
  put(14, le16(spec.bpp));
  put(16, le32(compression));
  put(20, le32(stride * spec.height));
  put(24, le32(2835));
  put(28, le32(2835));
  put(32, le32(spec.palette?.length ?? 0));
  if (infoSize > 40 && spec.masks) put(40, spec.masks.flatMap(le32));
  const dataOffset = 14 + infoSize + masksAfter.length + palette.length;
  const size = dataOffset + stride * spec.height;
  return concat(ascii('BM'), le32(size), [0, 0, 0, 0], le32(dataOffset), info, masksAfter, palette, rows.flat());
}

// ---------------------------------------------------------------- GIF

/** LZW codes as a decoder reads them: the code width grows as the decoder's table does. */
export function packCodes(codes: number[], minCodeSize: number): number[] {
  const clear = 1 << minCodeSize;
  let size = minCodeSize + 1;
  let next = clear + 2;
  let first = true;
  const out: number[] = [];
  let acc = 0;
  let nbits = 0;
  for (const code of codes) {
    acc |= code << nbits;
    nbits += size;
    while (nbits >= 8) {
      out.push(acc & 255);
      acc >>>= 8;
      nbits -= 8;
    }
    if (code === clear) {
      size = minCodeSize + 1;
      next = clear + 2;
      first = true;
    } else if (code !== clear + 1) {
      if (!first && next < 4096) {
        next++;
        if (next === 1 << size && size < 12) size++;
      }
      first = false;
    }
  }
  if (nbits > 0) out.push(acc & 255);
  return out;
}

/** Every index as its own code, a clear code before the table would widen them. */
export function literalCodes(indices: ArrayLike<number>, minCodeSize: number): number[] {
  const clear = 1 << minCodeSize;
  const codes = [clear];
  let run = 0;
  for (let i = 0; i < indices.length; i++) {
    if (run === clear - 2) {
      codes.push(clear);
      run = 0;
    }
    codes.push(indices[i]);
    run++;
  }
  codes.push(clear + 1);
  return codes;
}

export function subBlocks(data: ArrayLike<number>): number[] {
  const out: number[] = [];
  for (let i = 0; i < data.length; i += 255) {
    const n = Math.min(255, data.length - i);
    out.push(n);
    for (let k = 0; k < n; k++) out.push(data[i + k]);
  }
  out.push(0);
  return out;
}

export interface GifSpec {
  screen: [number, number];
  frame: [number, number, number, number];
  /** r, g, b; its length a power of two from 2 to 256 */
  palette: number[][];
  /** image data as sub-blocks: the minimum code size and the packed codes */
  minCodeSize: number;
  data: number[];
  interlaced?: boolean;
  transparent?: number;
  local?: boolean;
}

export function writeGif(spec: GifSpec): Uint8Array {
  const bits = Math.log2(spec.palette.length) - 1;
  const table = spec.palette.flat();
  const gce = spec.transparent === undefined ? [] : [0x21, 0xf9, 4, 1, 0, 0, spec.transparent, 0];
  const [x, y, w, h] = spec.frame;
  const flags = (spec.local ? 0x80 | bits : 0) | (spec.interlaced ? 0x40 : 0);
  return concat(
    ascii('GIF89a'),
    le16(spec.screen[0]),
    le16(spec.screen[1]),
    [spec.local ? 0 : 0x80 | bits, 0, 0],
    spec.local ? [] : table,
    gce,
    [0x2c, ...le16(x), ...le16(y), ...le16(w), ...le16(h), flags],
    spec.local ? table : [],
    [spec.minCodeSize],
    subBlocks(spec.data),
    [0x3b],
  );
}

// ---------------------------------------------------------------- JPEG

export function segment(marker: number, data: ArrayLike<number>): Uint8Array {
  return concat([0xff, marker, (data.length + 2) >> 8, (data.length + 2) & 255], data);
}

export interface FlatJpegSpec {
  blocksWide: number;
  blocksHigh: number;
  /** per component, per block in row order: the block's sample value */
  values: number[][];
  ids?: number[];
  /** segments right after SOI (APP1 Exif, APP14 Adobe, ...) */
  head?: Uint8Array[];
  restartInterval?: number;
}

/** The standard luminance DC table (JPEG Annex K.3): categories 0..11. */
const DC_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0];
const DC_VALUES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];

function huffmanCodes(bits: number[], values: number[]): Map<number, [number, number]> {
  const codes = new Map<number, [number, number]>();
  let code = 0;
  let k = 0;
  for (let len = 1; len <= 16; len++) {
    for (let i = 0; i < bits[len - 1]; i++) codes.set(values[k++], [code++, len]);
    code <<= 1;
  }
  return codes;
}

/**
 * A baseline JPEG of flat 8 x 8 blocks: only DC coefficients, a quantizer of 1, so each block
 * decodes to its value exactly (the inverse DCT of a lone DC term is a constant).
 */
export function writeFlatJpeg(spec: FlatJpegSpec): Uint8Array {
  const n = spec.values.length;
  const ids = spec.ids ?? [1, 2, 3].slice(0, n);
  const dc = huffmanCodes(DC_BITS, DC_VALUES);
  const out: number[] = [];
  let acc = 0;
  let nbits = 0;
  const put = (code: number, len: number): void => {
    for (let i = len - 1; i >= 0; i--) {
      acc = (acc << 1) | ((code >> i) & 1);
      if (++nbits === 8) {
        out.push(acc);
        if (acc === 0xff) out.push(0);
        acc = 0;
        nbits = 0;
      }
    }
  };
  const align = (): void => {
    while (nbits !== 0) put(1, 1);
  };
  const blocks = spec.blocksWide * spec.blocksHigh;
  const pred = new Array<number>(n).fill(0);
  for (let b = 0, rst = 0; b < blocks; b++) {
    if (spec.restartInterval && b > 0 && b % spec.restartInterval === 0) {
      align();
      out.push(0xff, 0xd0 + (rst++ % 8));
      pred.fill(0);
    }
    for (let c = 0; c < n; c++) {
      const coef = 8 * (spec.values[c][b] - 128);
      const diff = coef - pred[c];
      pred[c] = coef;
      const s = diff === 0 ? 0 : Math.floor(Math.log2(Math.abs(diff))) + 1;
      const [code, len] = dc.get(s) as [number, number];
      put(code, len);
      if (s > 0) put(diff >= 0 ? diff : diff + (1 << s) - 1, s);
      put(0, 1); // EOB, the one AC code
    }
  }
  align();
  const width = 8 * spec.blocksWide;
  const height = 8 * spec.blocksHigh;
  return concat(
    [0xff, 0xd8],
    ...(spec.head ?? []),
    segment(0xdb, [0, ...new Array<number>(64).fill(1)]),
    segment(0xc0, [8, height >> 8, height & 255, width >> 8, width & 255, n, ...ids.flatMap((id) => [id, 0x11, 0])]),
    segment(0xc4, [0x00, ...DC_BITS, ...DC_VALUES]),
    segment(0xc4, [0x10, 1, ...new Array<number>(15).fill(0), 0x00]),
    spec.restartInterval ? segment(0xdd, [spec.restartInterval >> 8, spec.restartInterval & 255]) : [],
    segment(0xda, [n, ...ids.flatMap((id) => [id, 0x00]), 0, 63, 0]),
    out,
    [0xff, 0xd9],
  );
}

/** An APP1 Exif segment whose IFD0 holds a Make tag and then the orientation. */
export function exifSegment(orientation: number, order: 'II' | 'MM', type = 3): Uint8Array {
  const u16 = (v: number): number[] => (order === 'II' ? le16(v) : [(v >> 8) & 255, v & 255]);
  const u32 = (v: number): number[] => (order === 'II' ? le32(v) : be32(v));
  const make = ascii('Canon\0');
  const ifd = 8;
  const dataAt = ifd + 2 + 2 * 12 + 4;
  const tiff = [
    ...ascii(order),
    ...u16(42),
    ...u32(ifd),
    ...u16(2),
    ...u16(0x010f),
    ...u16(2),
    ...u32(make.length),
    ...u32(dataAt),
    ...u16(0x0112),
    ...u16(type),
    ...u32(1),
    ...u16(orientation),
    0,
    0,
    ...u32(0),
    ...make,
  ];
  return segment(0xe1, [...ascii('Exif\0\0'), ...tiff]);
}

/** `seg` spliced in right after the SOI marker. */
export function afterSoi(jpeg: Uint8Array, seg: Uint8Array): Uint8Array {
  return concat(jpeg.subarray(0, 2), seg, jpeg.subarray(2));
}

// ---------------------------------------------------------------- WebP

export function webpHeader(kind: 'VP8 ' | 'VP8L' | 'VP8X', width: number, height: number): Uint8Array {
  const body = new Array<number>(18).fill(0);
  if (kind === 'VP8 ') body.splice(3, 7, 0x9d, 0x01, 0x2a, ...le16(width), ...le16(height));
  if (kind === 'VP8L') body.splice(0, 5, 0x2f, ...le32((width - 1) | ((height - 1) << 14)));
  if (kind === 'VP8X') body.splice(4, 6, ...le32(width - 1).slice(0, 3), ...le32(height - 1).slice(0, 3));
  return concat(ascii('RIFF'), le32(4 + 8 + body.length), ascii('WEBP'), ascii(kind), le32(body.length), body);
}
