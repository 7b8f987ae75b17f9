import type { Orientation } from './exif.js';

/**
 * Where stored pixel (row r, column c) of a W x H image lands in the upright one, as
 * o0 + r·dr + c·dc pixels into it (the upright image is H x W from 5 on). Each orientation names
 * the side the stored row 0 and column 0 are to be shown at (Exif 2.32, tag 0x0112), e.g. 6:
 * row 0 on the right, column 0 at the top — a quarter turn clockwise.
 */
function layout(o: Orientation, W: number, H: number): { o0: number; dr: number; dc: number } {
  switch (o) {
    case 1:
      return { o0: 0, dr: W, dc: 1 };
    case 2:
      return { o0: W - 1, dr: W, dc: -1 };
    case 3:
      return { o0: (H - 1) * W + W - 1, dr: -W, dc: -1 };
    case 4:
      return { o0: (H - 1) * W, dr: -W, dc: 1 };
    case 5:
      return { o0: 0, dr: 1, dc: H };
    case 6:
      return { o0: H - 1, dr: -1, dc: H };
    case 7:
      return { o0: (W - 1) * H + H - 1, dr: -1, dc: -H };
    case 8:
      return { o0: (W - 1) * H, dr: 1, dc: -H };
  }
}

/** The upright size of a stored W x H image. */
export function orientedSize(o: Orientation, width: number, height: number): { width: number; height: number } {
  return o >= 5 ? { width: height, height: width } : { width, height };
}

/** `pixels` ([height][width][channels]) turned upright. */
export function orient(pixels: Uint8Array, width: number, height: number, channels: number, o: Orientation): Uint8Array {
  if (o === 1) return pixels;
  const { o0, dr, dc } = layout(o, width, height);
  const out = new Uint8Array(pixels.length);
  let i = 0;
  for (let r = 0; r < height; r++) {
    let d = (o0 + r * dr) * channels;
    const step = dc * channels;
    for (let c = 0; c < width; c++, d += step) for (let k = 0; k < channels; k++) out[d + k] = pixels[i++];
  }
  return out;
}
