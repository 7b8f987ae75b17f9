export type ImageFormat = 'png' | 'jpeg' | 'bmp' | 'gif' | 'webp';

export interface DecodedImage {
  width: number;
  height: number;
  /** [height][width][3], 8-bit RGB */
  rgb: Uint8Array;
  /** [height][width] 8-bit alpha, only when the source has an alpha channel or transparency */
  alpha?: Uint8Array;
  format: ImageFormat;
}

export interface DecodeOptions {
  /**
   * Refuse sources with more pixels than this, checked from the header BEFORE decoding
   * (decompression bombs). Default 64 * 1024 * 1024 (the C engine's limit).
   */
  maxPixels?: number;
  /** What to call the image in errors, e.g. the file name. */
  name?: string;
}

export interface ImageSize {
  width: number;
  height: number;
  format: ImageFormat;
}
