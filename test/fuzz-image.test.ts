/**
 * Damaged images through the whole path a server takes them (sniff, decode, the patches of both
 * routes), each case in a child process under a watchdog (test/fuzz-harness.ts) and classified: a
 * clean error, an image decoded within its limits and consistent everywhere (test/fuzz-image-case.ts),
 * or a failure — a decoded image that breaks an invariant, a crash, a hang, runaway memory.
 * Seeded mutations of valid PNG, JPEG, BMP and GIF files: flipped bits and bytes, truncations,
 * huge and zero dimensions in the headers, chunk and segment lengths that lie, inserted junk.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import jpegJs from 'jpeg-js';
import omggif from 'omggif';
import { crc32 } from '../src/util/crc32.js';
import { Rng } from '../src/util/prng.js';
import { Tally, Watchdog } from './fuzz-harness.js';
import { afterSoi, concat, exifSegment, packCodes, literalCodes, writeBmp, writeFlatJpeg, writeGif, writePng } from './image-writers.js';

/** The decode limit of these cases: small, so the memory bound below means something. */
const MAX_PIXELS = 1 << 20;
/** What a case may add to the process: the largest image allowed, decoded and made into patches several times over, and room for the code. */
const MEMORY_BOUND = MAX_PIXELS * 64 + (96 << 20);

const PALETTE = Array.from({ length: 256 }, (_, i) => [(i * 3) & 255, (i * 7 + 1) & 255, (255 - i) & 255]);

/** One valid image of each kind and layout, to be damaged. */
function specimens(): [string, Uint8Array][] {
  const rng = new Rng(99);
  const noise = (n: number): number[] => Array.from({ length: n }, () => rng.int(256));
  const gif = (w: number, h: number): Uint8Array => {
    const buf = new Uint8Array(1 << 16);
    const writer = new omggif.GifWriter(buf, w, h, { palette: PALETTE.slice(0, 16).map(([r, g, b]) => (r << 16) | (g << 8) | b) });
    writer.addFrame(0, 0, w, h, noise(w * h).map((v) => v & 15), { transparent: 3 });
    writer.addFrame(2, 2, 3, 3, noise(9).map((v) => v & 15));
    return buf.slice(0, writer.end());
  };
  return [
    ['png rgb', writePng({ width: 40, height: 30, colorType: 2, depth: 8, samples: noise(40 * 30 * 3) })],
    ['png palette adam7', writePng({ width: 11, height: 7, colorType: 3, depth: 4, samples: noise(77).map((v) => v & 15), palette: PALETTE.slice(0, 16), trns: [0, 128], interlace: true })],
    ['png 16-bit rgba', writePng({ width: 6, height: 5, colorType: 6, depth: 16, samples: noise(120).map((v) => v * 257) })],
    ['png gray', writePng({ width: 33, height: 9, colorType: 0, depth: 1, samples: noise(33 * 9).map((v) => v & 1) })],
    ['jpeg-js', jpegJs.encode({ width: 48, height: 32, data: Buffer.from(noise(48 * 32 * 4)) }, 90).data],
    ['flat jpeg with exif', afterSoi(writeFlatJpeg({ blocksWide: 3, blocksHigh: 2, values: [noise(6), noise(6), noise(6)], restartInterval: 2 }), exifSegment(6, 'II'))],
    ['bmp 24', writeBmp({ width: 7, height: 5, bpp: 24, pixels: noise(105) })],
    ['bmp 8', writeBmp({ width: 7, height: 5, bpp: 8, pixels: noise(35).map((v) => v & 3), palette: PALETTE.slice(0, 4) })],
    ['bmp 32 masks', writeBmp({ width: 4, height: 3, bpp: 32, pixels: noise(12).map((v) => v * 0x1010101), compression: 3, masks: [0xff0000, 0xff00, 0xff, 0xff000000], infoSize: 124 })],
    ['gif omggif', gif(13, 9)],
    ['gif written', writeGif({ screen: [4, 2], frame: [0, 0, 4, 2], palette: PALETTE.slice(0, 4), minCodeSize: 2, data: packCodes(literalCodes([0, 1, 2, 3, 3, 2, 1, 0], 2), 2) })],
  ];
}

// ---- where the lengths and sizes are -------------------------------------------------------------

