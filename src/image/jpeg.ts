import jpegJs from 'jpeg-js';
import { exifOrientation, isExif, type Orientation } from './exif.js';
import { orient, orientedSize } from './orient.js';
import { checkDimensions, cause, imageError } from './refuse.js';
import type { DecodedImage } from './types.js';

/**
 * JPEG through jpeg-js (baseline and progressive, 8-bit, gray or three components), after the
 * marker structure has been walked here. The walk is what makes a truncated file an error:
 * past the end of its data jpeg-js reads zero bits, so a file cut inside a scan would decode
 * with its missing rows gray. It also refuses, with the reason, what jpeg-js would decode
 * wrongly or not at all, and finds the Exif orientation the decoded pixels are turned by.
 */

/** Progressive files have about ten scans. Each scan walks every block of the image however few bytes it has, so a file of many tiny scans would take minutes. */
const MAX_SCANS = 100;

/** What jpeg-js holds per pixel at most (coefficient blocks, sample lines, output), plus room for the padding to whole blocks of a small image. */
const BYTES_PER_PIXEL = 24;
const SLACK_MB = 4;

interface Frame {
  width: number;
  height: number;
  ids: number[];
  /** blocks of 8 x 8 samples in one MCU, across and down, at most */
  hMax: number;
  vMax: number;
}

interface Walk {
  frame: Frame;
  orientation: Orientation;
  /** the components are R, G, B rather than Y, Cb, Cr */
  rgb: boolean;
  /** in all scans (a whole walk) */
  entropyBytes: number;
}

const u16 = (b: Uint8Array, p: number): number => (b[p] << 8) | b[p + 1];
const hex = (m: number): string => `FF${m.toString(16).toUpperCase().padStart(2, '0')}`;

function unsupportedFrame(m: number): string | undefined {
  if (m === 0xc3) return 'lossless JPEG';
  if (m === 0xc5 || m === 0xc6 || m === 0xc7 || m === 0xde || m === 0xdf) return 'hierarchical JPEG';
  if (m >= 0xc9 && m <= 0xcf) return 'arithmetic-coded JPEG';
  if (m === 0xdc) return 'a height set after the first scan (DNL)';
  return undefined;
}

function readFrame(seg: Uint8Array, name: string): Frame {
  if (seg.length < 6) throw imageError(name, 'malformed JPEG: a frame header of less than 6 bytes');
  const precision = seg[0];
  const height = u16(seg, 1);
  const width = u16(seg, 3);
  const n = seg[5];
  if (seg.length !== 6 + 3 * n) throw imageError(name, `malformed JPEG: a frame header of ${seg.length} bytes for ${n} components`);
  if (precision !== 8) throw imageError(name, `unsupported JPEG: ${precision}-bit samples (only 8-bit is decoded)`);
  // jpeg-js turns CMYK and YCCK into RGB by a formula that ignores Adobe's inverted-ink convention and any ICC profile; wrong colors are worse than a clear refusal
  if (n === 4) throw imageError(name, 'unsupported JPEG: CMYK or YCCK color (convert it to RGB)');
  if (n !== 1 && n !== 3) throw imageError(name, `unsupported JPEG: ${n} color components`);
  const ids: number[] = [];
  let hMax = 1;
  let vMax = 1;
  for (let i = 0; i < n; i++) {
    const id = seg[6 + 3 * i];
    const h = seg[7 + 3 * i] >> 4;
    const v = seg[7 + 3 * i] & 15;
    if (h < 1 || h > 4 || v < 1 || v > 4) throw imageError(name, `malformed JPEG: sampling factors ${h} x ${v}`);
    if (ids.includes(id)) throw imageError(name, `malformed JPEG: component ${id} appears twice`);
    ids.push(id);
    hMax = Math.max(hMax, h);
    vMax = Math.max(vMax, v);
  }
  if (height === 0) throw imageError(name, `${width} x 0 pixels: an image needs at least one pixel`);
  return { width, height, ids, hMax, vMax };
}

function checkScan(seg: Uint8Array, frame: Frame, name: string): void {
  const n = seg[0];
  if (n < 1 || n > 4 || seg.length !== 4 + 2 * n) throw imageError(name, `malformed JPEG: a scan header of ${seg.length} bytes for ${n} components`);
  for (let i = 0; i < n; i++) if (!frame.ids.includes(seg[1 + 2 * i])) throw imageError(name, `malformed JPEG: a scan names component ${seg[1 + 2 * i]}, which the frame does not have`);
}

/** Past a scan's entropy-coded data: to the first marker that is not a stuffed byte or a restart. */
function skipScan(b: Uint8Array, p: number, name: string): number {
  for (;;) {
    const q = b.indexOf(0xff, p);
    if (q < 0 || q + 1 >= b.length) throw imageError(name, 'truncated JPEG data (the file ends inside a scan)');
    const next = b[q + 1];
    if (next === 0 || (next >= 0xd0 && next <= 0xd7)) p = q + 2;
    else if (next === 0xff) p = q + 1;
    else return q;
  }
}

/**
 * The frame, orientation and color model; `whole`: on to the end-of-image marker (a decode),
 * else only up to the first scan (a size).
 */
