import { WasteError } from '../util/errors.js';

/** The C engine's limit. */
export const DEFAULT_MAX_PIXELS = 64 * 1024 * 1024;

export const FORMAT_NAMES = { png: 'PNG', jpeg: 'JPEG', bmp: 'BMP', gif: 'GIF', webp: 'WebP' } as const;

/** Every fault in an image's bytes: one line naming the image and what is wrong with it. */
export function imageError(name: string, message: string): WasteError {
  return new WasteError('E_IMAGE', `${name}: ${message}`);
}

/**
 * Called with the size a header states, before anything the size pays for is allocated, so
 * a small file that claims a huge image costs nothing.
 */
export function checkDimensions(name: string, width: number, height: number, maxPixels: number): void {
  if (width === 0 || height === 0) throw imageError(name, `${width} x ${height} pixels: an image needs at least one pixel`);
  if (width * height > maxPixels) throw imageError(name, `${width} x ${height} pixels exceeds the limit of ${maxPixels}`);
}

/**
 * A library's exception as the cause in our one line. Its text is whatever the library wrote
 * (a stack frame's worth at worst), so it is cut short.
 */
export function cause(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}
