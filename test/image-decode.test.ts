import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { describe, it } from 'node:test';
import jpegJs from 'jpeg-js';
import omggif from 'omggif';
import pngjs from 'pngjs';
import { decodeImage, imageSize, readImageFile, type DecodedImage } from '../src/image/decode.js';
import { WasteError } from '../src/util/errors.js';
import { Rng } from '../src/util/prng.js';
import { tmpDir } from './helpers.js';
import {
  afterSoi,
  concat,
  exifSegment,
  ihdr,
  literalCodes,
  packCodes,
  PNG_SIGNATURE,
  pngChunk,
  segment,
  webpHeader,
  writeBmp,
  writeFlatJpeg,
  writeGif,
  writePng,
  type PngSpec,
} from './image-writers.js';

/**
 * Every decoder on images made here: exact pixels where the format is lossless, a tolerance for
 * JPEG's lossy path, and a hostile corpus (truncations, byte flips, lying headers, bombs) that
 * must each end in one WasteError of one line, in bounded time and memory.
 */

function refuses(run: () => unknown, pattern?: RegExp, code = 'E_IMAGE'): WasteError {
  let caught: unknown;
  try {
    run();
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof WasteError, `expected a WasteError, got ${caught instanceof Error ? caught.stack : String(caught)}`);
  assert.equal(caught.code, code, caught.message);
  assert.doesNotMatch(caught.message, /[\n\r]/, 'an error is one line');
  if (pattern) assert.match(caught.message, pattern);
  return caught;
}

/** decodeImage, or its refusal; anything but a WasteError of one line fails the test. */
function attempt(bytes: Uint8Array, maxPixels?: number): 'ok' | 'refused' {
  try {
    const img = decodeImage(bytes, { name: 'x', maxPixels });
    assert.equal(img.rgb.length, img.width * img.height * 3);
    if (img.alpha) assert.equal(img.alpha.length, img.width * img.height);
    return 'ok';
  } catch (e) {
    if (!(e instanceof WasteError)) throw new Error(`not a WasteError: ${e instanceof Error ? e.stack : String(e)}`);
    assert.equal(e.code, 'E_IMAGE', e.message);
    assert.doesNotMatch(e.message, /[\n\r]/, 'an error is one line');
    return 'refused';
  }
}

const pixel = (img: DecodedImage, x: number, y: number): number[] => [...img.rgb.subarray(3 * (y * img.width + x), 3 * (y * img.width + x) + 3)];

/** A 16-bit sample as the decoder reads it: its high byte (as stb_image and PIL do). */
const to8 = (v: number): number => v >> 8;

// -------------------------------------------------------------------------------- PNG

function pngCase(spec: Omit<PngSpec, 'samples'>, sample: (x: number, y: number, c: number) => number): { bytes: Uint8Array; samples: number[] } {
  const ch = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[spec.colorType];
  const samples: number[] = [];
  for (let y = 0; y < spec.height; y++) for (let x = 0; x < spec.width; x++) for (let c = 0; c < ch; c++) samples.push(sample(x, y, c));
  return { bytes: writePng({ ...spec, samples }), samples };
}

