import { createHash } from 'node:crypto';
import { DEFAULT_MAX_IMAGE_BYTES, type DecodedImage, decodeImage, readImageBytes } from '../image/decode.js';
import { WasteError } from '../util/errors.js';

/**
 * The most pixels an image given to the library or the CLI may have (4096 × 4096; the server's
 * --max-image-pixels default too): its decoding takes a few bytes per pixel outside the budget, and
 * the default route never uses more than 1024 patches of it.
 */
export const DEFAULT_IMAGE_PIXELS = 16 << 20;

/** An image file or its bytes, read (a regular file, with a bound) and digested; decoded on demand. */
export function readImageSource(src: string | Uint8Array): { digest: string; decode(): DecodedImage } {
  const bytes = typeof src === 'string' ? readImageBytes(src) : src;
  if (bytes.length > DEFAULT_MAX_IMAGE_BYTES) throw new WasteError('E_IMAGE', `an image of ${bytes.length} bytes is more than the ${DEFAULT_MAX_IMAGE_BYTES} allowed`);
  const digest = createHash('sha256').update(bytes).digest('hex');
  const name = typeof src === 'string' ? src : 'image';
  return { digest, decode: () => decodeImage(bytes, { name, maxPixels: DEFAULT_IMAGE_PIXELS }) };
}
