import { createHash } from 'node:crypto';
import type { Patches } from '../image/preprocess.js';
import type { MediaRows } from './architecture.js';
import { WasteError } from '../util/errors.js';

/** An image as the language model reads it: its rows, each taking the place of one `<|media_pad|>`. */
export interface ImageRows {
  /** [count][hidden] */
  rows: Float32Array;
  count: number;
  /** The patch grid the image was cut into, and its size before that. */
  gh: number;
  gw: number;
  width: number;
  height: number;
  /** What the rows were made from (a digest of the patches): a session reuses a prefix only where the same image sits. */
  key: string;
}

export function imageKey(p: Patches): string {
  const h = createHash('sha256');
  h.update(`${p.gh}x${p.gw}:`);
  h.update(new Uint8Array(p.pixels.buffer, p.pixels.byteOffset, p.pixels.byteLength));
  return h.digest('hex').slice(0, 32);
}

/** How many of `ids` are the placeholder. */
export function countPads(ids: ArrayLike<number>, token: number): number {
  let n = 0;
  for (let i = 0; i < ids.length; i++) if (ids[i] === token) n++;
  return n;
}

/**
 * Each placeholder in `ids` repeated once per row of its image (images in order): a prompt as a
 * renderer writes it (one `<|media_pad|>` per image) to the positions the model runs. The number
 * of placeholders must be the number of images.
 */
export function expandPads(ids: readonly number[], token: number, images: readonly Pick<ImageRows, 'count'>[]): number[] {
  const pads = countPads(ids, token);
  if (pads !== images.length) throw new WasteError('E_ARG', `the prompt has ${pads} image placeholder${pads === 1 ? '' : 's'} (<|media_pad|>, id ${token}) for ${images.length} image${images.length === 1 ? '' : 's'}`);
  const out: number[] = [];
  let k = 0;
  for (const id of ids) {
    if (id !== token) out.push(id);
    else for (let r = images[k++].count; r > 0; r--) out.push(id);
  }
  return out;
}

/** The rows of `images` queued for the placeholders of an already expanded prompt, checked against their count. */
export function mediaRows(ids: ArrayLike<number>, token: number, images: readonly ImageRows[], hidden: number): MediaRows {
  images.forEach((im, i) => {
    if (!(im?.rows instanceof Float32Array) || !(Number.isInteger(im.count) && im.count >= 1) || im.rows.length !== im.count * hidden)
      throw new WasteError('E_ARG', `image ${i + 1} is not ${hidden}-wide rows of this model (encode it with this model's encodeImage)`);
  });
  const count = images.reduce((s, im) => s + im.count, 0);
  const pads = countPads(ids, token);
  if (pads !== count)
    throw new WasteError('E_ARG', `the prompt has ${pads} image position${pads === 1 ? '' : 's'} (<|media_pad|>, id ${token}) for ${count} image row${count === 1 ? '' : 's'}: each image's placeholder must be repeated once per row (${images.map((i) => i.count).join(' + ')})`);
  const rows = images.length === 1 ? images[0].rows : new Float32Array(count * hidden);
  if (images.length > 1) {
    let at = 0;
    for (const im of images) {
      rows.set(im.rows, at);
      at += im.rows.length;
    }
  }
  return { token, rows, count, next: 0 };
}

/** The image key at each placeholder position of an expanded prompt (undefined elsewhere). */
export function keysAt(ids: ArrayLike<number>, token: number, images: readonly ImageRows[]): (string | undefined)[] {
  const keys: (string | undefined)[] = new Array(ids.length);
  let img = 0;
  let left = images[0]?.count ?? 0;
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] !== token || img >= images.length) continue;
    keys[i] = images[img].key;
    if (--left === 0) left = images[++img]?.count ?? 0;
  }
  return keys;
}

/** Where each image's rows sit in an expanded prompt: the positions of its first and last placeholder. */
export function imageSpans(ids: ArrayLike<number>, token: number, images: readonly ImageRows[]): { first: number; last: number }[] {
  const spans: { first: number; last: number }[] = [];
  let img = 0;
  let seen = 0;
  for (let i = 0; i < ids.length && img < images.length; i++) {
    if (ids[i] !== token) continue;
    if (seen === 0) spans.push({ first: i, last: i });
    spans[img].last = i;
    if (++seen === images[img].count) {
      img++;
      seen = 0;
    }
  }
  return spans;
}

/** A prompt's images being fed piece by piece: the rows, the image at each position, how far it has got. */
export interface ImageFeed {
  media: MediaRows;
  keys: (string | undefined)[];
  at: number;
}
