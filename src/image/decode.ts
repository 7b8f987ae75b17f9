import { WasteError } from '../util/errors.js';
import { readBytes } from '../util/read.js';
import { bmpSize, decodeBmp } from './bmp.js';
import { decodeGif, gifSize } from './gif.js';
import { decodeJpeg, jpegSize } from './jpeg.js';
import { decodePng, pngSize } from './png.js';
import { DEFAULT_MAX_PIXELS, FORMAT_NAMES, cause, imageError } from './refuse.js';
import { sniffFormat } from './sniff.js';
import type { DecodedImage, DecodeOptions, ImageFormat, ImageSize } from './types.js';
import { webpSize } from './webp.js';

export type { DecodedImage, DecodeOptions, ImageFormat, ImageSize } from './types.js';
export { DEFAULT_MAX_PIXELS } from './refuse.js';

/** A photo is a few MiB; this leaves room for a large PNG and still bounds what is read. */
export const DEFAULT_MAX_IMAGE_BYTES = 64 << 20;

const SIZE: Record<ImageFormat, (bytes: Uint8Array, name: string) => { width: number; height: number }> = {
  png: pngSize,
  jpeg: jpegSize,
  bmp: bmpSize,
  gif: gifSize,
  webp: webpSize,
};

/**
 * The pixels, as 8-bit RGB with alpha apart (not composited: the caller decides what a
 * transparent pixel becomes). JPEG is turned upright by its Exif orientation.
 */
export function decodeImage(bytes: Uint8Array, opts: DecodeOptions = {}): DecodedImage {
  const name = opts.name ?? 'image';
  const maxPixels = opts.maxPixels ?? DEFAULT_MAX_PIXELS;
  if (!(maxPixels >= 1)) throw new WasteError('E_ARG', `maxPixels must be at least 1, got ${maxPixels}`);
  const format = sniffFormat(bytes, name);
  try {
    switch (format) {
      case 'png':
        return decodePng(bytes, name, maxPixels);
      case 'jpeg':
        return decodeJpeg(bytes, name, maxPixels);
      case 'bmp':
        return decodeBmp(bytes, name, maxPixels);
      case 'gif':
        return decodeGif(bytes, name, maxPixels);
      case 'webp':
        webpSize(bytes, name);
        // the decoders on npm are either unmaintained (@cwasm/webp: libwebp 1.1.0, last released
        // in 2020) or asynchronous only and set a global ImageData (@jsquash/webp)
        throw imageError(name, 'unsupported image format: WebP (convert it to PNG or JPEG)');
    }
  } catch (e) {
    if (e instanceof WasteError) throw e;
    // a fault in our own code or an allocation the limits did not foresee: still one line
    throw imageError(name, `cannot decode this ${FORMAT_NAMES[format]} (${cause(e)})`);
  }
}

/** The size decodeImage would return, from the header alone (for JPEG, after its orientation). */
export function imageSize(bytes: Uint8Array, opts: { name?: string } = {}): ImageSize {
  const name = opts.name ?? 'image';
  const format = sniffFormat(bytes, name);
  return { ...SIZE[format](bytes, name), format };
}

/**
 * An image file: a regular file (checked on the open descriptor, so a FIFO or /dev/zero is
 * refused before a read), at most `maxBytes` of it.
 */
export function readImageFile(path: string, opts: DecodeOptions & { maxBytes?: number } = {}): DecodedImage {
  return decodeImage(readImageBytes(path, opts.maxBytes), { ...opts, name: opts.name ?? path });
}

/** An image file's bytes, undecoded: a regular file, at most `maxBytes` of it. */
export function readImageBytes(path: string, maxBytes = DEFAULT_MAX_IMAGE_BYTES): Uint8Array {
  try {
    return readBytes(path, maxBytes);
  } catch (e) {
    // readBytes's one format fault is the size bound, which for an image is the image's
    if (e instanceof WasteError && e.code === 'E_FORMAT') throw new WasteError('E_IMAGE', e.message);
    throw e;
  }
}