const be32 = (b: Uint8Array, at: number): number => ((b[at] << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3]) >>> 0;
const putBe32 = (b: Uint8Array, at: number, v: number): void => b.set([(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255], at);
const putBe16 = (b: Uint8Array, at: number, v: number): void => b.set([(v >>> 8) & 255, v & 255], at);
const putLe16 = (b: Uint8Array, at: number, v: number): void => b.set([v & 255, (v >>> 8) & 255], at);
const putLe32 = (b: Uint8Array, at: number, v: number): void => b.set([v & 255, (v >>> 8) & 255, (v >>> 16) & 255, (v >>> 24) & 255], at);

/** A PNG's chunks: where each starts (its length field) and its length. */
function pngChunks(b: Uint8Array): { at: number; length: number; type: string }[] {
  const out = [];
  for (let p = 8; p + 8 <= b.length; ) {
    const length = be32(b, p);
    out.push({ at: p, length, type: String.fromCharCode(...b.subarray(p + 4, p + 8)) });
    p += 12 + length;
  }
  return out;
}

/** A JPEG's marker segments before the first scan: where each length field is, and its value. */
function jpegSegments(b: Uint8Array): { at: number; marker: number; length: number }[] {
  const out = [];
  for (let p = 2; p + 4 <= b.length && b[p] === 0xff; ) {
    const marker = b[p + 1];
    const length = (b[p + 2] << 8) | b[p + 3];
    out.push({ at: p + 2, marker, length });
    if (marker === 0xda) break;
    p += 2 + length;
  }
  return out;
}

/** A GIF's blocks: the frame descriptor's offset and every data sub-block's length byte. */
function gifLayout(b: Uint8Array): { frames: number[]; lengths: number[] } {
  const frames: number[] = [];
  const lengths: number[] = [];
  let p = 13 + (b[10] & 0x80 ? 3 * (2 << (b[10] & 7)) : 0);
  const blocks = (q: number): number => {
    while (q < b.length && b[q] !== 0) {
      lengths.push(q);
      q += b[q] + 1;
    }
    return q + 1;
  };
  while (p < b.length) {
    const kind = b[p];
    if (kind === 0x21) p = blocks(p + 2);
    else if (kind === 0x2c) {
      frames.push(p + 1);
      const flags = b[p + 9];
      p = blocks(p + 11 + (flags & 0x80 ? 3 * (2 << (flags & 7)) : 0));
    } else break;
  }
  return { frames, lengths };
}

/** Sizes a header may claim: none, one, the edges of 16 and 32 bits, and past the limit. */
function hugeDimension(rng: Rng, bits: 16 | 32): number {
  const choices = bits === 16 ? [0, 1, 2, 1023, 1024, 1025, 32767, 32768, 65535] : [0, 1, 1024, 1025, 65535, 65536, 1 << 20, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1];
  return rng.int(4) === 0 ? rng.int(bits === 16 ? 65536 : 2 ** 32) : choices[rng.int(choices.length)];
}

/** A length that lies: zero, off by one, doubled, the largest the field holds, past the file. */
function lyingLength(rng: Rng, was: number, fileLength: number, max: number): number {
  const choices = [0, 1, was - 1, was + 1, was * 2, Math.floor(was / 2), fileLength, fileLength + 1, max, max - 1, rng.int(max + 1)];
  return Math.max(0, Math.min(max, choices[rng.int(choices.length)]));
}

type Mutation = (b: Uint8Array, rng: Rng, label: string) => { bytes: Uint8Array; what: string };

const flips: Mutation = (b, rng) => {
  const what: string[] = [];
  for (let k = 1 + rng.int(6); k > 0; k--) {
    const at = rng.int(b.length);
    b[at] = rng.int(3) === 0 ? b[at] ^ (1 << rng.int(8)) : rng.int(256);
    what.push(`byte ${at} = ${b[at]}`);
  }
  return { bytes: b, what: what.join(', ') };
};

const truncation: Mutation = (b, rng) => {
  const n = rng.int(b.length);
  return { bytes: b.subarray(0, n), what: `cut to ${n} of ${b.length} bytes` };
};

const junk: Mutation = (b, rng) => {
  const at = rng.int(b.length + 1);
  const extra = new Uint8Array(1 + rng.int(rng.int(2) ? 16 : 4096));
  if (rng.int(2)) rng.fillBytes(extra);
  else extra.set(b.subarray(rng.int(b.length)).subarray(0, extra.length));
  return { bytes: concat(b.subarray(0, at), extra, b.subarray(at)), what: `${extra.length} bytes inserted at ${at}` };
};

const hugeSize: Mutation = (b, rng, label) => {
  if (label.startsWith('png')) {
    const [w, h] = [hugeDimension(rng, 32), hugeDimension(rng, 32)];
    putBe32(b, 16, w);
    putBe32(b, 20, h);
    // half the time with a matching CRC, so a decoder that checks it reads on
    if (rng.int(2)) putBe32(b, 29, crc32(b.subarray(12, 29)));
    return { bytes: b, what: `IHDR says ${w} x ${h}` };
  }
  if (label.startsWith('jpeg') || label.includes('jpeg')) {
    const sof = jpegSegments(b).find((s) => s.marker >= 0xc0 && s.marker <= 0xc2);
    const [w, h] = [hugeDimension(rng, 16), hugeDimension(rng, 16)];
    putBe16(b, sof!.at + 3, h);
    putBe16(b, sof!.at + 5, w);
    return { bytes: b, what: `SOF says ${w} x ${h}` };
  }
  if (label.startsWith('bmp')) {
    const [w, h] = [hugeDimension(rng, 32), hugeDimension(rng, 32)];
    putLe32(b, 18, w);
    putLe32(b, 22, h);
    return { bytes: b, what: `the info header says ${w | 0} x ${h | 0}` };
  }
  const { frames } = gifLayout(b);
  const [w, h] = [hugeDimension(rng, 16), hugeDimension(rng, 16)];
  if (rng.int(2) || frames.length === 0) {
    putLe16(b, 6, w);
    putLe16(b, 8, h);
    return { bytes: b, what: `the screen is ${w} x ${h}` };
  }
  const f = frames[rng.int(frames.length)];
  const at = f + (rng.int(2) ? 4 : 0);
  putLe16(b, at, w);
  putLe16(b, at + 2, h);
  return { bytes: b, what: `a frame's ${at === f ? 'position' : 'size'} is ${w}, ${h}` };
};

const lyingLengths: Mutation = (b, rng, label) => {
  if (label.startsWith('png')) {
    const chunks = pngChunks(b);
    const c = chunks[rng.int(chunks.length)];
    const v = lyingLength(rng, c.length, b.length, 2 ** 32 - 1);
    putBe32(b, c.at, v);
    return { bytes: b, what: `${c.type} says ${v} bytes (of ${c.length})` };
  }
  if (label.includes('jpeg')) {
    const segs = jpegSegments(b);
    const s = segs[rng.int(segs.length)];
    const v = lyingLength(rng, s.length, b.length, 0xffff);
    putBe16(b, s.at, v);
    return { bytes: b, what: `segment FF${s.marker.toString(16).toUpperCase()} says ${v} bytes (of ${s.length})` };
  }
  if (label.startsWith('bmp')) {
    // the file size, the pixel data offset, the info header size, the image size, the palette size
    const fields: [string, number][] = [['bfSize', 2], ['bfOffBits', 10], ['biSize', 14], ['biSizeImage', 34], ['biClrUsed', 46]];
    const [name, at] = fields[rng.int(fields.length)];
    const was = (b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (b[at + 3] << 24)) >>> 0;
    const v = lyingLength(rng, was, b.length, 2 ** 32 - 1);
    putLe32(b, at, v);
    return { bytes: b, what: `${name} is ${v} (was ${was})` };
  }
  const { lengths } = gifLayout(b);
  if (lengths.length === 0 || rng.int(4) === 0) {
    // the LZW minimum code size
    const { frames } = gifLayout(b);
    const at = frames.length ? frames[0] + 9 + (b[frames[0] + 8] & 0x80 ? 3 * (2 << (b[frames[0] + 8] & 7)) : 0) : 13;
    const v = rng.int(256);
    b[at] = v;
    return { bytes: b, what: `LZW code size ${v}` };
  }
  const at = lengths[rng.int(lengths.length)];
  const v = rng.int(256);
  const was = b[at];
  b[at] = v;
  return { bytes: b, what: `a sub-block says ${v} bytes (of ${was})` };
};

describe('fuzz: damaged images', () => {
  const dog = new Watchdog({ kind: 'image', memoryBytes: MEMORY_BOUND });
  after(() => dog.close());
  const all = specimens();

  async function campaign(seed: number, perSpecimen: number, mutate: Mutation): Promise<Tally> {
    const rng = new Rng(seed);
    const tally = new Tally();
    for (const [label, good] of all)
      for (let i = 0; i < perSpecimen; i++) {
        const { bytes, what } = mutate(Uint8Array.from(good), rng, label);
        tally.add(`${label}: ${what}`, await dog.run({ bytes, maxPixels: MAX_PIXELS }));
      }
    return tally;
  }

  it('every specimen decodes as it is', async () => {
    for (const [label, bytes] of all) assert.equal((await dog.run({ bytes, maxPixels: MAX_PIXELS })).outcome, 'ok', label);
  });

  for (const [name, seed, n, mutate] of [
    ['flipped bits and bytes', 11, 300, flips],
    ['truncations', 12, 60, truncation],
    ['huge, zero and odd dimensions in the headers', 13, 100, hugeSize],
    ['chunk, segment and block lengths that lie', 14, 150, lyingLengths],
    ['junk and repeated bytes inserted', 15, 60, junk],
  ] as const)
    it(name, async (t) => {
      const tally = await campaign(seed, n, mutate);
      t.diagnostic(String(tally));
      assert.deepEqual(tally.failures, [], String(tally));
      assert.ok(tally.count('error') > (all.length * n) / 4, `most are refused: ${tally}`);
    });
});
