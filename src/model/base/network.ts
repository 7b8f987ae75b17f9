import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { Tensor } from '../../container/tensor.js';
import type { ExpertStore } from '../../core/expert-store.js';
import type { ModelConfig } from '../../core/model-config.js';
import type { Kernels, VqGeometry } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { ArenaRole, BatchEntry, ForwardOptions, Network, SequenceState } from '../architecture.js';
import { ChunkRows } from './rows.js';

export interface TrunkWeights<Layer> {
  /** One row of the embedding table (it stays on disk), as f32. */
  embedRow(token: number, dst: Float32Array): void;
  finalNorm: Float32Array;
  lmHead: Tensor;
  layers: (Layer & { arena: Arena })[];
  /** The arena of the final norm and the LM head. */
  headArena: Arena;
  arenas: Arena[];
}

/** What the chunk loop reads of a family's working buffers in each arena. */
export interface BaseScratch {
  /** [T][hidden] the hidden state of the tokens in flight. */
  x: Float32Array;
  /** [T][hidden] a sublayer's normed input (the head's, at the end). */
  norm: Float32Array;
  /** [vocab] one row's logits. */
  logits: Float32Array;
  /** Free once the layers are done: the head computes several rows' logits in it at once. */
  expertOut: Float32Array;
}

/** A sequence's state as the chunk loop handles it. */
export interface BaseState extends SequenceState {
  /** Check that positions up to `end` (exclusive) fit. */
  reserve(end: number): void;
}

/** Working buffers for an arena of trunk layers, or of expert slots. */
export type ScratchFactory<S> = (arena: Arena, role: ArenaRole) => S;

/**
 * What every family's network shares around its layers: chunks of T tokens embedded, run through
 * the layers (each in the arena its weights live in, the hidden state carried across arenas), and
 * the head. Prefill and decode are the same code: a chunk of T tokens runs every projection as one
 * T-row product and walks the sequence mixers token by token, and since every kernel computes each
 * output element independently of the batch, prefill(T) followed by a step is bit-identical to
 * T+1 single steps. A family supplies its layers, its state and its working buffers.
 */
export abstract class ModelNetwork<C extends ModelConfig, Layer, S extends BaseScratch, St extends BaseState> implements Network {
  readonly geom: VqGeometry | undefined;
  private readonly scratch = new Map<Arena, S>();
  profile?: Record<string, number>;
  routeOverride?: (layer: number, row: number) => number[] | undefined;
  routeObserver?: (layer: number, route: Int32Array, T: number) => void;

  constructor(
    readonly cfg: C,
    readonly weights: TrunkWeights<Layer>,
    readonly kernels: Kernels,
    /** Where VQ expert records come from (a container); absent when the experts are dense. */
    readonly experts: ExpertStore | undefined,
    readonly quant: ExpertQuant | undefined,
    readonly record: RecordLayout | undefined,
    readonly chunk: number,
    readonly maxContext: number,
    private readonly scratchFor: ScratchFactory<S>,
  ) {
    const q = quant;
    if (q) this.geom = { stages: q.stages, entries: q.entries, vecDim: q.vecDim, indexBlock: q.indexBlock };
    const layers = new Set([...weights.layers.map((l) => l.arena), weights.headArena]);
    for (const a of weights.arenas) this.scratch.set(a, scratchFor(a, layers.has(a) ? 'layers' : 'experts'));
  }

  get arenas(): readonly Arena[] {
    return this.weights.arenas;
  }

  addExpertArena(a: Arena): void {
    this.weights.arenas.push(a);
    this.scratch.set(a, this.scratchFor(a, 'experts'));
  }

  removeExpertArena(a: Arena): void {
    const i = this.weights.arenas.indexOf(a);
    if (i >= 0) this.weights.arenas.splice(i, 1);
    this.scratch.delete(a);
  }

  get eps(): number {
    return this.cfg.eps;
  }

  get hidden(): number {
    return this.cfg.hidden;
  }

  newState(maxContext: number): St {
    if (maxContext > this.maxContext)
      throw new WasteError('E_ARG', `a session context of ${maxContext} exceeds the model's maximum of ${this.maxContext} (set when it was opened)`);
    return this.makeState(maxContext, this.weights.layers.map((l) => l.arena));
  }

