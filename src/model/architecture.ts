import type { StackedExperts } from '../checkpoint/stacked.js';
import type { ExpertQuant, RecordLayout } from '../container/format.js';
import type { ExpertStore } from '../core/expert-store.js';
import type { ModelConfig } from '../core/model-config.js';
import type { Kernels } from '../kernels/types.js';
import type { Arena } from '../memory/arena.js';
import type { ImageSpec, Patches } from '../image/preprocess.js';
import type { Fields } from '../util/fields.js';
import type { KnownRelease } from './release.js';
import type { FamilySynth } from './synth.js';
import type { NativeChatFormat } from '../chat/format.js';
import type { WeightSource } from './sources/source.js';

/**
 * What an architecture provides, and all that the memory plan, the engine and a session know of
 * it: its config, how its trunk binds to tensors, how big its state and scratch are, and a forward
 * pass. Each architecture is one folder under `src/model/` exporting one of these.
 */
export interface Architecture<C extends ModelConfig = ModelConfig> {
  /** `kimi-linear`, `kimi-k3`. */
  readonly id: string;
  /** Whether `cfg` (a manifest's `config`, or a checkpoint's config.json) is one of this architecture's. */
  claims(cfg: Fields): boolean;
  /** Read and bound every hyper-parameter; refuse what this build does not compute, by name. */
  parseConfig(cfg: Fields): C;
  countParams(cfg: C): { total: number; active: number };
  /**
   * Check every trunk tensor against the shapes the config implies (before anything is read) and
   * return the resident bytes of each group: one per layer, then the head.
   */
  planWeights(src: WeightSource, cfg: C, q: ExpertQuant | undefined): number[];
  /** Bytes one session's state takes in each layer's arena, for `maxContext` positions. */
  stateBytes(cfg: C, maxContext: number): number[];
  /** Bytes of working memory an arena of trunk layers, or of expert-cache slots, needs for chunks of `chunk` tokens. */
  scratchBytes(cfg: C, chunk: number, maxContext: number, q: ExpertQuant | undefined, role: ArenaRole): number;
  /** The widest input of any product (the kernels stage activations that wide). */
  widestInput(cfg: C): number;
  /** Load the trunk into the arenas and make the forward pass. */
  build(p: BuildParams<C>): Network;
  /** The chat format its release speaks without a template (K3: XTML). */
  readonly chatFormat?: NativeChatFormat;
  /** Images in, for an architecture with a vision tower. */
  readonly vision?: VisionSupport;
  /** Why images are refused, for an architecture without one whose releases carry a tower it does not run. */
  readonly visionRefusal?: string;
  /**
   * A checkpoint's routed experts, by HuggingFace name: matrix `kind` (0 gate, 1 up, 2 down) of
   * expert e of layer L; and, for any tensor name, the layer whose routed experts it holds (undefined:
   * a trunk tensor).
   */
  expertTensor(layer: number, expert: number, kind: 0 | 1 | 2): string;
  expertLayerOf(name: string): number | undefined;
  /**
   * When the release stacks each layer's routed experts in one tensor per kind (gpt-oss): where,
   * so that a checkpoint shows each expert's matrices by the names expertTensor gives (slices of
   * the stacked tensors). expertLayerOf names the layer of the stacked tensors too.
   */
  readonly stackedExperts?: StackedExperts;
  /** Checkpoint tensors the model never reads (multi-token-prediction layers): neither converted nor kept (absent: every tensor is the model's). */
  unread?(name: string, cfg: C): boolean;
  /** What `waste info` says of a config: fields for `--json`, and lines of text ([label, value]). */
  describe(cfg: C): { fields: Record<string, unknown>; lines: [string, string][] };
  /** The releases `waste pull` knows by a short name. */
  readonly releases?: readonly KnownRelease[];
  /** Synthetic models of the family (`waste synth`, the tests). */
  readonly synth?: FamilySynth<C>;
}

/** What a model's images need: the preprocessing, the placeholder, the rows' width. */
export interface VisionSpec extends ImageSpec {
  /** The prompt token each image's rows take the place of. */
  mediaToken: number;
  /** Width of an image row (the language model's hidden size). */
  textHidden: number;
}

/** A loaded vision tower: patches to rows of the language model's width. */
export interface VisionTower {
  /** [(gh/2)·(gw/2)][textHidden]; yields to the event loop as it goes and stops when `signal` aborts. */
  encode(img: Patches, signal?: AbortSignal): Promise<Float32Array>;
}