describe('PNG', () => {
  it('8-bit RGB and RGBA from pngjs’s encoder, exactly; alpha only with an alpha channel', () => {
    const width = 13;
    const height = 7;
    const data = Buffer.alloc(width * height * 4);
    for (const colorType of [6, 2] as const) {
      for (let i = 0; i < data.length; i++) data[i] = (i * 37 + 11) & 255;
      // pngjs blends alpha into a background when it writes RGB: opaque, the colors are kept
      if (colorType === 2) for (let i = 3; i < data.length; i += 4) data[i] = 255;
      const bytes = pngjs.PNG.sync.write({ width, height, data } as pngjs.PNG, { colorType });
      const img = decodeImage(bytes);
      assert.equal(img.format, 'png');
      assert.equal(img.width, width);
      assert.equal(img.height, height);
      for (let i = 0; i < width * height; i++) assert.deepEqual([...img.rgb.subarray(3 * i, 3 * i + 3)], [...data.subarray(4 * i, 4 * i + 3)]);
      if (colorType === 6) assert.deepEqual([...(img.alpha as Uint8Array)], [...data].filter((_, i) => i % 4 === 3));
      else assert.equal(img.alpha, undefined);
    }
  });

  it("16-bit RGBA from pngjs’s encoder: each sample's high byte", () => {
    const width = 9;
    const height = 4;
    const values = [0, 1, 128, 129, 32767, 32768, 65535, 65534, 257 * 77, 257 * 77 + 128, 257 * 77 + 129];
    const data = new Uint16Array(width * height * 4).map((_, i) => values[i % values.length]);
    const bytes = pngjs.PNG.sync.write({ width, height, data } as unknown as pngjs.PNG, { colorType: 6, inputColorType: 6, bitDepth: 16, inputHasAlpha: true });
    const img = decodeImage(bytes);
    for (let i = 0; i < width * height; i++) {
      assert.deepEqual(pixel(img, i % width, Math.floor(i / width)), [...data.subarray(4 * i, 4 * i + 3)].map(to8));
      assert.equal(img.alpha?.[i], to8(data[4 * i + 3]));
    }
  });

  for (const interlace of [false, true])
    for (const [w, h] of [
      [1, 1],
      [7, 5],
      [17, 11],
    ])
      describe(`${w} x ${h}${interlace ? ', Adam7' : ''}`, () => {
        for (const depth of [1, 2, 4, 8, 16] as const)
          it(`gray, ${depth}-bit`, () => {
            const max = 2 ** depth - 1;
            const { bytes, samples } = pngCase({ width: w, height: h, colorType: 0, depth, interlace }, (x, y) => (x * 7 + y * 3) % (max + 1));
            const img = decodeImage(bytes);
            for (let i = 0; i < w * h; i++) {
              const v = depth === 16 ? to8(samples[i]) : Math.round((samples[i] * 255) / max);
              assert.deepEqual(pixel(img, i % w, Math.floor(i / w)), [v, v, v]);
            }
            assert.equal(img.alpha, undefined);
          });

        for (const depth of [8, 16] as const) {
          it(`gray + alpha, ${depth}-bit`, () => {
            const max = 2 ** depth - 1;
            const { bytes, samples } = pngCase({ width: w, height: h, colorType: 4, depth, interlace }, (x, y, c) => (c === 0 ? (x * 911 + y * 37) % max : (y * 1013 + x) % max));
            const img = decodeImage(bytes);
            for (let i = 0; i < w * h; i++) {
              const v = depth === 16 ? to8(samples[2 * i]) : samples[2 * i];
              assert.deepEqual(pixel(img, i % w, Math.floor(i / w)), [v, v, v]);
              assert.equal(img.alpha?.[i], depth === 16 ? to8(samples[2 * i + 1]) : samples[2 * i + 1]);
            }
          });
          it(`RGB, ${depth}-bit`, () => {
            const max = 2 ** depth - 1;
            const { bytes, samples } = pngCase({ width: w, height: h, colorType: 2, depth, interlace }, (x, y, c) => (x * 40503 + y * 9 + c * 77) % max);
            const img = decodeImage(bytes);
            const expect = depth === 16 ? samples.map(to8) : samples;
            assert.deepEqual([...img.rgb], expect);
            assert.equal(img.alpha, undefined);
          });
        }

        for (const depth of [1, 2, 4, 8] as const)
          it(`palette, ${depth}-bit, with and without tRNS`, () => {
            const colors = 2 ** depth;
            const palette = Array.from({ length: colors }, (_, i) => [(i * 53) & 255, (i * 101 + 7) & 255, (255 - i * 13) & 255]);
            const index = (x: number, y: number): number => (x * 3 + y * 5) % colors;
            for (const trns of [undefined, palette.slice(0, Math.max(1, colors >> 1)).map((_, i) => (i * 61) & 255)]) {
              const { bytes } = pngCase({ width: w, height: h, colorType: 3, depth, interlace, palette, trns }, index);
              const img = decodeImage(bytes);
              for (let y = 0; y < h; y++)
                for (let x = 0; x < w; x++) {
                  assert.deepEqual(pixel(img, x, y), palette[index(x, y)]);
                  if (trns) assert.equal(img.alpha?.[y * w + x], trns[index(x, y)] ?? 255);
                }
              if (!trns) assert.equal(img.alpha, undefined);
            }
          });
      });

  it('tRNS on gray and RGB: the one stated color is transparent, compared as stored (16-bit)', () => {
    const g = pngCase({ width: 4, height: 2, colorType: 0, depth: 16, trns: [0x12, 0x34] }, (x) => [0x1234, 0x1235, 0, 65535][x]);
    const gi = decodeImage(g.bytes);
    assert.deepEqual([...(gi.alpha as Uint8Array)], [0, 255, 255, 255, 0, 255, 255, 255]);
    assert.deepEqual(pixel(gi, 1, 0), [to8(0x1235), to8(0x1235), to8(0x1235)]);
    const c = pngCase({ width: 3, height: 1, colorType: 2, depth: 8, trns: [0, 10, 0, 20, 0, 30] }, (x, _y, ch) => (x === 1 ? [10, 20, 30][ch] : 10));
    assert.deepEqual([...(decodeImage(c.bytes).alpha as Uint8Array)], [255, 0, 255]);
  });

  it('ancillary chunks pass, unknown critical ones are refused', () => {
    const { bytes } = pngCase({ width: 2, height: 2, colorType: 0, depth: 8 }, (x, y) => x + y);
    const withText = concat(bytes.subarray(0, 33), pngChunk('tEXt', [...Buffer.from('Comment\0hi')]), bytes.subarray(33));
    assert.deepEqual([...decodeImage(withText).rgb], [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2]);
    const withCritical = concat(bytes.subarray(0, 33), pngChunk('ABCD', [1]), bytes.subarray(33));
    refuses(() => decodeImage(withCritical, { name: 'c.png' }), /^c\.png: unsupported PNG: unknown critical chunk ABCD$/);
  });

  it('image data split over several IDAT chunks', () => {
    const spec = { width: 5, height: 3, colorType: 2 as const, depth: 8 as const, samples: Array.from({ length: 45 }, (_, i) => i * 5) };
    const z = zlib.deflateSync(Uint8Array.from([0, ...spec.samples.slice(0, 15), 0, ...spec.samples.slice(15, 30), 0, ...spec.samples.slice(30)]));
    const bytes = concat(PNG_SIGNATURE, ihdr(5, 3, 8, 2), pngChunk('IDAT', z.subarray(0, 3)), pngChunk('IDAT', z.subarray(3, 10)), pngChunk('IDAT', z.subarray(10)), pngChunk('IEND'));
    assert.deepEqual([...decodeImage(bytes).rgb], spec.samples);
  });
});

// -------------------------------------------------------------------------------- JPEG

/** jpeg-js's YCbCr → RGB. */
function ycc(y: number, cb: number, cr: number): number[] {
  const c = (v: number): number => Math.max(0, Math.min(255, Math.round(v)));
  return [c(y + 1.402 * (cr - 128)), c(y - 0.3441363 * (cb - 128) - 0.71413636 * (cr - 128)), c(y + 1.772 * (cb - 128))];
}

function near(actual: number[], expected: number[], tolerance: number, what: string): void {
  assert.ok(
    actual.every((v, i) => Math.abs(v - expected[i]) <= tolerance),
    `${what}: ${actual} is not within ${tolerance} of ${expected}`,
  );
}