function walk(b: Uint8Array, name: string, whole: boolean): Walk {
  let frame: Frame | undefined;
  let orientation: Orientation = 1;
  let exifSeen = false;
  let adobeTransform: number | undefined;
  let jfif = false;
  let scans = 0;
  let entropyBytes = 0;
  let p = 2;
  for (;;) {
    if (p >= b.length) throw imageError(name, 'truncated JPEG data (no end-of-image marker)');
    if (b[p] !== 0xff) throw imageError(name, `malformed JPEG: no marker at byte ${p}`);
    while (p < b.length && b[p] === 0xff) p++; // fill bytes
    if (p >= b.length) throw imageError(name, 'truncated JPEG data (no end-of-image marker)');
    const m = b[p++];
    if (m === 0xd9) break;
    if (m === 0x01) continue; // TEM: a marker without a segment
    if (m === 0x00 || m === 0xd8 || (m >= 0xd0 && m <= 0xd7)) throw imageError(name, `malformed JPEG: marker ${hex(m)} at byte ${p - 2}`);
    if (p + 2 > b.length) throw imageError(name, 'truncated JPEG data (in a segment header)');
    const length = u16(b, p);
    if (length < 2) throw imageError(name, `malformed JPEG: a ${hex(m)} segment of length ${length}`);
    if (p + length > b.length) throw imageError(name, `truncated JPEG data (the ${hex(m)} segment runs past the end)`);
    const seg = b.subarray(p + 2, p + length);
    p += length;
    const refused = unsupportedFrame(m);
    if (refused) throw imageError(name, `unsupported JPEG: ${refused}`);
    if (m === 0xc0 || m === 0xc1 || m === 0xc2) {
      if (frame) throw imageError(name, 'malformed JPEG: more than one frame header');
      frame = readFrame(seg, name);
    } else if (m === 0xda) {
      if (!frame) throw imageError(name, 'malformed JPEG: a scan before the frame header');
      checkScan(seg, frame, name);
      if (!whole) break;
      if (++scans > MAX_SCANS) throw imageError(name, `unsupported JPEG: more than ${MAX_SCANS} scans`);
      const start = p;
      p = skipScan(b, p, name);
      entropyBytes += p - start;
    } else if (m === 0xe1 && !exifSeen && scans === 0 && isExif(seg)) {
      // the first Exif block before the first scan: what a size-only walk sees too
      exifSeen = true;
      orientation = exifOrientation(seg);
    } else if (m === 0xe0 && seg.length >= 5 && String.fromCharCode(...seg.subarray(0, 5)) === 'JFIF\0') jfif = true;
    else if (m === 0xee && seg.length >= 12 && String.fromCharCode(...seg.subarray(0, 6)) === 'Adobe\0') adobeTransform = seg[11];
    else if (!(m === 0xc4 || m === 0xdb || m === 0xdd || m === 0xfe || (m >= 0xe0 && m <= 0xef))) throw imageError(name, `malformed JPEG: unknown marker ${hex(m)}`);
  }
  if (!frame) throw imageError(name, 'malformed JPEG: no frame header');
  if (whole && scans === 0) throw imageError(name, 'malformed JPEG: no image data before the end-of-image marker');
  // libjpeg's rule: Adobe's transform flag decides; without it, components named R, G, B are RGB
  const named = frame.ids.length === 3 && frame.ids[0] === 0x52 && frame.ids[1] === 0x47 && frame.ids[2] === 0x42;
  const rgb = frame.ids.length === 3 && (adobeTransform !== undefined ? adobeTransform === 0 : !jfif && named);
  return { frame, orientation, rgb, entropyBytes };
}

export function jpegSize(bytes: Uint8Array, name: string): { width: number; height: number } {
  const { frame, orientation } = walk(bytes, name, false);
  checkDimensions(name, frame.width, frame.height, Infinity);
  return orientedSize(orientation, frame.width, frame.height);
}

export function decodeJpeg(bytes: Uint8Array, name: string, maxPixels: number): DecodedImage {
  const { frame, orientation, rgb, entropyBytes } = walk(bytes, name, true);
  const { width, height } = frame;
  checkDimensions(name, width, height, maxPixels);
  // every block's DC term takes at least one bit, baseline or progressive: a file far too short
  // for its size is refused before jpeg-js allocates for the size
  const mcus = Math.ceil(width / (8 * frame.hMax)) * Math.ceil(height / (8 * frame.vMax));
  if (entropyBytes * 8 < mcus * frame.ids.length) throw imageError(name, `truncated JPEG data (${entropyBytes} bytes of image data cannot hold ${width} x ${height} pixels)`);
  const maxMemoryUsageInMB = Math.ceil((maxPixels * BYTES_PER_PIXEL) / 2 ** 20) + SLACK_MB;
  let data: Uint8Array;
  try {
    ({ data } = jpegJs.decode(bytes, {
      useTArray: true,
      formatAsRGBA: false,
      tolerantDecoding: false,
      colorTransform: !rgb,
      // one pixel over, so rounding in the division cannot refuse an image at the limit (checked above, exactly)
      maxResolutionInMP: (maxPixels + 1) / 1e6,
      maxMemoryUsageInMB,
    }));
  } catch (e) {
    if (/maxMemoryUsageInMB/.test(cause(e))) throw imageError(name, `decoding would take more than ${maxMemoryUsageInMB} MB, the most allowed for ${maxPixels} pixels`);
    throw imageError(name, `malformed JPEG data (${cause(e)})`);
  }
  if (data.length !== width * height * 3) throw imageError(name, `malformed JPEG: decoded ${data.length} bytes for ${width} x ${height} pixels`);
  return { ...orientedSize(orientation, width, height), rgb: orient(data, width, height, 3, orientation), format: 'jpeg' };
}
