import { WasteError, excerpt } from '../util/errors.js';

/** Decoded pixels: 8-bit RGB [height][width][3], and alpha [height][width] when the source has any. */
export interface RgbImage {
  width: number;
  height: number;
  rgb: Uint8Array;
  alpha?: Uint8Array;
}

/** What the preprocessing needs of a model's vision config. */
export interface ImageSpec {
  patch: number;
  /** The engine's budget in patches (route `waste`). */
  maxPatches: number;
  mean: readonly [number, number, number];
  std: readonly [number, number, number];
  /** The release processor's caps (route `native`), and the most patches the tower takes. */
  inPatchLimit: number;
  sideLimit: number;
  towerLimit: number;
}

/**
 * How an image becomes patches. `waste`: the C engine's arithmetic, bit for bit (bilinear, at most
 * `max_patches` patches: 256 image rows for K3). `native`: the release processor's (no upscaling,
 * a bicubic resize, zero padding to whole 2 × 2 cells, its own larger patch cap): the resolution the
 * model was trained at, at up to four times the prompt cost.
 */
export type ImageRoute = 'waste' | 'native';

/** An image as the tower takes it. */
export interface Patches {
  /** [gh·gw][3][patch][patch], normalised, patches row-major over the grid. */
  pixels: Float32Array;
  gh: number;
  gw: number;
  /** Rows the image becomes in the prompt: (gh / 2)·(gw / 2). */
  rows: number;
}

const f = Math.fround;

/** The release's backdrop for transparent pixels: an 8-pixel chessboard, white (255) at the top left, gray (180) between. */
function backdrop(x: number, y: number): number {
  return ((x >> 3) + (y >> 3)) & 1 ? 180 : 255;
}

/** RGB over the chessboard backdrop by alpha, rounded to 8 bits (a copy; opaque images are returned as they are). */
export function composite(img: RgbImage): RgbImage {
  const { width, height, rgb, alpha } = img;
  if (!alpha) return img;
  const out = new Uint8Array(rgb.length);
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      const p = y * width + x;
      const a = alpha[p];
      const bg = backdrop(x, y);
      for (let c = 0; c < 3; c++) out[3 * p + c] = Math.round((rgb[3 * p + c] * a + bg * (255 - a)) / 255);
    }
  return { width, height, rgb: out };
}

/** The C engine's patch grid for a w × h image: the aspect kept, under the budget, even on both sides. */
export function wasteGrid(w: number, h: number, patch: number, maxPatches: number): { gw: number; gh: number } {
  const scale = Math.min(1, Math.sqrt(maxPatches / ((w * h) / (patch * patch))));
  let gw = Math.trunc((w * scale) / patch + 0.5);
  let gh = Math.trunc((h * scale) / patch + 0.5);
  gw = Math.max(2, gw) & ~1;
  gh = Math.max(2, gh) & ~1;
  while (gw * gh > maxPatches && (gw > 2 || gh > 2)) {
    if (gw >= gh && gw > 2) gw -= 2;
    else if (gh > 2) gh -= 2;
    else break;
  }
  return { gw, gh };
}

/**
 * The C engine's preprocessing, in its own f32 arithmetic step by step (every product and sum
 * rounded to f32 as C evaluates it without fused multiply-adds), so the patches are the same bits:
 * a bilinear resize with half-pixel centres and edge clamping, no antialiasing, then
 * (v / 255 − mean) / std, laid out [patch][channel][row][col].
 */