/** The block value at block (bx, by) of a decoded flat-block image, checked flat. */
function blockValue(img: DecodedImage, bx: number, by: number): number[] {
  const first = pixel(img, 8 * bx, 8 * by);
  for (let y = 0; y < 8; y++) for (let x = 0; x < 8; x++) near(pixel(img, 8 * bx + x, 8 * by + y), first, 1, `block ${bx},${by}`);
  return first;
}

describe('JPEG', () => {
  it('a photo-like image from jpeg-js’s encoder, within a tolerance', () => {
    const width = 48;
    const height = 32;
    const rgba = Buffer.alloc(width * height * 4);
    for (let y = 0; y < height; y++)
      for (let x = 0; x < width; x++) rgba.set([Math.round((255 * x) / (width - 1)), Math.round((255 * y) / (height - 1)), 128, 255], 4 * (y * width + x));
    const bytes = jpegJs.encode({ width, height, data: rgba }, 95).data;
    const img = decodeImage(bytes);
    assert.equal(img.format, 'jpeg');
    assert.equal(img.alpha, undefined);
    let worst = 0;
    for (let i = 0; i < width * height; i++) for (let c = 0; c < 3; c++) worst = Math.max(worst, Math.abs(img.rgb[3 * i + c] - rgba[4 * i + c]));
    assert.ok(worst <= 12, `largest error ${worst}`);
  });

  it('grayscale: one component becomes three equal channels', () => {
    const values = [[0, 40, 128, 200, 255, 17]];
    const img = decodeImage(writeFlatJpeg({ blocksWide: 3, blocksHigh: 2, values }));
    assert.deepEqual([img.width, img.height], [24, 16]);
    for (let b = 0; b < 6; b++) near(blockValue(img, b % 3, Math.floor(b / 3)), [values[0][b], values[0][b], values[0][b]], 1, `block ${b}`);
  });

  it('YCbCr, and RGB when an Adobe segment says the components are not transformed', () => {
    const values = [
      [30, 200],
      [90, 128],
      [180, 60],
    ];
    const img = decodeImage(writeFlatJpeg({ blocksWide: 2, blocksHigh: 1, values }));
    for (let b = 0; b < 2; b++) near(blockValue(img, b, 0), ycc(values[0][b], values[1][b], values[2][b]), 2, `block ${b}`);
    const adobe = segment(0xee, [...Buffer.from('Adobe'), 0, 100, 0, 0, 0, 0, 0]);
    const rgb = decodeImage(writeFlatJpeg({ blocksWide: 2, blocksHigh: 1, values, head: [adobe] }));
    for (let b = 0; b < 2; b++) near(blockValue(rgb, b, 0), [values[0][b], values[1][b], values[2][b]], 1, `block ${b}`);
  });

  it('restart markers inside the scan', () => {
    const values = [Array.from({ length: 12 }, (_, i) => i * 20)];
    const img = decodeImage(writeFlatJpeg({ blocksWide: 4, blocksHigh: 3, values, restartInterval: 2 }));
    for (let b = 0; b < 12; b++) near(blockValue(img, b % 4, Math.floor(b / 4)), [b * 20, b * 20, b * 20], 1, `block ${b}`);
  });

  describe('Exif orientation', () => {
    // a 3 x 2 grid of blocks, each its own gray, block 0 (top left as stored) the marked one
    const stored = [
      [250, 20, 60],
      [100, 140, 180],
    ];
    const flipH = (g: number[][]): number[][] => g.map((r) => [...r].reverse());
    const flipV = (g: number[][]): number[][] => [...g].reverse();
    const transpose = (g: number[][]): number[][] => g[0].map((_, c) => g.map((r) => r[c]));
    const rotateCW = (g: number[][]): number[][] => flipH(transpose(g));
    const rotateCCW = (g: number[][]): number[][] => flipV(transpose(g));
    // as Exif describes them: the turn that shows the stored pixels upright
    const upright: Record<number, (g: number[][]) => number[][]> = {
      1: (g) => g,
      2: flipH,
      3: (g) => flipV(flipH(g)),
      4: flipV,
      5: (g) => rotateCCW(flipH(g)),
      6: rotateCW,
      7: (g) => rotateCW(flipH(g)),
      8: rotateCCW,
    };
    const jpeg = writeFlatJpeg({ blocksWide: 3, blocksHigh: 2, values: [stored.flat()] });
    // where stored block (0, 0) must land, by the words of the Exif standard
    const marked: Record<number, [number, number]> = { 1: [0, 0], 2: [2, 0], 3: [2, 1], 4: [0, 1], 5: [0, 0], 6: [1, 0], 7: [1, 2], 8: [0, 2] };

    for (const order of ['II', 'MM'] as const)
      for (let o = 1; o <= 8; o++)
        it(`${o}, ${order === 'II' ? 'little' : 'big'}-endian`, () => {
          const bytes = afterSoi(jpeg, exifSegment(o, order));
          const img = decodeImage(bytes);
          const grid = upright[o](stored);
          assert.deepEqual([img.width, img.height], [8 * grid[0].length, 8 * grid.length]);
          assert.deepEqual(imageSize(bytes), { width: img.width, height: img.height, format: 'jpeg' });
          for (let by = 0; by < grid.length; by++) for (let bx = 0; bx < grid[0].length; bx++) near(blockValue(img, bx, by), [grid[by][bx], grid[by][bx], grid[by][bx]], 1, `orientation ${o} block ${bx},${by}`);
          const [mx, my] = marked[o];
          near(pixel(img, 8 * mx + 3, 8 * my + 3), [250, 250, 250], 1, `orientation ${o}: the marked block`);
        });

    it('a jpeg-js photo turned a quarter clockwise (6): its marked corner lands top right', () => {
      const width = 32;
      const height = 16;
      const rgba = Buffer.alloc(width * height * 4, 0);
      for (let i = 3; i < rgba.length; i += 4) rgba[i] = 255;
      for (let y = 0; y < 8; y++) for (let x = 0; x < 8; x++) rgba.set([255, 255, 255], 4 * (y * width + x));
      const img = decodeImage(afterSoi(jpegJs.encode({ width, height, data: rgba }, 95).data, exifSegment(6, 'MM')));
      assert.deepEqual([img.width, img.height], [16, 32]);
      assert.ok(pixel(img, 12, 3).every((v) => v > 230), 'top right is white');
      assert.ok(pixel(img, 3, 3).every((v) => v < 25), 'top left is black');
    });

    it('a damaged or odd Exif block is ignored, not fatal', () => {
      for (const seg of [exifSegment(9, 'II'), exifSegment(0, 'MM'), exifSegment(6, 'II', 4), segment(0xe1, [...Buffer.from('Exif\0\0II*\0'), 0xff, 0xff, 0, 0])]) {
        const img = decodeImage(afterSoi(jpeg, seg));
        assert.deepEqual([img.width, img.height], [24, 16]);
        near(blockValue(img, 0, 0), [250, 250, 250], 1, 'unturned');
      }
    });
  });

  it('refuses what it does not decode, by name', () => {
    const jpeg = writeFlatJpeg({ blocksWide: 1, blocksHigh: 1, values: [[10], [20], [30]] });
    const sof = jpeg.indexOf(0xc0, 2) - 1;
    const patched = (at: number, ...bytes: number[]): Uint8Array => {
      const b = Uint8Array.from(jpeg);
      b.set(bytes, at);
      return b;
    };
    refuses(() => decodeImage(patched(sof + 1, 0xc3), { name: 'l.jpg' }), /^l\.jpg: unsupported JPEG: lossless JPEG$/);
    refuses(() => decodeImage(patched(sof + 1, 0xc9)), /arithmetic-coded/);
    refuses(() => decodeImage(patched(sof + 4, 12)), /12-bit samples/);
    const cmyk = concat([0xff, 0xd8], segment(0xc0, [8, 0, 8, 0, 8, 4, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0]), [0xff, 0xd9]);
    refuses(() => decodeImage(cmyk), /CMYK or YCCK/);
  });
});