export interface VisionSupport {
  /** The model directory's vision config, or undefined when it has no tower (checked against the language model's config). */
  spec(dir: string, kind: 'container' | 'checkpoint', src: WeightSource, cfg: ModelConfig, warn?: (message: string) => void): VisionSpec | undefined;
  /**
   * Bytes the tower takes loaded, working memory included (shapes checked, nothing read), and the
   * widest input and most rows of its products (the kernels stage activations that big).
   */
  plan(src: WeightSource, spec: VisionSpec): { bytes: number; widest: number; rows: number };
  /** The tower's shape as `waste info` shows it. */
  describe(spec: VisionSpec): { layers: number; hidden: number; heads: number; parameters: number };
  /** Load the tower into `arena`, giving the event loop turns as it goes. */
  load(src: WeightSource, spec: VisionSpec, kernels: Kernels, arena: Arena): Promise<VisionTower>;
}

/** What an arena holds: trunk layers (and the head), or expert-cache slots. */
export type ArenaRole = 'layers' | 'experts';

export interface BuildParams<C extends ModelConfig> {
  cfg: C;
  source: WeightSource;
  /** Group g's arena (layers in order, then the head), as the plan laid them out; every other arena holds expert slots. */
  of: Arena[];
  arenas: Arena[];
  kernels: Kernels;
  /** Where the routed experts come from (a container); absent when they are dense in the trunk. */
  experts: ExpertStore | undefined;
  quant: ExpertQuant | undefined;
  /** Where gate, up, down and the scales sit in every expert record. */
  record: RecordLayout | undefined;
  chunk: number;
  maxContext: number;
  /** Told after each layer (and the head) is in memory. */
  onProgress?: (done: number, total: number) => void;
}

/** One sequence's state, as the engine and a session handle it. */
export interface SequenceState {
  /** Tokens consumed so far (the next position). */
  pos: number;
  /** Positions the state has room for. */
  readonly maxContext: number;
  /** Positions the current session may use (at most maxContext). */
  limit: number;
  reset(): void;
}

export interface ForwardOptions {
  /** Return the logits of every position, row after row, instead of only the last. */
  allLogits?: boolean;
  /** Image rows: each position whose token is `token` takes the next row (from `next`, advanced) instead of an embedding. */
  media?: MediaRows;
}

/** One sequence's part in a batched step (Network.forwardBatch). */
export interface BatchEntry {
  state: SequenceState;
  /** Its next tokens (one, for a decode step). */
  tokens: ArrayLike<number>;
  /** Return the logits of every one of its tokens instead of only the last. */
  allLogits?: boolean;
}

/** Image rows waiting for their placeholders in a prompt. */
export interface MediaRows {
  token: number;
  /** [count][hidden] */
  rows: Float32Array;
  count: number;
  /** The next row to take. */
  next: number;
}

/** A model's forward pass over its loaded trunk. */
export interface Network {
  readonly cfg: ModelConfig;
  /** Tokens run together in prefill. */
  readonly chunk: number;
  readonly maxContext: number;
  /** The memories holding the trunk, scratch, session state and expert cache. */
  readonly arenas: readonly Arena[];
  /** An arena of expert slots added after open (its expert scratch is allocated in it), and one removed (nothing may compute in it afterwards). */
  addExpertArena?(arena: Arena): void;
  removeExpertArena?(arena: Arena): void;
  newState(maxContext: number): SequenceState;
  /** Run `tokens` from `state.pos`, advancing the state; the logits after the last (or every) token. */
  forward(state: SequenceState, tokens: ArrayLike<number>, opts?: ForwardOptions): Promise<Float32Array>;
  /**
   * Several sequences (each at most once) advanced together, their tokens the rows of shared
   * chunks: each weight and expert read once for all. Each entry's logits are bit-identical to
   * what forward() gives it alone. Checked whole before anything runs.
   */
  forwardBatch(entries: readonly BatchEntry[]): Promise<Float32Array[]>;
  /** A saved session: the state and history as bytes, and back (checked before anything changes). */
  encodeState(state: SequenceState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array;
  decodeState(
    state: SequenceState,
    data: Uint8Array,
    identity: Uint8Array,
    file: string,
    accept: (meta: Uint8Array) => void,
  ): { history: number[]; logits: Float32Array | undefined };
  /** The largest file a session of `limit` positions saves as. */
  maxStateBytes(limit: number): number;
  /** When set, wall time in ms is added up per phase. */
  profile?: Record<string, number>;
  /** Replace the router's choice (a recorded routing trace, for benchmarks): ids for layer L, for row `row` of the chunk in flight. */
  routeOverride?: (layer: number, row: number) => number[] | undefined;
  /** Told the experts chosen for each token of a chunk at MoE layer L ([T][topK], selection order). */
  routeObserver?: (layer: number, route: Int32Array, T: number) => void;
}