function wastePatches(img: RgbImage, spec: ImageSpec): Patches {
  const { width: sw, height: sh, rgb } = composite(img);
  const p = spec.patch;
  const { gw, gh } = wasteGrid(sw, sh, p, Math.min(spec.maxPatches, spec.towerLimit));
  const W = gw * p;
  const H = gh * p;
  const rx = f(sw / W);
  const ry = f(sh / H);
  const mean = spec.mean.map(f);
  const std = spec.std.map(f);
  // per output column and row: the two source indices and the weight (shared by every channel)
  const axis = (n: number, r: number, src: number) => {
    const i0 = new Int32Array(n);
    const i1 = new Int32Array(n);
    const wt = new Float32Array(n);
    for (let X = 0; X < n; X++) {
      const fx = f(f(f(X + 0.5) * r) - 0.5);
      const x0 = Math.floor(fx);
      wt[X] = f(fx - x0);
      i0[X] = Math.min(Math.max(x0, 0), src - 1);
      i1[X] = Math.min(Math.max(x0 + 1, 0), src - 1);
    }
    return { i0, i1, wt };
  };
  const ax = axis(W, rx, sw);
  const ay = axis(H, ry, sh);
  const pixels = new Float32Array(gw * gh * 3 * p * p);
  for (let Y = 0; Y < H; Y++) {
    const wy = ay.wt[Y];
    const omy = f(1 - wy);
    const r0 = ay.i0[Y] * sw;
    const r1 = ay.i1[Y] * sw;
    const py = Math.floor(Y / p);
    const j = Y - py * p;
    for (let X = 0; X < W; X++) {
      const wx = ax.wt[X];
      const omx = f(1 - wx);
      const x0 = ax.i0[X];
      const x1 = ax.i1[X];
      const px = Math.floor(X / p);
      const i = X - px * p;
      const base = (py * gw + px) * 3 * p * p + j * p + i;
      for (let c = 0; c < 3; c++) {
        const a = rgb[3 * (r0 + x0) + c];
        const b = rgb[3 * (r0 + x1) + c];
        const d = rgb[3 * (r1 + x0) + c];
        const e = rgb[3 * (r1 + x1) + c];
        const top = f(f(omx * a) + f(wx * b));
        const bot = f(f(omx * d) + f(wx * e));
        const v = f(f(f(omy * top) + f(wy * bot)) / 255);
        pixels[base + c * p * p] = f(f(v - mean[c]) / std[c]);
      }
    }
  }
  return { pixels, gh, gw, rows: (gh / 2) * (gw / 2) };
}

