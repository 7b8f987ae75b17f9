import type { SequenceState } from '../architecture.js';

/**
 * Which sequence each row of a chunk in flight belongs to, and at what position. A prefill chunk
 * is T rows of one sequence at consecutive positions; a batched step is rows of several sequences
 * (each sequence's rows consecutive and in order), each at its own position with its own state.
 * Everything row-wise (products, norms, MoE, head) does not care; only the sequence mixers read
 * this.
 */
export class ChunkRows<St extends SequenceState = SequenceState> {
  private constructor(
    /** The one sequence of a prefill chunk, else undefined. */
    readonly single: St | undefined,
    /** [T] the state of each row (for a single sequence: empty). */
    readonly states: readonly St[],
    /** [T] the position of each row (for a single sequence: the first's, in pos0). */
    readonly pos: readonly number[],
    readonly pos0: number,
  ) {}

  /** T rows of `state` from its current position. */
  static of<St extends SequenceState>(state: St): ChunkRows<St> {
    return new ChunkRows(state, [], [], state.pos);
  }

  /** Row t is at position pos[t] of states[t]. */
  static batch<St extends SequenceState>(states: readonly St[], pos: readonly number[]): ChunkRows<St> {
    return new ChunkRows<St>(undefined, states, pos, 0);
  }

  /** A part of the state, the sequence's or each row's. */
  each<P>(part: (s: St) => P): P | readonly P[] {
    return this.single ? part(this.single) : this.states.map(part);
  }

  /** The first row's position (one sequence), or each row's. */
  positions(): number | readonly number[] {
    return this.single ? this.pos0 : this.pos;
  }

  /** Row t's state and position. */
  row(t: number): { state: St; pos: number } {
    return this.single ? { state: this.single, pos: this.pos0 + t } : { state: this.states[t], pos: this.pos[t] };
  }

  /** Whether every row is the one new token of a sequence of its own (decode). */
  get decode(): boolean {
    return !this.single && new Set(this.states).size === this.states.length;
  }
}
