import type { Container } from '../container/open.js';
import type { ModelConfig } from '../core/model-config.js';
import type { CacheStats, ExpertCache } from '../experts/cache.js';
import type { StreamFiles } from '../experts/io.js';
import type { LookaheadScore, StreamedExperts } from '../experts/streamed.js';
import { Chat, type ChatOptions, type ImageInput } from './chat.js';
import { type GenerationDefaults, readGenerationDefaults, readGenerationEos } from '../checkpoint/generation-config.js';
import type { Kernels } from '../kernels/types.js';
import type { MemoryBudget } from '../memory/budget.js';
import type { Architecture, Network, SequenceState, VisionSpec, VisionTower } from '../model/architecture.js';
import { type ImageRoute, type RgbImage, toPatches } from '../image/preprocess.js';
import { Arena } from '../memory/arena.js';
import { type ChatFormat, loadChatFormat } from '../chat/format.js';
import { noTokenizer } from '../tokenizer/load.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { WasteError } from '../util/errors.js';
import { type ModelParts, NO_CACHE, USAGE_FILE, assemble } from '../engine/assemble.js';
import { readImageSource } from '../engine/image-input.js';
import { type ImageRows, imageKey } from '../model/media.js';

/**
 * Encoded images kept by the bytes they came from (most recently used last), up to this many bytes
 * of rows (outside the budget: about 9 images of K3's at the default route, 1 at 4,096 rows).
 */
const IMAGE_CACHE_BYTES = 64 << 20;
import { modelIdentity } from '../engine/identity.js';
import type { OpenOptions } from '../engine/options.js';
import type { MemoryPlan } from '../engine/plan.js';
import type { CacheResize, ElasticCache } from '../engine/elastic-cache.js';
import { POLL_MS } from '../memory/pressure.js';
import { Session, type SessionHost } from './session.js';
import { StepBatcher } from '../engine/step-batcher.js';

export type { OpenOptions };
export { USAGE_FILE };

export interface SessionOptions {
  /** Longest sequence this session may hold (default and maximum: the model's). */
  maxContext?: number;
}

export interface ModelStats extends CacheStats {
  /** Demand hits ÷ demand requests. */
  hitRate: number;
  /** True when expert reads bypass the page cache. */
  direct: boolean;
  directNote?: string;
  budgetBytes: number;
  floorBytes: number;
  /** Bytes the engine has allocated (arenas), never above the budget. */
  allocatedBytes: number;
  /** The expert cache's arenas now, and what the elastic cache grows back to (equal under an explicit budget). */
  cacheBytes: number;
  cacheMaxBytes: number;
  /** The elastic cache's recent resizes, oldest first (empty under an explicit budget). */
  resizes: CacheResize[];
  lookahead: number;
  /** How many MoE layers ahead decode prefetches. */
  lookaheadLayers: number;
  /** Lookahead guesses (all depths) and how many the layer then asked for. */
  lookaheadPredicted: number;
  lookaheadCorrect: number;
  /** The same per depth (index 0: one layer ahead), with the experts asked for where a guess was made. */
  lookaheadByDepth: LookaheadScore[];
}

/**
 * An open model: the trunk resident in arenas, the experts streamed from disk into a budgeted
 * cache (a container), or every weight in f32 (a HuggingFace checkpoint, the reference).
 */
export class Model implements SessionHost {
  /** The model directory (a container, or a HuggingFace checkpoint). */
  readonly dir: string;
  /** The container (absent when the model was opened from a HuggingFace checkpoint). */
  readonly container: Container | undefined;
  /** Where the weights came from: a container, or a checkpoint (the unquantized reference). */
  readonly kind: 'container' | 'checkpoint';
  readonly config: ModelConfig;
  /** The architecture that runs it. */
  readonly arch: Architecture;
  readonly kernels: Kernels;
  readonly threads: number;
  readonly plan: MemoryPlan;
  readonly budget: MemoryBudget;
  readonly cache: ExpertCache | undefined;
  /** The default budget's cache that gives memory back under pressure (absent under an explicit budget). */
  readonly elastic: ElasticCache | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private pollQueued = false;
  private learnTimer: NodeJS.Timeout | undefined;
  private learnQueued = false;
  /** @internal the forward pass (sessions run through it). */
  readonly net: Network;
  private readonly store: StreamedExperts | undefined;
  private readonly files: StreamFiles | undefined;
  private readonly usageFile: string | undefined;
  private readonly freeStates: SequenceState[];
  private readonly release_: () => Promise<void>;
  private closed = false;
  private readonly tok: Tokenizer | null;
  private chatFmt: ChatFormat | undefined;
  private genDefaults: GenerationDefaults | undefined;
  private stops: number[] | undefined;
  private digest: Uint8Array | undefined;
  private running: Promise<unknown> = Promise.resolve();
  private readonly visionParts: ModelParts['vision'];
  private tower: VisionTower | undefined;
  private towerError: unknown;
  private readonly imageCache = new Map<string, ImageRows>();
  private readonly batcher: StepBatcher;

