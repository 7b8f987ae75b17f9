import { writeFileAtomic } from '../util/write-atomic.js';
import type { GenerationDefaults } from '../checkpoint/generation-config.js';
import { withDefaults } from '../generate/defaults.js';
import { type GenerateOptions, type GeneratedToken, type GenerationResult, generateTokens } from '../generate/generate.js';
import type { ModelConfig } from '../core/model-config.js';
import type { MediaRows, Network, SequenceState, VisionSpec } from '../model/architecture.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { WasteError } from '../util/errors.js';
import { readBytes } from '../util/read.js';
import { yieldToLoop } from '../util/yield-to-loop.js';
import { type ImageFeed, type ImageRows, imageSpans, keysAt, mediaRows } from '../model/media.js';
import { markStateLost, STATE_LOST } from '../engine/step-batcher.js';

/** What a session needs from its model (kept narrow so the model can hand it out). */
export interface SessionHost {
  readonly net: Network;
  readonly config: ModelConfig;
  /** The model's tokenizer; throws a clear error when it has none. */
  tokenizer(): Tokenizer;
  /** Sampling settings the model recommends (generation_config.json); options given explicitly win. */
  generationDefaults(): GenerationDefaults;
  /** The ids that end a reply (config.json's and generation_config.json's end-of-sequence ids). */
  stopIds(): number[];
  /** A digest of the model's weights and shapes: a saved session loads only into the same model. */
  identity(): Uint8Array;
  release(state: SequenceState): void;
  /** Run one forward pass at a time: sessions share the model's scratch memory. */
  exclusive<T>(fn: () => Promise<T>): Promise<T>;
  /**
   * Run `ids` on `state` in the model's next batched pass (with every other session's tokens
   * waiting then); `check` throws when the session may no longer run.
   */
  step(state: SequenceState, ids: readonly number[], allLogits: boolean, check: () => void): Promise<Float32Array>;
  /** The model's images, when it can take them. */
  readonly vision: VisionSpec | undefined;
}

/** The image at a placeholder of a loaded session: unknown, so equal to none. */
const UNKNOWN_IMAGE = '\u0000unknown image';


export interface ForwardOpts {
  /** The logits of every position, row after row, instead of only the last. */
  allLogits?: boolean;
  /**
   * Images for the placeholders in `ids` (Model.encodeImage), in order: each placeholder position
   * takes the next row, so each image's placeholder must be repeated once per row of it
   * (`expandPads` does that to a prompt with one placeholder per image).
   */
  images?: readonly ImageRows[];
}

export interface SessionGenerateOptions extends GenerateOptions {
  /** Parse control-token strings in a text prompt (default: plain text, where they are ordinary text). */
  markup?: boolean;
}

/** A session as it was at one point (Session.snapshot), to be put back into one of the same model. */
export interface SessionSnapshot {
  readonly data: Uint8Array;
  readonly media: readonly (string | undefined)[];
}

/**
 * One sequence: its recurrent state, latent cache, position and the tokens it has consumed. Feed it
 * ids (`forward`) or let it continue text (`generate`); save it to a file and load it back to
 * continue exactly where it stopped.
 */
export class Session {
  private released = false;
  private tokens: number[] = [];
  /** The image at each position that took an image row (sparse; the same length as tokens). */
  private media: (string | undefined)[] = [];
  private last: Float32Array | undefined;
  /** Why the state cannot be continued from (a forward pass failed part-way), until reset() or load(). */
  private lost: string | undefined;

  constructor(
    private readonly host: SessionHost,
    private readonly state: SequenceState,
  ) {}

  /** Tokens consumed so far. */
  get position(): number {
    return this.state.pos;
  }

  /** Positions this session may hold. */
  get limit(): number {
    return this.state.limit;
  }

  /** Every token consumed, in order. */
  get history(): readonly number[] {
    return this.tokens;
  }

  /** The logits after the last token consumed (undefined before the first). */
  get lastLogits(): Float32Array | undefined {
    return this.last;
  }

  /**
   * Feed tokens and return the logits after the last one (`vocab_size` floats), or after every
   * one (row after row) with `allLogits`. Works for a prompt (prefill) and for one token (decode).
   * A long input runs a prefill chunk at a time (the same arithmetic as all at once), and the event
   * loop gets a turn between chunks, so timers, signals and sockets are served meanwhile.
   */
  async forward(ids: ArrayLike<number>, opts: ForwardOpts = {}): Promise<Float32Array> {
    this.check(ids);
    return this.pieces(ids, opts.allLogits ?? false, opts.images?.length ? this.imageFeed(ids, opts.images) : undefined);
  }

