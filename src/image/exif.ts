/**
 * The orientation tag (0x0112) of an Exif block, the payload of a JPEG's APP1 segment. Cameras
 * store the sensor's rows as read and say in this tag how to turn them; a model shown the
 * stored pixels of an upright portrait would see it on its side.
 *
 * Only IFD0 is read, every offset is checked against the block, and the block is at most a
 * segment's 65533 bytes, so a hostile block costs nothing. A malformed block states no
 * orientation (1): Exif written by phones and editors is often damaged, and the pixels are
 * still good, as every viewer that ignores the damage shows.
 */
export type Orientation = 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8;

const EXIF = [0x45, 0x78, 0x69, 0x66, 0, 0]; // "Exif\0\0"
const ORIENTATION = 0x0112;
const SHORT = 3;

export function isExif(payload: Uint8Array): boolean {
  return payload.length >= EXIF.length && EXIF.every((b, i) => payload[i] === b);
}

export function exifOrientation(payload: Uint8Array): Orientation {
  if (!isExif(payload)) return 1;
  const tiff = payload.subarray(EXIF.length);
  if (tiff.length < 8) return 1;
  const little = tiff[0] === 0x49 && tiff[1] === 0x49; // "II"
  if (!little && !(tiff[0] === 0x4d && tiff[1] === 0x4d)) return 1; // "MM"
  const u16 = (p: number): number => (little ? tiff[p] | (tiff[p + 1] << 8) : (tiff[p] << 8) | tiff[p + 1]);
  const u32 = (p: number): number => (little ? (tiff[p] | (tiff[p + 1] << 8) | (tiff[p + 2] << 16) | (tiff[p + 3] << 24)) >>> 0 : ((tiff[p] << 24) | (tiff[p + 1] << 16) | (tiff[p + 2] << 8) | tiff[p + 3]) >>> 0);
  if (u16(2) !== 42) return 1;
  const ifd = u32(4);
  if (ifd < 8 || ifd + 2 > tiff.length) return 1;
  const count = u16(ifd);
  for (let i = 0; i < count; i++) {
    const e = ifd + 2 + 12 * i;
    if (e + 12 > tiff.length) return 1;
    if (u16(e) !== ORIENTATION) continue;
    if (u16(e + 2) !== SHORT || u32(e + 4) !== 1) return 1;
    const v = u16(e + 8);
    return v >= 1 && v <= 8 ? (v as Orientation) : 1;
  }
  return 1;
}