  private constructor(p: ModelParts) {
    this.dir = p.dir;
    this.container = p.container;
    this.kind = p.kind;
    this.config = p.config;
    this.arch = p.arch;
    this.net = p.net;
    this.kernels = p.kernels;
    this.threads = p.threads;
    this.plan = p.plan;
    this.budget = p.budget;
    this.cache = p.cache;
    this.elastic = p.elastic;
    this.store = p.store;
    this.files = p.files;
    this.usageFile = p.usageFile;
    this.freeStates = p.states;
    this.release_ = p.close;
    this.visionParts = p.vision;
    this.tok = p.text.tokenizer;
    this.chatFmt = p.text.format;
    if (this.elastic) {
      // an idle model still gives memory back when the machine needs it (unref'd: keeps no process alive)
      this.pollTimer = setInterval(() => {
        if (this.pollQueued || this.closed) return;
        this.pollQueued = true;
        void this.exclusive(async () => undefined);
      }, POLL_MS);
      this.pollTimer.unref();
    }
    const learn = p.learn;
    if (learn && learn.everyMs > 0) {
      // a process that is killed keeps what it learned up to the last save (unref'd: keeps no process alive)
      this.learnTimer = setInterval(() => {
        if (this.learnQueued || this.closed) return;
        this.learnQueued = true;
        // between forward passes, where no slot is changing
        void this.exclusive(async () => {
          this.learnQueued = false;
          // a file that cannot be written was reported once; close() tries once more
          if (!this.closed && !learn.save()) clearInterval(this.learnTimer);
        });
      }, learn.everyMs);
      this.learnTimer.unref();
    }
    this.batcher = new StepBatcher(p.net, (fn) => this.exclusive(fn), p.net.chunk);
  }

  /** The model's image preprocessing and placeholder, when it takes images (a vision tower, and room for it). */
  get vision(): VisionSpec | undefined {
    return this.visionParts?.spec;
  }

  /** Whether the vision tower is in memory (it loads with the first image). */
  get visionLoaded(): boolean {
    return this.tower !== undefined;
  }

  /**
   * An image as the model reads it (a file's path, its bytes, or decoded pixels): decoded, cut into patches (`route` \`waste\`, the C
   * engine's, by default; \`native\`, the release processor's), through the vision tower (loaded into
   * the room the budget reserved for it on first use), to rows of the language model's width. One
   * encoding or forward pass runs at a time; the event loop gets turns between the tower's blocks.
   */
  async encodeImage(image: string | Uint8Array | RgbImage, opts: { route?: ImageRoute; signal?: AbortSignal } = {}): Promise<ImageRows> {
    if (this.closed) throw new WasteError('E_STATE', 'the model has been closed');
    const v = this.visionParts;
    if (!v) throw new WasteError('E_UNSUPPORTED', `this model takes no images (${this.arch.vision ? 'it has no vision tower, or it was opened with vision off' : (this.arch.visionRefusal ?? `${this.arch.id} has no vision tower`)})`);
    const route = opts.route ?? 'waste';
    // a conversation sends its images again with every turn: the same bytes are encoded once
    const source = typeof image === 'string' || image instanceof Uint8Array ? readImageSource(image) : undefined;
    const cacheKey = source ? `${route}:${source.digest}` : undefined;
    const hit = cacheKey ? this.imageCache.get(cacheKey) : undefined;
    if (hit) {
      this.imageCache.delete(cacheKey!);
      this.imageCache.set(cacheKey!, hit);
      return hit;
    }
    const pixels = source ? source.decode() : (image as RgbImage);
    const patches = toPatches(pixels, v.spec, route);
    const rows = await this.exclusive(async () => {
      opts.signal?.throwIfAborted();
      return (await this.loadTower(v)).encode(patches, opts.signal);
    });
    const out: ImageRows = { rows, count: patches.rows, gh: patches.gh, gw: patches.gw, width: pixels.width, height: pixels.height, key: `${this.identityHex()}:${imageKey(patches)}` };
    if (cacheKey) {
      this.imageCache.set(cacheKey, out);
      let bytes = 0;
      for (const r of this.imageCache.values()) bytes += r.rows.byteLength;
      for (const k of this.imageCache.keys()) {
        if (bytes <= IMAGE_CACHE_BYTES || this.imageCache.size <= 1) break;
        bytes -= this.imageCache.get(k)!.rows.byteLength;
        this.imageCache.delete(k);
      }
    }
    return out;
  }