  /** All or nothing: a fault found in a later chunk must not leave the earlier ones consumed. */
  private check(ids: ArrayLike<number>): void {
    if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
    if (this.lost !== undefined) throw new WasteError('E_STATE', `the session's state was lost when a forward pass failed (${this.lost}); reset() it or load() a saved one`);
    const V = this.host.config.vocab;
    if (ids.length === 0) throw new WasteError('E_ARG', 'no tokens to run');
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new WasteError('E_ARG', `token id ${id} is outside the vocabulary (0..${V - 1})`);
    }
    if (this.state.pos + ids.length > this.state.limit)
      throw new WasteError('E_STATE', `context is full: ${this.state.pos + ids.length} tokens would exceed the context length of ${this.state.limit}`);
  }

  /**
   * The images of a prompt `ids` (placeholders expanded) queued for feeding it in pieces
   * (`feed(piece, images)`), their count checked against the placeholders.
   */
  imageFeed(ids: ArrayLike<number>, images: readonly ImageRows[]): ImageFeed {
    const v = this.host.vision;
    if (!v) throw new WasteError('E_UNSUPPORTED', 'this model takes no images (it has no vision tower, or it was opened with vision off)');
    return { media: mediaRows(ids, v.mediaToken, images, this.host.config.hidden), keys: keysAt(ids, v.mediaToken, images), at: 0 };
  }

  private async pieces(ids: ArrayLike<number>, allLogits: boolean, images: ImageFeed | undefined): Promise<Float32Array> {
    const V = this.host.config.vocab;
    const piece = Math.max(1, this.prefillChunk);
    const all = allLogits && ids.length > piece ? new Float32Array(ids.length * V) : undefined;
    let logits: Float32Array = new Float32Array(0);
    for (let i = 0; i < ids.length; i += piece) {
      if (i > 0) {
        await yieldToLoop();
        if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
      }
      const n = Math.min(piece, ids.length - i);
      const keys = images?.keys.slice(images.at, images.at + n);
      logits = await this.run(Array.from({ length: n }, (_, j) => ids[i + j]), allLogits, images?.media, keys);
      if (images) images.at += n;
      all?.set(logits, i * V);
    }
    return all ?? logits;
  }

  private async run(ids: number[], allLogits: boolean, media: MediaRows | undefined, keys: (string | undefined)[] | undefined): Promise<Float32Array> {
    // checked when its turn comes: a session closed while it waited has given its state away
    const open = () => {
      if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
    };
    // a prompt with images runs alone, as it always did; everything else joins the model's batched passes
    let logits: Float32Array;
    try {
      logits = media
        ? await this.host.exclusive(() => {
            open();
            return this.host.net.forward(this.state, ids, { allLogits, media }).catch((e) => Promise.reject(markStateLost(e)));
          })
        : await this.host.step(this.state, ids, allLogits, open);
    } catch (e) {
      // a pass that failed part-way (a read error, a bad record) left this sequence's state between
      // layers: refuse to continue from it rather than give silently wrong logits
      if (e !== null && typeof e === 'object' && (e as { [STATE_LOST]?: boolean })[STATE_LOST]) this.lost = (e as Error).message ?? String(e);
      throw e;
    }
    for (let i = 0; i < ids.length; i++) {
      this.tokens.push(ids[i]);
      this.media.push(keys?.[i]);
    }
    const V = this.host.config.vocab;
    this.last = allLogits ? logits.slice(logits.length - V) : logits;
    return logits;
  }

  /** Tokens the model runs together in prefill. */
  get prefillChunk(): number {
    return this.host.net.chunk;
  }

  /** The generation loop's view: feed ids (a piece of a prompt whose images `images` holds), get the last logits. */
  async feed(ids: number[], images?: ImageFeed): Promise<Float32Array> {
    if (!images) return this.forward(ids);
    this.check(ids);
    return this.pieces(ids, false, images);
  }

  /**
   * Continue the sequence: `prompt` (text, tokenized in plain mode unless `markup`, or ids) is fed,
   * then tokens are sampled until an end-of-sequence id, a stop string, `maxTokens`, the end of the
   * context or the signal. Yields each token with the text it completes; returns the whole reply.
   */
  generate(prompt: string | number[], opts: SessionGenerateOptions = {}): AsyncGenerator<GeneratedToken, GenerationResult> {
    const tok = this.host.tokenizer();
    const ids = typeof prompt === 'string' ? tok.encode(prompt, { markup: opts.markup }) : prompt;
    return generateTokens(this, ids, withDefaults(this.host.generationDefaults(), opts), tok.decoder(), this.host.stopIds());
  }

  /**
   * Pick up a sequence where this session left off: when its history is a prefix of `ids` with at
   * least `minNew` tokens after it, those tokens are what is left to feed; otherwise the session is
   * reset first (`reset: true`) and all of `ids` is. With `images` (those of `ids`, placeholders
   * expanded), the prefix must hold the same images, and `images` comes back as those still to feed.
   */
  resume(ids: readonly number[], minNew = 0, images: readonly ImageRows[] = []): { fresh: number[]; reset: boolean; images: ImageRows[] } {
    if (this.continues(ids, minNew, images))
      return { fresh: ids.slice(this.tokens.length), reset: false, images: images.slice(this.imagesWithin(this.tokens.length, ids, images)) };
    this.reset();
    return { fresh: [...ids], reset: true, images: [...images] };
  }

  /**
   * Whether this session's history is a prefix of `ids` with at least `minNew` tokens after it —
   * the same images included, where `images` are those of `ids` (placeholders expanded).
   */
  continues(ids: readonly number[], minNew = 0, images?: readonly ImageRows[]): boolean {
    const h = this.tokens;
    let keep = h.length + minNew <= ids.length;
    for (let i = 0; keep && i < h.length; i++) keep = h[i] === ids[i];
    if (!keep) return false;
    const token = this.host.vision?.mediaToken;
    const want = images?.length && token !== undefined ? keysAt(ids, token, images) : [];
    for (let i = 0; i < h.length; i++) if (this.media[i] !== want[i]) return false;
    // an image must be fed whole: one cut by the end of the history cannot continue
    if (token === undefined || !images?.length) return true;
    return imageSpans(ids, token, images).every((s) => !(s.first < h.length && s.last >= h.length));
  }

  /** How many of `images` lie wholly within the first n positions of `ids` (those a resumed session has already fed). */
  private imagesWithin(n: number, ids: readonly number[], images?: readonly ImageRows[]): number {
    const token = this.host.vision?.mediaToken;
    if (!images?.length || token === undefined) return 0;
    return imageSpans(ids, token, images).filter((s) => s.last < n).length;
  }

  reset(): void {
    this.state.reset();
    this.lost = undefined;
    this.tokens = [];
    this.media = [];
    this.last = undefined;
  }

  /**
   * Save the state and history to `file` (atomically: an old file is replaced only by a whole new
   * one), with `data` of the caller's own (a chat saves its messages there).
   */
  save(file: string, data: unknown = null): void {
    if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
    const meta = new TextEncoder().encode(JSON.stringify(data));
    writeFileAtomic(file, this.host.net.encodeState(this.state, this.tokens, this.last, meta, this.host.identity()));
  }

  /**
   * Load a saved session into this one. The file is checked first (its format, the model that
   * saved it, every size, its checksum); on any fault this session is left as it was. Returns the
   * data saved with it.
   */
  load(file: string, check: (data: unknown) => void = () => {}): unknown {
    if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
    const data = readBytes(file, this.host.net.maxStateBytes(this.state.limit));
    let saved: unknown;
    const { history, logits } = this.host.net.decodeState(this.state, data, this.host.identity(), file, (meta) => {
      try {
        saved = JSON.parse(new TextDecoder().decode(meta));
      } catch {
        throw new WasteError('E_FORMAT', `${file}: its session data is not JSON`);
      }
      check(saved);
    });
    this.tokens = history;
    this.lost = undefined;
    // a saved session keeps no images: a position that may have held one matches no image and no placeholder
    const token = this.host.vision?.mediaToken;
    this.media = history.map((id) => (id === token ? UNKNOWN_IMAGE : undefined));
    this.last = logits;
    return saved;
  }

  /**
   * The session as it is now — state, history, the last logits — to put back with restore(),
   * into this session or another of the same model: a save and a load without the file, so one
   * prompt prefilled once can start several replies.
   */
  snapshot(): SessionSnapshot {
    if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
    if (this.lost !== undefined) throw new WasteError('E_STATE', `the session's state was lost when a forward pass failed (${this.lost})`);
    return { data: this.host.net.encodeState(this.state, this.tokens, this.last, new Uint8Array(0), this.host.identity()), media: [...this.media] };
  }

  /** Put back a snapshot of this model's sessions (checked as a load is: on a fault this session is left as it was). */
  restore(snapshot: SessionSnapshot): void {
    if (this.released) throw new WasteError('E_STATE', 'the session has been closed');
    const { history, logits } = this.host.net.decodeState(this.state, snapshot.data, this.host.identity(), 'a session snapshot', () => {});
    this.tokens = history;
    this.media = [...snapshot.media];
    this.last = logits;
    this.lost = undefined;
  }

  /** Give the session's memory back to the model for reuse. */
  close(): void {
    if (this.released) return;
    this.released = true;
    this.host.release(this.state);
  }
}