  /** A fresh sequence state of `maxContext` positions, each layer's part in that layer's arena. */
  protected abstract makeState(maxContext: number, arenas: Arena[]): St;

  async forward(seq: SequenceState, tokens: ArrayLike<number>, opts: ForwardOptions = {}): Promise<Float32Array> {
    const state = seq as St;
    const { vocab, hidden: H } = this.cfg;
    const n = tokens.length;
    if (n === 0) throw new WasteError('E_ARG', 'no tokens to run');
    for (let i = 0; i < n; i++) {
      const id = tokens[i];
      if (!(Number.isInteger(id) && id >= 0 && id < vocab))
        throw new WasteError('E_ARG', `token id ${id} is outside the vocabulary (0..${vocab - 1})`);
    }
    state.reserve(state.pos + n);
    const logits = new Float32Array(opts.allLogits ? n * vocab : vocab);
    for (let c0 = 0; c0 < n; c0 += this.chunk) {
      const T = Math.min(this.chunk, n - c0);
      const s0 = this.scratchOf(this.weights.layers[0].arena);
      const media = opts.media;
      for (let t = 0; t < T; t++) {
        const dst = s0.x.subarray(t * H, (t + 1) * H);
        if (media && tokens[c0 + t] === media.token && media.next < media.count) dst.set(media.rows.subarray(media.next * H, ++media.next * H));
        else this.weights.embedRow(tokens[c0 + t], dst);
      }
      let s = await this.layers(ChunkRows.of(state), T, s0);
      state.pos += T;
      s = this.carry(s, this.weights.headArena, T);
      const t0 = this.profile ? performance.now() : 0;
      const x = this.final(T, s);
      for (let t = 0; t < T; t++) {
        const pos = c0 + t;
        if (opts.allLogits) logits.set(this.head(x, t, s), pos * vocab);
        else if (pos === n - 1) logits.set(this.head(x, t, s));
      }
      if (this.profile) this.profile.head = (this.profile.head ?? 0) + performance.now() - t0;
    }
    return logits;
  }

  /**
   * Several sequences advanced together: each entry's tokens (one, for a decode step) run as rows
   * of the same chunks, entry after entry, so every weight is read once for all of them and each
   * expert their union routes to is read once. Each row's arithmetic is what it would be alone
   * (every kernel computes each output row independently of the others), so each sequence's
   * logits are bit-identical to its own forward(). Returns each entry's logits, as forward would.
   */
  async forwardBatch(entries: readonly BatchEntry[]): Promise<Float32Array[]> {
    const { vocab, hidden: H } = this.cfg;
    const seen = new Set<SequenceState>();
    for (const e of entries) {
      if (seen.has(e.state)) throw new WasteError('E_ARG', 'a batch holds each sequence at most once');
      seen.add(e.state);
      const n = e.tokens.length;
      if (n === 0) throw new WasteError('E_ARG', 'no tokens to run');
      for (let i = 0; i < n; i++) {
        const id = e.tokens[i];
        if (!(Number.isInteger(id) && id >= 0 && id < vocab))
          throw new WasteError('E_ARG', `token id ${id} is outside the vocabulary (0..${vocab - 1})`);
      }
      (e.state as St).reserve(e.state.pos + n);
    }
    // [rows] which entry and which of its tokens each row is, and at what position
    const rowEntry: number[] = [];
    const rowIndex: number[] = [];
    const rowPos: number[] = [];
    entries.forEach((e, j) => {
      for (let i = 0; i < e.tokens.length; i++) rowEntry.push(j), rowIndex.push(i), rowPos.push(e.state.pos + i);
    });
    const out = entries.map((e) => new Float32Array(e.allLogits ? e.tokens.length * vocab : vocab));
    for (let r0 = 0; r0 < rowEntry.length; r0 += this.chunk) {
      const T = Math.min(this.chunk, rowEntry.length - r0);
      const states: St[] = [];
      const pos = rowPos.slice(r0, r0 + T);
      const s0 = this.scratchOf(this.weights.layers[0].arena);
      for (let t = 0; t < T; t++) {
        const e = entries[rowEntry[r0 + t]];
        states.push(e.state as St);
        this.weights.embedRow(e.tokens[rowIndex[r0 + t]], s0.x.subarray(t * H, (t + 1) * H));
      }
      let s = await this.layers(ChunkRows.batch(states, pos), T, s0);
      for (let t = 0; t < T; t++) states[t].pos = pos[t] + 1;
      s = this.carry(s, this.weights.headArena, T);
      const t0 = this.profile ? performance.now() : 0;
      const x = this.final(T, s);
      const need: number[] = [];
      for (let t = 0; t < T; t++) {
        const e = entries[rowEntry[r0 + t]];
        if (e.allLogits || rowIndex[r0 + t] === e.tokens.length - 1) need.push(t);
      }
      this.headRows(x, need, s, (t, row) => {
        const j = rowEntry[r0 + t];
        out[j].set(row, entries[j].allLogits ? rowIndex[r0 + t] * vocab : 0);
      });
      if (this.profile) this.profile.head = (this.profile.head ?? 0) + performance.now() - t0;
    }
    return out;
  }