// -------------------------------------------------------------------------------- BMP

describe('BMP', () => {
  const w = 5;
  const h = 3;
  const rgbAt = (i: number): number[] => [(i * 50) & 255, (i * 90 + 3) & 255, (255 - i * 17) & 255];
  const expected = Array.from({ length: w * h }, (_, i) => rgbAt(i)).flat();

  for (const topDown of [false, true])
    it(`24-bit, ${topDown ? 'top-down' : 'bottom-up'}, rows padded to 4 bytes`, () => {
      const img = decodeImage(writeBmp({ width: w, height: h, bpp: 24, topDown, pixels: expected }));
      assert.equal(img.format, 'bmp');
      assert.deepEqual([...img.rgb], expected);
      assert.equal(img.alpha, undefined);
    });

  it('32-bit BI_RGB: the fourth byte is padding, not alpha', () => {
    const pixels = Array.from({ length: w * h }, (_, i) => ((0x5a << 24) | (rgbAt(i)[0] << 16) | (rgbAt(i)[1] << 8) | rgbAt(i)[2]) >>> 0);
    const img = decodeImage(writeBmp({ width: w, height: h, bpp: 32, pixels }));
    assert.deepEqual([...img.rgb], expected);
    assert.equal(img.alpha, undefined);
  });

  for (const infoSize of [40, 124] as const)
    it(`32-bit with channel masks and alpha (${infoSize}-byte header)`, () => {
      // R in the low byte, alpha in the high one: masks, not a fixed order
      const pixels = Array.from({ length: w * h }, (_, i) => (((i * 16) << 24) | (rgbAt(i)[2] << 16) | (rgbAt(i)[1] << 8) | rgbAt(i)[0]) >>> 0);
      const img = decodeImage(writeBmp({ width: w, height: h, bpp: 32, pixels, compression: infoSize === 40 ? 6 : 3, masks: [0xff, 0xff00, 0xff0000, 0xff000000], infoSize }));
      assert.deepEqual([...img.rgb], expected);
      assert.deepEqual([...(img.alpha as Uint8Array)], Array.from({ length: w * h }, (_, i) => i * 16));
    });

  it('16-bit: 5-5-5 by default, 5-6-5 by masks, scaled to 8 bits', () => {
    const five = [0, 1, 15, 16, 31];
    const p555 = Array.from({ length: w * h }, (_, i) => (five[i % 5] << 10) | (five[(i + 1) % 5] << 5) | five[(i + 2) % 5]);
    const img = decodeImage(writeBmp({ width: w, height: h, bpp: 16, pixels: p555 }));
    const s5 = (v: number): number => Math.round((v * 255) / 31);
    for (let i = 0; i < w * h; i++) assert.deepEqual(pixel(img, i % w, Math.floor(i / w)), [s5(five[i % 5]), s5(five[(i + 1) % 5]), s5(five[(i + 2) % 5])]);
    const p565 = Array.from({ length: w * h }, (_, i) => (31 << 11) | ((i * 4) << 5) | 0);
    const img565 = decodeImage(writeBmp({ width: w, height: h, bpp: 16, pixels: p565, compression: 3, masks: [0xf800, 0x07e0, 0x001f] }));
    for (let i = 0; i < w * h; i++) assert.deepEqual(pixel(img565, i % w, Math.floor(i / w)), [255, Math.round((i * 4 * 255) / 63), 0]);
  });

  for (const bpp of [1, 4, 8] as const)
    it(`${bpp}-bit palette`, () => {
      const colors = bpp === 8 ? 200 : 2 ** bpp;
      const palette = Array.from({ length: colors }, (_, i) => [(i * 31) & 255, (i * 7) & 255, (i * 113) & 255]);
      const indices = Array.from({ length: 9 * 4 }, (_, i) => (i * 5) % colors);
      const img = decodeImage(writeBmp({ width: 9, height: 4, bpp, pixels: indices, palette }));
      assert.deepEqual([...img.rgb], indices.flatMap((i) => palette[i]));
    });

  it('refuses RLE, OS/2 headers and pixel indices past the palette', () => {
    const bmp = writeBmp({ width: 2, height: 2, bpp: 8, pixels: [0, 1, 1, 0], palette: [[0, 0, 0], [1, 1, 1]] });
    const rle = Uint8Array.from(bmp);
    rle[30] = 1;
    refuses(() => decodeImage(rle, { name: 'r.bmp' }), /^r\.bmp: unsupported BMP: RLE8 compression$/);
    const os2 = Uint8Array.from(bmp);
    os2[14] = 12;
    refuses(() => decodeImage(os2), /OS\/2/);
    const past = writeBmp({ width: 2, height: 2, bpp: 8, pixels: [0, 1, 2, 0], palette: [[0, 0, 0], [1, 1, 1]] });
    refuses(() => decodeImage(past), /pixel index 2 is past the palette of 2 colors/);
  });
});