  /** The tower, loaded into its reserved room by the first image; a load that failed fails the same way again. */
  private async loadTower(v: NonNullable<ModelParts['vision']>): Promise<VisionTower> {
    if (this.tower) return this.tower;
    if (this.towerError) throw this.towerError;
    try {
      this.tower = await this.arch.vision!.load(v.source, v.spec, this.kernels, new Arena(v.bytes, v.budget ?? this.budget));
      return this.tower;
    } catch (e) {
      // its arena stays charged to the reserved room, which holds only one
      this.towerError = e;
      throw e;
    }
  }

  private identityHex(): string {
    return Buffer.from(this.identity()).toString('hex').slice(0, 16);
  }

  /**
   * Open a model: `demo` (the demo model that ships with the package), a WASTE container directory,
   * or a HuggingFace checkpoint directory (config.json and safetensors): then every weight is
   * loaded as f32 and the experts are dense — the unquantized reference that quality is measured
   * against.
   */
  static async open(model: string, opts: OpenOptions = {}): Promise<Model> {
    return new Model(await assemble(model, opts));
  }

  /** A new sequence (reusing the state of a closed session when one fits). */
  newSession(opts: SessionOptions = {}): Session {
    if (this.closed) throw new WasteError('E_STATE', 'the model has been closed');
    const ctx = opts.maxContext ?? this.net.maxContext;
    if (!(Number.isInteger(ctx) && ctx >= 1)) throw new WasteError('E_ARG', `a session's context (maxContext) must be a positive integer (got ${String(ctx)})`);
    const i = this.freeStates.findIndex((s) => s.maxContext >= ctx);
    let state: SequenceState;
    if (i >= 0) state = this.freeStates.splice(i, 1)[0];
    else {
      try {
        state = this.net.newState(ctx);
      } catch (e) {
        if (e instanceof WasteError && e.code === 'E_STATE' && /RAM budget/.test(e.message))
          throw new WasteError('E_STATE', `no memory for another session (${e.message}): close a session first, or open the model with { sessions: N } to reserve room for N at once`);
        throw e;
      }
    }
    state.reset();
    state.limit = ctx;
    return new Session(this, state);
  }

  /** A new sequence for raw continuation (the same as newSession). */
  session(opts: SessionOptions = {}): Session {
    return this.newSession(opts);
  }

  /** A conversation in the model's chat format, on a session of its own. */
  chat(opts: ChatOptions = {}): Chat {
    const v = this.vision;
    const media = v ? { token: v.mediaToken, encode: (im: ImageInput, signal?: AbortSignal) => (isRows(im) ? Promise.resolve(im) : this.encodeImage(im, { signal, route: opts.imageRoute })) } : undefined;
    return new Chat(this.newSession(opts), this.tokenizer(), opts.format ?? this.chatFormat(), this.stopIds(), opts, media);
  }

  /** @internal */
  release(state: SequenceState): void {
    this.freeStates.push(state);
  }

  /** @internal one forward pass at a time, in the order asked: every session computes in the same scratch. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.running.then(() => {
      // between forward passes is the elastic cache's safe point: no slot is pinned
      this.pollQueued = false;
      try {
        this.elastic?.poll();
      } catch (e) {
        // a resize that failed leaves the cache as it was; the forward pass goes on
        process.emitWarning(`the expert cache could not be resized: ${(e as Error).message}`, 'WasteWarning');
      }
      return fn();
    });
    this.running = run.catch(() => undefined);
    return run;
  }

  /** @internal the next batched forward pass: every session's tokens waiting then run together. */
  step(state: SequenceState, ids: readonly number[], allLogits: boolean, check: () => void): Promise<Float32Array> {
    return this.batcher.run(state, ids, allLogits, check);
  }

  /** The model's tokenizer (read at open); a clear error when the directory has none. */
  tokenizer(): Tokenizer {
    if (!this.tok) throw noTokenizer(this.dir);
    return this.tok;
  }