  /** Every layer over the chunk's T tokens (embedded in `s.x`, whose sequences `rows` names); returns the scratch the result is in. */
  protected abstract layers(rows: ChunkRows<St>, T: number, s: S): Promise<S>;

  /** The chunk's hidden states the head reads, in the head arena's scratch (default: `s.x`). */
  protected final(_T: number, s: S): Float32Array {
    return s.x;
  }

  scratchOf(a: Arena): S {
    return this.scratch.get(a)!;
  }

  /** The scratch of arena `a`, holding the T tokens in flight (what `carried` names, copied over). */
  protected carry(from: S, a: Arena, T: number): S {
    const to = this.scratchOf(a);
    if (to !== from) for (const [src, dst, n] of this.carried(from, to, T)) dst.set(src.subarray(0, n));
    return to;
  }

  /** What a chunk carries from one arena to the next: [from, to, floats]. */
  protected carried(from: S, to: S, T: number): [Float32Array, Float32Array, number][] {
    return [[from.x, to.x, T * this.cfg.hidden]];
  }

  /**
   * The logits of rows `rows` of `x`, each handed to `put` (valid during the call). The head's
   * matrix, the largest of all, is read once for as many rows as the experts' output buffer holds
   * (free once the layers are done); a row's arithmetic is the same as alone.
   */
  private headRows(x: Float32Array, rows: readonly number[], s: S, put: (t: number, logits: Float32Array) => void): void {
    const { hidden: H, vocab: V, eps } = this.cfg;
    const room = Math.floor(s.expertOut.length / V);
    if (rows.length < 2 || room < 2) {
      for (const t of rows) put(t, this.head(x, t, s));
      return;
    }
    for (let a = 0; a < rows.length; a += room) {
      const k = Math.min(room, rows.length - a);
      // [k][hidden] the rows normed, then [k][vocab] their logits
      for (let q = 0; q < k; q++) this.kernels.rmsnorm(x, this.weights.finalNorm, eps, s.norm, H, rows[a + q] * H, q * H);
      this.kernels.matmul(this.weights.lmHead, s.norm, s.expertOut, k);
      for (let q = 0; q < k; q++) put(rows[a + q], s.expertOut.subarray(q * V, (q + 1) * V));
    }
  }

  private head(x: Float32Array, t: number, s: S): Float32Array {
    const H = this.cfg.hidden;
    this.kernels.rmsnorm(x, this.weights.finalNorm, this.cfg.eps, s.norm, H, t * H, 0);
    this.kernels.matmul(this.weights.lmHead, s.norm, s.logits, 1);
    return s.logits;
  }

  /** Add the wall time since `t0` to `phase` when profiling; returns now. */
  protected tally(phase: string, t0: number): number {
    if (!this.profile) return 0;
    const t1 = performance.now();
    this.profile[phase] = (this.profile[phase] ?? 0) + t1 - t0;
    return t1;
  }

  abstract encodeState(state: SequenceState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array;

  abstract decodeState(
    state: SequenceState,
    data: Uint8Array,
    identity: Uint8Array,
    file: string,
    accept: (meta: Uint8Array) => void,
  ): { history: number[]; logits: Float32Array | undefined };

  abstract maxStateBytes(limit: number): number;
}