// -------------------------------------------------------------------------------- GIF

/** A GIF from omggif's encoder (real LZW compression, codes up to 12 bits). */
function omgGif(width: number, height: number, frames: { x: number; y: number; w: number; h: number; indices: number[]; transparent?: number }[], palette: number[]): Uint8Array {
  const buf = new Uint8Array(1 << 20);
  const writer = new omggif.GifWriter(buf, width, height, { palette });
  for (const f of frames) writer.addFrame(f.x, f.y, f.w, f.h, f.indices, f.transparent === undefined ? {} : { transparent: f.transparent });
  return buf.slice(0, writer.end());
}

const PALETTE = Array.from({ length: 256 }, (_, i) => [(i * 3) & 255, (i * 7 + 1) & 255, (255 - i) & 255]);
const packed = (colors: number): number[] => PALETTE.slice(0, colors).map(([r, g, b]) => (r << 16) | (g << 8) | b);

describe('GIF', () => {
  it('the first frame of an animation, from omggif’s encoder, exactly', () => {
    const width = 61;
    const height = 47;
    // enough distinct runs that the code table fills and is cleared
    const rng = new Rng(7);
    const first = Array.from({ length: width * height }, (_, i) => (i % 13 < 5 ? rng.int(256) : (i >> 3) & 255));
    const second = first.map((v) => 255 - v);
    const bytes = omgGif(width, height, [{ x: 0, y: 0, w: width, h: height, indices: first }, { x: 0, y: 0, w: width, h: height, indices: second }], packed(256));
    const img = decodeImage(bytes);
    assert.equal(img.format, 'gif');
    assert.deepEqual([img.width, img.height], [width, height]);
    assert.deepEqual([...img.rgb], first.flatMap((i) => PALETTE[i]));
    assert.equal(img.alpha, undefined);
  });

  it('the transparent index becomes alpha 0, and what the frame leaves uncovered too', () => {
    const indices = [0, 1, 2, 3, 1, 1];
    const img = decodeImage(omgGif(5, 4, [{ x: 1, y: 2, w: 3, h: 2, indices, transparent: 1 }], packed(4)));
    assert.deepEqual([img.width, img.height], [5, 4]);
    const alpha = [...(img.alpha as Uint8Array)];
    assert.deepEqual(alpha, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 255, 0, 0, 255, 0, 0, 0]);
    assert.deepEqual(pixel(img, 1, 2), PALETTE[0]);
    assert.deepEqual(pixel(img, 3, 3), PALETTE[1].map(() => 0), 'transparent: no color painted');
  });

  it('interlaced rows, literal codes, a local color table', () => {
    const w = 3;
    const h = 11;
    const rows = [0, 8, 4, 2, 6, 10, 1, 3, 5, 7, 9];
    const indices = rows.flatMap((r) => [r, r + 1, r + 2]);
    const palette = PALETTE.slice(0, 16);
    const bytes = writeGif({ screen: [w, h], frame: [0, 0, w, h], palette, minCodeSize: 4, data: packCodes(literalCodes(indices, 4), 4), interlaced: true, local: true });
    const img = decodeImage(bytes);
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) assert.deepEqual(pixel(img, x, y), palette[y + x], `${x},${y}`);
  });

  it('a frame past the logical screen grows the canvas', () => {
    const bytes = writeGif({ screen: [2, 2], frame: [1, 1, 3, 1], palette: PALETTE.slice(0, 4), minCodeSize: 2, data: packCodes(literalCodes([1, 2, 3], 2), 2) });
    assert.deepEqual(imageSize(bytes), { width: 4, height: 2, format: 'gif' });
    const img = decodeImage(bytes);
    assert.deepEqual(pixel(img, 3, 1), PALETTE[3]);
    assert.equal(img.alpha?.[0], 0);
  });

  it('LZW streams that omggif loops on, or that name codes not yet defined, are refused or decoded in bounded time', () => {
    // a code past the next free entry: omggif takes it as the previous string and can later chase a cycle forever
    const codes = [4 * 64, 0, 511, 0, ...new Array<number>(248).fill(0), 259, 0, 259, 259, 259];
    const bytes = writeGif({ screen: [64, 64], frame: [0, 0, 64, 64], palette: PALETTE.slice(0, 256), minCodeSize: 8, data: packCodes(codes, 8) });
    refuses(() => decodeImage(bytes, { name: 'loop.gif' }), /^loop\.gif: malformed GIF: LZW code 511 used before it is defined$/);
  });

  it('refuses short image data rather than filling it with color 0', () => {
    const bytes = writeGif({ screen: [4, 4], frame: [0, 0, 4, 4], palette: PALETTE.slice(0, 4), minCodeSize: 2, data: packCodes(literalCodes([1, 2, 3, 1, 2], 2), 2) });
    refuses(() => decodeImage(bytes), /truncated GIF image data \(5 of 16 pixels\)/);
  });
});

