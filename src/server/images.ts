import { createHash } from 'node:crypto';
import type { Model } from '../api/model.js';
import type { ImageRows } from '../model/media.js';
import { DEFAULT_MAX_IMAGE_BYTES } from '../image/decode.js';
import { rowsFor } from '../image/preprocess.js';
import type { ChatMessage, ContentPart } from '../chat/format.js';
import { WasteError } from '../util/errors.js';
import { DecoderThread } from './decode-thread.js';
import { ApiError } from './errors.js';
import type { TurnRequest } from './host.js';
import { fetchImage } from './image-fetch.js';
import { type DraftTurn, MAX_IMAGES, type RequestImage, draftImages, imageRefusal } from './image-parts.js';

export interface ImageOptions {
  /** Fetch http(s) image URLs (default false: only data: URLs and base64 sources are taken). */
  allowUrls?: boolean;
  /** Most bytes of one image, however it comes (default 20 MiB; at most the decoder's 64 MiB). */
  maxBytes?: number;
  /** Most pixels of one image, checked from its header before it is decoded (default 16 Mi: 4096 x 4096). */
  maxPixels?: number;
  /** How long fetching an image URL may take, redirects and body included (default 10 s). */
  fetchTimeoutMs?: number;
  /** Redirects an image URL may take (default 3). */
  maxRedirects?: number;
}

export const IMAGE_DEFAULTS = { allowUrls: false, maxBytes: 20 << 20, maxPixels: 16 << 20, fetchTimeoutMs: 10_000, maxRedirects: 3 } as const;

/** A decode that takes this long is a hostile image, or a machine far too busy to serve one. */
const DECODE_DEADLINE_MS = 60_000;

/** Encoded images kept by the digest of their bytes: a conversation sends its images with every turn. */
const KEPT = 16;

/** What counting a conversation needs of an image: the rows it will take. */
export type ImageCount = { width: number; height: number; count: number };

/**
 * The server's images: a request's image parts turned into what the model reads — the bytes
 * (base64, or fetched when allowed) decoded on a thread of their own, then through the vision
 * tower (Model.encodeImage, one pass at a time with the model's others) — or, to count a
 * conversation's tokens, into the rows each will take. Every fault in an image is the client's
 * 400 naming its part; nothing is decoded or fetched before every part has been checked.
 */
export class ServerImages {
  readonly opts: Required<ImageOptions>;
  /** Images put through the tower, and images whose encoding was kept from an earlier request. */
  encoded = 0;
  reused = 0;
  private readonly decoder = new DecoderThread(DECODE_DEADLINE_MS);
  private readonly kept = new Map<string, ImageRows>();

  constructor(
    private readonly model: Model,
    opts: ImageOptions = {},
  ) {
    this.opts = { ...IMAGE_DEFAULTS, ...opts };
    if (!(this.opts.maxBytes >= 1 && this.opts.maxBytes <= DEFAULT_MAX_IMAGE_BYTES)) throw new WasteError('E_ARG', `the largest image must be 1 to ${DEFAULT_MAX_IMAGE_BYTES} bytes (got ${this.opts.maxBytes})`);
    if (!(Number.isInteger(this.opts.maxPixels) && this.opts.maxPixels >= 1)) throw new WasteError('E_ARG', `the most pixels of an image must be a positive integer (got ${this.opts.maxPixels})`);
  }

  /** Images being decoded or waiting to be (a big one takes seconds, on a thread of its own). */
  get decoding(): number {
    return this.decoder.pending;
  }

  /** Whether the model takes images at all. */
  get accepted(): boolean {
    return this.model.vision !== undefined;
  }

  /** The turn with each image part as its rows from the tower. */
  async resolve(turn: DraftTurn, signal: AbortSignal): Promise<TurnRequest> {
    return this.fill(turn, (im) => this.rows(im, signal));
  }

  /** The turn with each image part as the rows it will take (decoded, not put through the tower): for counting its tokens. */
  async count(turn: DraftTurn, signal: AbortSignal): Promise<TurnRequest> {
    return this.fill(turn, (im) => this.size(im, signal));
  }

  private async fill(turn: DraftTurn, each: (im: RequestImage) => Promise<ImageCount>): Promise<TurnRequest> {
    const images = draftImages(turn);
    if (images.length) this.check(images);
    const done = new Map<RequestImage, ImageCount>();
    // one after another: the tower takes one at a time, and a fault stops the rest
    for (const im of images) done.set(im, await each(im));
    const messages: ChatMessage[] = turn.messages.map((m) => {
      if (!m.parts) return m as ChatMessage;
      const parts: ContentPart[] = m.parts.map((p) => (typeof p === 'string' ? p : { image: done.get(p)! }));
      return { ...m, parts };
    });
    return { ...turn, messages };
  }