  /** The chat format: K3's XTML for a K3 model, else chat.json, the Jinja chat template, or Kimi's default (see loadChatFormat). */
  chatFormat(): ChatFormat {
    return (this.chatFmt ??= loadChatFormat(this.dir, { native: this.arch.chatFormat }));
  }

  /** The sampling settings of the model's generation_config.json (empty when it has none); explicit options win. */
  generationDefaults(): GenerationDefaults {
    return (this.genDefaults ??= readGenerationDefaults(this.dir));
  }

  /**
   * The ids that end a reply: config.json's end-of-sequence ids and those generation_config.json
   * adds (as HuggingFace's generate takes both), each within the vocabulary.
   */
  stopIds(): number[] {
    return (this.stops ??= [...new Set([...this.config.eosTokenIds, ...readGenerationEos(this.dir).filter((id) => id < this.config.vocab)])]);
  }

  /** Text to ids: plain mode (control-token strings are ordinary text) unless `markup`. */
  tokenize(text: string, opts: { markup?: boolean } = {}): number[] {
    return this.tokenizer().encode(text, opts);
  }

  detokenize(ids: ArrayLike<number>): string {
    return this.tokenizer().decode(ids);
  }

  /** @internal a digest of what the weights are: a saved session loads only into the model it came from. */
  identity(): Uint8Array {
    return (this.digest ??= modelIdentity(this.dir, this.kind));
  }

  /** Start adding up wall time per phase ("kda", "mla", "moe", "dense", "head", in ms); returns the tally. */
  profile(): Record<string, number> {
    return (this.net.profile = {});
  }

  /** Replace the router's choices with a recorded trace (benchmarks only: the output is meaningless): ids for MoE layer L, row `row` of the chunk in flight. */
  setRouteOverride(fn: ((layer: number, row: number) => number[] | undefined) | undefined): void {
    this.net.routeOverride = fn;
  }

  /** Watch the router: for each MoE layer, the experts chosen for each token ([T][topK]); the view is only valid during the call. */
  observeRoutes(fn: ((layer: number, route: Int32Array, T: number) => void) | undefined): void {
    this.net.routeObserver = fn;
  }

  /** The memories holding the trunk, scratch, session state and expert cache. */
  get arenas(): readonly Arena[] {
    return this.net.arenas;
  }

  stats(): ModelStats {
    const c = this.cache?.stats ?? NO_CACHE;
    const demand = c.hits + c.misses;
    return {
      ...c,
      hitRate: demand ? c.hits / demand : 0,
      direct: this.files?.direct ?? false,
      directNote: this.files?.note,
      budgetBytes: this.budget.limit,
      floorBytes: this.plan.floorBytes,
      allocatedBytes: this.budget.used,
      cacheBytes: this.elastic?.bytes ?? c.slots * (this.cache?.stride ?? 0),
      cacheMaxBytes: this.elastic?.maxBytes ?? c.slots * (this.cache?.stride ?? 0),
      resizes: this.elastic ? [...this.elastic.resizes] : [],
      lookahead: this.store?.lookahead ?? 0,
      lookaheadPredicted: this.store?.lookaheadStats.predicted ?? 0,
      lookaheadCorrect: this.store?.lookaheadStats.correct ?? 0,
      lookaheadLayers: this.store?.lookaheadLayers ?? 0,
      lookaheadByDepth: (this.store?.lookaheadByDepth ?? []).map((d) => ({ ...d })),
    };
  }

  /**
   * Write the experts the cache holds now, merged with those the hotlist listed before this run
   * first saved it (or lists now, if another process has written it since), to the container's
   * usage.waste (or the open option `usageFile`, or `file`), atomically, for a warm next open;
   * returns how many experts it lists. Throws when the file cannot be written (the open option
   * `learn` does this at close() and every `learnEvery` seconds, and only warns).
   */
  saveUsage(file?: string): number {
    if (!this.cache || !this.usageFile) return 0;
    return this.cache.saveUsage(file ?? this.usageFile);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.learnTimer) clearInterval(this.learnTimer);
    // after the last forward pass asked for (a session still generating finishes its step first)
    await this.batcher.close();
    await this.running;
    await this.release_();
  }
}

function isRows(im: ImageInput): im is ImageRows {
  return typeof im === 'object' && !(im instanceof Uint8Array) && (im as { rows?: unknown }).rows instanceof Float32Array;
}