// -------------------------------------------------------------------------------- WebP, sniffing, sizes

describe('formats and sizes', () => {
  it('WebP: the size is read, the pixels refused with the format named', () => {
    for (const kind of ['VP8 ', 'VP8L', 'VP8X'] as const) {
      const bytes = webpHeader(kind, 300, 200);
      assert.deepEqual(imageSize(bytes), { width: 300, height: 200, format: 'webp' });
      refuses(() => decodeImage(bytes, { name: 'w.webp' }), /^w\.webp: unsupported image format: WebP \(convert it to PNG or JPEG\)$/);
    }
  });

  it('the format comes from the bytes, never the name', () => {
    const png = writePng({ width: 1, height: 1, colorType: 0, depth: 8, samples: [9] });
    assert.equal(decodeImage(png, { name: 'photo.jpg' }).format, 'png');
    refuses(() => decodeImage(Buffer.from('hello, world'), { name: 'photo.png' }), /^photo\.png: not a PNG, JPEG, BMP, GIF or WebP image$/);
    refuses(() => decodeImage(new Uint8Array(0), { name: 'e.png' }), /^e\.png: empty, not an image$/);
    refuses(() => decodeImage(png.subarray(0, 5), { name: 't.png' }), /^t\.png: truncated PNG data \(5 bytes\)$/);
  });

  it('imageSize agrees with decodeImage for every format', () => {
    const images = [
      writePng({ width: 3, height: 2, colorType: 0, depth: 8, samples: [1, 2, 3, 4, 5, 6] }),
      writeFlatJpeg({ blocksWide: 2, blocksHigh: 1, values: [[1, 2]] }),
      writeBmp({ width: 3, height: 2, bpp: 24, topDown: true, pixels: new Array(18).fill(7) }),
      omgGif(3, 2, [{ x: 0, y: 0, w: 3, h: 2, indices: [0, 1, 0, 1, 0, 1] }], packed(2)),
    ];
    for (const bytes of images) {
      const img = decodeImage(bytes);
      assert.deepEqual(imageSize(bytes), { width: img.width, height: img.height, format: img.format });
    }
  });

  it('maxPixels: the limit is inclusive, and checked before decoding', () => {
    const png = writePng({ width: 4, height: 3, colorType: 0, depth: 8, samples: new Array(12).fill(0) });
    assert.equal(decodeImage(png, { maxPixels: 12 }).width, 4);
    refuses(() => decodeImage(png, { maxPixels: 11, name: 'small.png' }), /^small\.png: 4 x 3 pixels exceeds the limit of 11$/);
    refuses(() => decodeImage(png, { maxPixels: 0 }), /maxPixels/, 'E_ARG');
  });

  it('a JPEG at the limit decodes: the memory jpeg-js may use follows maxPixels', () => {
    const width = 1000;
    const height = 1000;
    const rgba = Buffer.alloc(width * height * 4, 200);
    const bytes = jpegJs.encode({ width, height, data: rgba }, 80).data;
    assert.equal(decodeImage(bytes, { maxPixels: width * height }).width, width);
  });
});

// -------------------------------------------------------------------------------- hostile input

/** One valid image of each kind, to be damaged. */
function specimens(): [string, Uint8Array][] {
  const rng = new Rng(99);
  const noise = (n: number): number[] => Array.from({ length: n }, () => rng.int(256));
  const rgba = Buffer.from(noise(24 * 16 * 4));
  return [
    ['png rgb', writePng({ width: 12, height: 9, colorType: 2, depth: 8, samples: noise(12 * 9 * 3) })],
    ['png palette adam7', writePng({ width: 11, height: 7, colorType: 3, depth: 4, samples: noise(77).map((v) => v & 15), palette: PALETTE.slice(0, 16), trns: [0, 128], interlace: true })],
    ['png 16-bit rgba', writePng({ width: 6, height: 5, colorType: 6, depth: 16, samples: noise(120).map((v) => v * 257) })],
    ['jpeg-js', jpegJs.encode({ width: 24, height: 16, data: rgba }, 90).data],
    ['flat jpeg with exif', afterSoi(writeFlatJpeg({ blocksWide: 3, blocksHigh: 2, values: [noise(6), noise(6), noise(6)], restartInterval: 2 }), exifSegment(6, 'II'))],
    ['bmp 24', writeBmp({ width: 7, height: 5, bpp: 24, pixels: noise(105) })],
    ['bmp 8', writeBmp({ width: 7, height: 5, bpp: 8, pixels: noise(35).map((v) => v & 3), palette: PALETTE.slice(0, 4) })],
    ['bmp 32 masks', writeBmp({ width: 4, height: 3, bpp: 32, pixels: noise(12).map((v) => v * 0x1010101), compression: 3, masks: [0xff0000, 0xff00, 0xff, 0xff000000], infoSize: 124 })],
    ['gif', omgGif(13, 9, [{ x: 0, y: 0, w: 13, h: 9, indices: noise(117).map((v) => v & 15), transparent: 3 }, { x: 2, y: 2, w: 3, h: 3, indices: noise(9).map((v) => v & 15) }], packed(16))],
  ];
}