/** Keys's cubic with a = −0.5, the kernel of PIL's BICUBIC filter. */
function cubic(x: number): number {
  const a = -0.5;
  x = Math.abs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

/**
 * One axis of a separable bicubic resize, antialiased when shrinking (the kernel widened by the
 * factor, as PIL does), 8-bit in and out with rounding and clamping between the passes.
 */
function resizeAxis(src: Uint8Array, sw: number, sh: number, ch: number, dw: number, horizontal: boolean): Uint8Array {
  const n = horizontal ? sw : sh;
  const scale = n / dw;
  const fs = Math.max(scale, 1);
  const support = 2 * fs;
  const out = new Uint8Array((horizontal ? dw * sh : sw * dw) * ch);
  const other = horizontal ? sh : sw;
  const w = new Float64Array(Math.ceil(support) * 2 + 2);
  for (let o = 0; o < dw; o++) {
    const center = (o + 0.5) * scale;
    const lo = Math.max(0, Math.floor(center - support + 0.5));
    const hi = Math.min(n, Math.floor(center + support + 0.5));
    let total = 0;
    for (let k = lo; k < hi; k++) total += w[k - lo] = cubic((k - center + 0.5) / fs);
    for (let k = lo; k < hi; k++) w[k - lo] /= total || 1;
    for (let q = 0; q < other; q++)
      for (let c = 0; c < ch; c++) {
        let s = 0;
        for (let k = lo; k < hi; k++) s += w[k - lo] * src[((horizontal ? q * sw + k : k * sw + q) * ch) + c];
        out[((horizontal ? q * dw + o : o * sw + q) * ch) + c] = Math.min(255, Math.max(0, Math.round(s)));
      }
  }
  return out;
}

/** A bicubic resize of 8-bit channels [h][w][ch] to dw × dh (the identity when the size is kept). */
function resizeBicubic(src: Uint8Array, sw: number, sh: number, ch: number, dw: number, dh: number): Uint8Array {
  const across = dw === sw ? src : resizeAxis(src, sw, sh, ch, dw, true);
  return dh === sh ? across : resizeAxis(across, dw, sh, ch, dh, false);
}

/**
 * The release processor's route: shrink (never enlarge) by min(1, √(limit / patches), side caps),
 * bicubic (premultiplied by alpha, as PIL resizes RGBA), composite transparency over the chessboard after the resize, pad right and bottom with
 * zeros to whole 2 × 2 cells of patches (−1 after normalising), normalise.
 */
function nativePatches(img: RgbImage, spec: ImageSpec): Patches {
  const p = spec.patch;
  const { width: w, height: h } = img;
  const { nw, nh, gw, gh } = nativeSize(w, h, spec);
  let flat: Uint8Array;
  if (!img.alpha) flat = resizeBicubic(img.rgb, w, h, 3, nw, nh);
  else {
    // PIL resizes RGBA premultiplied, so a transparent pixel's color does not bleed into its neighbours
    const pre = new Uint8Array(img.rgb.length);
    for (let i = 0; i < w * h; i++) for (let c = 0; c < 3; c++) pre[3 * i + c] = Math.round((img.rgb[3 * i + c] * img.alpha[i]) / 255);
    const rgb = resizeBicubic(pre, w, h, 3, nw, nh);
    const alpha = resizeBicubic(img.alpha, w, h, 1, nw, nh);
    flat = new Uint8Array(rgb.length);
    for (let y = 0; y < nh; y++)
      for (let x = 0; x < nw; x++) {
        const q = y * nw + x;
        const bg = backdrop(x, y);
        for (let c = 0; c < 3; c++) flat[3 * q + c] = Math.min(255, Math.round(rgb[3 * q + c] + (bg * (255 - alpha[q])) / 255));
      }
  }
  const pixels = new Float32Array(gw * gh * 3 * p * p);
  for (let Y = 0; Y < gh * p; Y++)
    for (let X = 0; X < gw * p; X++) {
      const py = Math.floor(Y / p);
      const px = Math.floor(X / p);
      const base = (py * gw + px) * 3 * p * p + (Y - py * p) * p + (X - px * p);
      const inside = X < nw && Y < nh;
      for (let c = 0; c < 3; c++) {
        const v = inside ? flat[3 * (Y * nw + X) + c] / 255 : 0;
        pixels[base + c * p * p] = (v - spec.mean[c]) / spec.std[c];
      }
    }
  return { pixels, gh, gw, rows: (gh / 2) * (gw / 2) };
}

/** An image's patches by the chosen route. */
export function toPatches(img: RgbImage, spec: ImageSpec, route: ImageRoute = 'waste'): Patches {
  if (!(img.width > 0 && img.height > 0) || img.rgb.length !== img.width * img.height * 3)
    throw new WasteError('E_ARG', `an image of ${img.width} × ${img.height} pixels with ${img.rgb.length} RGB bytes`);
  if (route === 'waste') return wastePatches(img, spec);
  if (route === 'native') return nativePatches(img, spec);
  throw new WasteError('E_ARG', `unknown image route ${excerpt(String(JSON.stringify(route)))} (waste or native)`);
}

/**
 * The release processor's size for a w × h image: shrunk (never enlarged) by
 * min(1, √(limit / patches), side caps), then padded to whole 2 × 2 cells of patches.
 */
function nativeSize(w: number, h: number, spec: ImageSpec): { nw: number; nh: number; gw: number; gh: number } {
  const p = spec.patch;
  const limit = Math.min(spec.inPatchLimit, spec.towerLimit);
  const cells = (a: number) => Math.ceil(a / (2 * p)) * 2;
  let factor = Math.min(1, Math.sqrt(limit / (Math.max(1, Math.floor(w / p)) * Math.max(1, Math.floor(h / p)))), (spec.sideLimit * p) / w, (spec.sideLimit * p) / h);
  let nw = Math.max(1, Math.floor(w * factor));
  let nh = Math.max(1, Math.floor(h * factor));
  // padding to whole cells can push the count past the cap: shrink until it fits
  while (cells(nw) * cells(nh) > limit && (nw > 1 || nh > 1)) {
    factor *= 0.99;
    nw = Math.max(1, Math.floor(w * factor));
    nh = Math.max(1, Math.floor(h * factor));
  }
  return { nw, nh, gw: cells(nw), gh: cells(nh) };
}

/** Rows an image of this size will take in the prompt (no decoding). */
export function rowsFor(width: number, height: number, spec: ImageSpec, route: ImageRoute = 'waste'): number {
  const { gw, gh } = route === 'waste' ? wasteGrid(width, height, spec.patch, Math.min(spec.maxPatches, spec.towerLimit)) : nativeSize(width, height, spec);
  return (gw / 2) * (gh / 2);
}
