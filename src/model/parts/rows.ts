import type { KdaState } from './kda.js';
import type { KimiState } from './state.js';

/**
 * Which sequence each row of a chunk in flight belongs to, and at what position. A prefill chunk
 * is T rows of one sequence at consecutive positions; a batched step is rows of several sequences
 * (each sequence's rows consecutive and in order), each at its own position with its own state.
 * Everything row-wise (products, norms, MoE, head) does not care; only the sequence mixers read
 * this.
 */
export class ChunkRows {
  private constructor(
    /** The one sequence of a prefill chunk, else undefined. */
    readonly single: KimiState | undefined,
    /** [T] the state of each row (for a single sequence: empty). */
    readonly states: readonly KimiState[],
    /** [T] the position of each row (for a single sequence: the first's, in pos0). */
    readonly pos: readonly number[],
    readonly pos0: number,
  ) {}

  /** T rows of `state` from its current position. */
  static of(state: KimiState): ChunkRows {
    return new ChunkRows(state, [], [], state.pos);
  }

  /** Row t is at position pos[t] of states[t]. */
  static batch(states: readonly KimiState[], pos: readonly number[]): ChunkRows {
    return new ChunkRows(undefined, states, pos, 0);
  }

  /** Layer L's KDA state: the sequence's, or each row's. */
  kda(L: number): KdaState | readonly KdaState[] {
    return this.single ? this.single.kda[L]! : this.states.map((s) => s.kda[L]!);
  }

  /** Layer L's latent cache: the sequence's, or each row's. */
  mla(L: number): Float32Array | readonly Float32Array[] {
    return this.single ? this.single.mla[L]!.cache : this.states.map((s) => s.mla[L]!.cache);
  }

  /** The first row's position (one sequence), or each row's. */
  positions(): number | readonly number[] {
    return this.single ? this.pos0 : this.pos;
  }

  /** Whether every row is the one new token of a sequence of its own (decode). */
  get decode(): boolean {
    return !this.single && new Set(this.states).size === this.states.length;
  }
}