describe('hostile input: one WasteError of one line, bounded time and memory', { timeout: 5 * 60_000 }, () => {
  it('every truncation of every specimen', () => {
    const before = process.memoryUsage().rss;
    for (const [label, bytes] of specimens()) {
      assert.equal(attempt(bytes), 'ok', label);
      // a GIF's first frame is whole before the file ends, and is all that is decoded
      const whole = label === 'gif' ? firstFrameEnd(bytes) : bytes.length;
      for (let cut = 0; cut < bytes.length; cut++) assert.equal(attempt(bytes.subarray(0, cut)), cut < whole ? 'refused' : 'ok', `${label} cut at ${cut} of ${bytes.length}`);
    }
    assert.ok(process.memoryUsage().rss - before < 300 * 2 ** 20);
  });

  it('random byte flips', () => {
    const before = process.memoryUsage().rss;
    const rng = new Rng(2024);
    const tally = { ok: 0, refused: 0 };
    for (const [, bytes] of specimens())
      for (let i = 0; i < 400; i++) {
        const b = Uint8Array.from(bytes);
        const n = 1 + rng.int(6);
        for (let k = 0; k < n; k++) {
          const at = rng.int(b.length);
          b[at] = rng.int(4) === 0 ? b[at] ^ (1 << rng.int(8)) : rng.int(256);
        }
        tally[attempt(b)]++;
      }
    assert.ok(tally.refused > 500, `refused ${tally.refused}, decoded ${tally.ok}`);
    assert.ok(process.memoryUsage().rss - before < 300 * 2 ** 20);
  });

  it('random garbage, bare and behind each magic number', () => {
    const rng = new Rng(5);
    const magics = [[], PNG_SIGNATURE, [0xff, 0xd8, 0xff], [...Buffer.from('GIF89a')], [...Buffer.from('BM')], [...Buffer.from('RIFF\0\0\0\0WEBP')]];
    for (let i = 0; i < 3000; i++) {
      const junk = new Uint8Array(rng.int(200));
      rng.fillBytes(junk);
      const bytes = concat(magics[i % magics.length], junk);
      assert.equal(attempt(bytes), 'refused');
    }
  });

  it('headers that claim huge or empty images', () => {
    const before = process.memoryUsage().rss;
    const idat = pngChunk('IDAT', zlib.deflateSync(new Uint8Array(10)));
    const png = (w: number, h: number): Uint8Array => concat(PNG_SIGNATURE, ihdr(w, h, 8, 6), idat, pngChunk('IEND'));
    refuses(() => decodeImage(png(100000, 100000), { name: 'big.png' }), /^big\.png: 100000 x 100000 pixels exceeds the limit of 67108864$/);
    refuses(() => decodeImage(png(0, 10), { name: 'z.png' }), /^z\.png: 0 x 10 pixels: an image needs at least one pixel$/);
    refuses(() => imageSize(png(10, 0)), /0 pixels/);
    refuses(() => decodeImage(png(2 ** 31, 1)), /past PNG's limit/);

    const jpeg = writeFlatJpeg({ blocksWide: 1, blocksHigh: 1, values: [[10]] });
    const sof = jpeg.indexOf(0xc0, 2) - 1;
    const sized = (w: number, h: number): Uint8Array => {
      const b = Uint8Array.from(jpeg);
      b.set([h >> 8, h & 255, w >> 8, w & 255], sof + 5);
      return b;
    };
    refuses(() => decodeImage(sized(65535, 65535), { name: 'x.jpg' }), /^x\.jpg: 65535 x 65535 pixels exceeds the limit of 67108864$/);
    refuses(() => decodeImage(sized(0, 8)), /0 x 8 pixels/);
    refuses(() => decodeImage(sized(8, 0)), /8 x 0 pixels/);
    // within the limit, but data for one block: refused before jpeg-js allocates for 2000 x 2000
    refuses(() => decodeImage(sized(2000, 2000)), /truncated JPEG data \(\d+ bytes of image data cannot hold 2000 x 2000 pixels\)/);
    // bytes enough for that count, not for the blocks: jpeg-js runs out of scan data
    refuses(() => decodeImage(sized(24, 8)), /^image: malformed JPEG data \(/);

    const gif = (screen: [number, number], frame: [number, number, number, number]): Uint8Array => writeGif({ screen, frame, palette: PALETTE.slice(0, 4), minCodeSize: 2, data: packCodes(literalCodes([1], 2), 2) });
    refuses(() => decodeImage(gif([1, 1], [0, 0, 65535, 65535])), /65535 x 65535 pixels exceeds/);
    refuses(() => decodeImage(gif([1, 1], [65535, 65535, 1, 1])), /65536 x 65536 pixels exceeds/);
    refuses(() => decodeImage(gif([0, 0], [0, 0, 0, 0])), /0 x 0 pixels/);
    assert.deepEqual(imageSize(gif([0, 0], [0, 0, 1, 1])), { width: 1, height: 1, format: 'gif' });

    const bmp = writeBmp({ width: 2, height: 2, bpp: 24, pixels: new Array(12).fill(1) });
    const damaged = (at: number, v: number): Uint8Array => {
      const b = Uint8Array.from(bmp);
      new DataView(b.buffer).setInt32(at, v, true);
      return b;
    };
    refuses(() => decodeImage(damaged(18, -2)), /negative width -2/);
    refuses(() => decodeImage(damaged(22, -(2 ** 31))), /2 x 2147483648 pixels exceeds/);
    refuses(() => decodeImage(damaged(18, 2 ** 31 - 1)), /exceeds the limit/);
    refuses(() => decodeImage(damaged(18, 0)), /0 x 2 pixels/);
    refuses(() => decodeImage(damaged(10, 1 << 30)), /pixel data offset 1073741824 is outside the file/);
    refuses(() => decodeImage(damaged(10, bmp.length - 4)), /truncated BMP data/);
    refuses(() => decodeImage(damaged(18, 4000), { maxPixels: 10000 }), /truncated BMP data/);
    assert.ok(process.memoryUsage().rss - before < 300 * 2 ** 20);
  });

  it('decompression bombs: PNG data that inflates past its header, JPEG scans without end', () => {
    const before = process.memoryUsage().rss;
    // 1000 x 1000 gray needs 1001000 bytes; these inflate to 200 MB
    const bomb = zlib.deflateSync(new Uint8Array(200 << 20), { level: 9 });
    for (const interlace of [0, 1]) {
      const bytes = concat(PNG_SIGNATURE, ihdr(1000, 1000, 8, 0, interlace), pngChunk('IDAT', bomb), pngChunk('IEND'));
      refuses(() => decodeImage(bytes, { name: 'bomb.png' }), /^bomb\.png: malformed PNG: the image data inflates to more than the \d+ bytes its size allows$/);
    }
    // a compressed ICC profile that inflates to 200 MB: not inflated at all
    const iccp = pngChunk('iCCP', [...Buffer.from('icc\0'), 0, ...bomb]);
    const png = writePng({ width: 2, height: 1, colorType: 0, depth: 8, samples: [3, 4] });
    assert.deepEqual([...decodeImage(concat(png.subarray(0, 33), iccp, png.subarray(33))).rgb], [3, 3, 3, 4, 4, 4]);
    // a short stream and a long one inflate to the wrong size
    const short = concat(PNG_SIGNATURE, ihdr(10, 10, 8, 0), pngChunk('IDAT', zlib.deflateSync(new Uint8Array(50))), pngChunk('IEND'));
    refuses(() => decodeImage(short), /inflates to 50 of the 110 bytes/);
    const cut = zlib.deflateSync(new Uint8Array(110).map((_, i) => i * 7));
    refuses(() => decodeImage(concat(PNG_SIGNATURE, ihdr(10, 10, 8, 0), pngChunk('IDAT', cut.subarray(0, cut.length - 6)), pngChunk('IEND'))), /truncated PNG data \(the compressed image data ends early\)/);

    // progressive-style scans: each walks every block however short it is
    const jpeg = writeFlatJpeg({ blocksWide: 1, blocksHigh: 1, values: [[10]] });
    const sos = jpeg.lastIndexOf(0xda) - 1;
    const scan = jpeg.subarray(sos, jpeg.length - 2);
    const many = concat(jpeg.subarray(0, sos), ...new Array<Uint8Array>(101).fill(scan), [0xff, 0xd9]);
    refuses(() => decodeImage(many), /more than 100 scans/);
    assert.ok(process.memoryUsage().rss - before < 300 * 2 ** 20);
  });

  it('JPEG structure: no end-of-image marker, markers out of place, segments past the end', () => {
    const jpeg = writeFlatJpeg({ blocksWide: 2, blocksHigh: 2, values: [[1, 2, 3, 4]] });
    refuses(() => decodeImage(jpeg.subarray(0, jpeg.length - 2), { name: 'x.jpg' }), /^x\.jpg: truncated JPEG data \(the file ends inside a scan\)$/);
    refuses(() => decodeImage(concat(jpeg.subarray(0, 2), segment(0xe0, new Array(30).fill(0)).subarray(0, 20))), /truncated JPEG data \(the FFE0 segment runs past the end\)/);
    refuses(() => decodeImage(concat(jpeg.subarray(0, 2), [0xff, 0xd8], jpeg.subarray(2))), /marker FFD8/);
    refuses(() => decodeImage(concat([0xff, 0xd8], [0xff, 0xd9])), /no frame header/);
  });
});

/** The byte after the first frame's image data in a GIF (extensions before it skipped). */
function firstFrameEnd(bytes: Uint8Array): number {
  const skip = (p: number): number => {
    while (bytes[p] !== 0) p += bytes[p] + 1;
    return p + 1;
  };
  let p = 13 + (bytes[10] & 0x80 ? 3 * (2 << (bytes[10] & 7)) : 0);
  for (;;) {
    const block = bytes[p++];
    if (block === 0x21) p = skip(p + 1);
    else if (block === 0x2c) {
      const flags = bytes[p + 8];
      p += 9 + (flags & 0x80 ? 3 * (2 << (flags & 7)) : 0);
      return skip(p + 1);
    } else throw new Error('no image');
  }
}

// -------------------------------------------------------------------------------- files

describe('readImageFile', () => {
  const dir = tmpDir('images');
  const png = writePng({ width: 2, height: 1, colorType: 2, depth: 8, samples: [1, 2, 3, 4, 5, 6] });

  it('a regular file; errors name it', () => {
    const f = path.join(dir, 'ok.png');
    fs.writeFileSync(f, png);
    assert.deepEqual([...readImageFile(f).rgb], [1, 2, 3, 4, 5, 6]);
    const bad = path.join(dir, 'bad.png');
    fs.writeFileSync(bad, png.subarray(0, 40));
    refuses(() => readImageFile(bad), new RegExp(`^${bad.replace(/[.]/g, '\\.')}: truncated PNG data`));
    refuses(() => readImageFile(bad, { name: 'upload' }), /^upload: truncated PNG data/);
  });

  it('refuses a file past maxBytes, a missing file, a FIFO, /dev/zero and a directory', () => {
    const f = path.join(dir, 'big.png');
    fs.writeFileSync(f, png);
    refuses(() => readImageFile(f, { maxBytes: png.length - 1 }), /more than \d+ bytes/);
    refuses(() => readImageFile(path.join(dir, 'missing.png')), /no such file/, 'E_IO');
    const fifo = path.join(dir, 'fifo.png');
    execFileSync('mkfifo', [fifo]);
    // a reader that blocks on a FIFO hangs rather than fails: the describe's timeout guards it
    refuses(() => readImageFile(fifo), /is a FIFO, expected a regular file$/, 'E_IO');
    const zero = path.join(dir, 'zero.png');
    fs.symlinkSync('/dev/zero', zero);
    refuses(() => readImageFile(zero), /is a character device, expected a regular file$/, 'E_IO');
    refuses(() => readImageFile('/dev/zero'), /^\/dev\/zero: is a character device, expected a regular file$/, 'E_IO');
    refuses(() => readImageFile(dir), /is a directory, expected a regular file$/, 'E_IO');
  });
});
