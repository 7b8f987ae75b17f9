import { imageError, FORMAT_NAMES } from './refuse.js';
import type { ImageFormat } from './types.js';

/** null: a byte that may be anything (a RIFF file's length). */
const MAGIC: [ImageFormat, (number | null)[]][] = [
  ['png', [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]],
  ['jpeg', [0xff, 0xd8, 0xff]],
  ['gif', [0x47, 0x49, 0x46, 0x38, 0x37, 0x61]], // GIF87a
  ['gif', [0x47, 0x49, 0x46, 0x38, 0x39, 0x61]], // GIF89a
  ['bmp', [0x42, 0x4d]],
  ['webp', [0x52, 0x49, 0x46, 0x46, null, null, null, null, 0x57, 0x45, 0x42, 0x50]],
];

function matches(bytes: Uint8Array, magic: (number | null)[], n: number): boolean {
  for (let i = 0; i < n; i++) if (magic[i] !== null && bytes[i] !== magic[i]) return false;
  return true;
}

/**
 * What the bytes are, from their magic numbers alone: a file's name says what someone called
 * it, not what it holds. A file that stops inside a signature is a truncated file of that
 * format, not "not an image".
 */
export function sniffFormat(bytes: Uint8Array, name: string): ImageFormat {
  if (bytes.length === 0) throw imageError(name, 'empty, not an image');
  for (const [format, magic] of MAGIC) if (bytes.length >= magic.length && matches(bytes, magic, magic.length)) return format;
  for (const [format, magic] of MAGIC)
    if (bytes.length < magic.length && bytes.length >= 2 && matches(bytes, magic, bytes.length)) throw imageError(name, `truncated ${FORMAT_NAMES[format]} data (${bytes.length} bytes)`);
  throw imageError(name, 'not a PNG, JPEG, BMP, GIF or WebP image');
}