  /** Every part the server would refuse without reading it, refused before any is read. */
  private check(images: RequestImage[]): void {
    const v = this.model.vision;
    if (!v) throw imageRefusal(images[0].where, 'this model takes no images (it has no vision tower, or the server was started with --no-vision)');
    if (images.length > MAX_IMAGES) throw imageRefusal(images[MAX_IMAGES].where, `a request may carry at most ${MAX_IMAGES} images`);
    const max = this.opts.maxBytes;
    for (const { source, where } of images) {
      if (source.kind === 'remote' && !this.opts.allowUrls) throw imageRefusal(where, 'this server does not fetch image URLs (send the image as a data: URL, or start the server with --allow-image-urls)');
      // four characters carry three bytes: a longer text is too large before it is decoded
      if (source.kind === 'inline' && source.base64.length > 4 * Math.ceil(max / 3) + 4) throw imageRefusal(where, `the image is more than the ${max} bytes this server takes`);
    }
  }

  private async bytes(im: RequestImage, signal: AbortSignal): Promise<Uint8Array> {
    const { source, where } = im;
    if (source.kind === 'remote') return fetchImage(source.url, { maxBytes: this.opts.maxBytes, timeoutMs: this.opts.fetchTimeoutMs, maxRedirects: this.opts.maxRedirects }, where, signal);
    const bytes = base64Bytes(source.base64, where);
    if (bytes.length > this.opts.maxBytes) throw imageRefusal(where, `the image is ${bytes.length} bytes, more than the ${this.opts.maxBytes} this server takes`);
    return bytes;
  }

  private async decode(bytes: Uint8Array, where: string) {
    try {
      return await this.decoder.decode(bytes, where, this.opts.maxPixels);
    } catch (e) {
      // the decoder names the part in its message
      if (e instanceof WasteError && e.code === 'E_IMAGE') throw new ApiError(400, e.message, 'invalid_request_error', 'invalid_image', where.replace(/\[\d+\]$/, ''));
      throw e;
    }
  }

  private async rows(im: RequestImage, signal: AbortSignal): Promise<ImageRows> {
    const bytes = await this.bytes(im, signal);
    const digest = createHash('sha256').update(bytes).digest('hex');
    const hit = this.kept.get(digest);
    if (hit) {
      this.kept.delete(digest);
      this.kept.set(digest, hit);
      this.reused++;
      return hit;
    }
    const pixels = await this.decode(bytes, im.where);
    gone(signal);
    let rows: ImageRows;
    try {
      rows = await this.model.encodeImage(pixels, { signal });
    } catch (e) {
      gone(signal);
      throw e;
    }
    this.encoded++;
    this.kept.set(digest, rows);
    for (const k of this.kept.keys()) {
      if (this.kept.size <= KEPT) break;
      this.kept.delete(k);
    }
    return rows;
  }

  private async size(im: RequestImage, signal: AbortSignal): Promise<ImageCount> {
    const bytes = await this.bytes(im, signal);
    const hit = this.kept.get(createHash('sha256').update(bytes).digest('hex'));
    if (hit) return hit;
    const { width, height } = await this.decode(bytes, im.where);
    // the count encodeImage's patches will have (route waste), without running the tower
    return { width, height, count: rowsFor(width, height, this.model.vision!, 'waste') };
  }

  close(): Promise<void> {
    this.kept.clear();
    return this.decoder.close();
  }
}

/** The client left: what follows is for no one. */
function gone(signal: AbortSignal): void {
  if (signal.aborted) throw new ApiError(499, 'the client went away while its images were read', 'invalid_request_error', 'client_closed');
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Standard base64, padded or not, line breaks allowed: Buffer.from alone skips what is not
 * base64, so a damaged text would decode to other bytes rather than be refused.
 */
export function base64Bytes(text: string, where: string): Uint8Array {
  const s = /\s/.test(text) ? text.replace(/\s+/g, '') : text;
  if (!s.length) throw imageRefusal(where, 'the image data is empty');
  if (!BASE64.test(s) || s.replace(/=+$/, '').length % 4 === 1 || (s.includes('=') && s.length % 4 !== 0)) throw imageRefusal(where, 'the image data is not base64');
  return Buffer.from(s, 'base64');
}
