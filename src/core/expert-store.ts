import type { Arena } from '../memory/arena.js';

/**
 * Where a model's routed experts come from, as the forward pass sees it. The model says which
 * experts a layer needs and how to compute one; the store decides how they get into memory (a
 * cache hit, a read on a reader thread, how many at a time) and hands each record over as it
 * lands, in whatever order that is — the model's sums are in its own fixed order afterwards, so the
 * order of landing changes nothing.
 */
export interface ExpertStore {
  /**
   * Call `compute(expert, record, arena)` once for every expert of `ids` of MoE layer `layer`, as
   * its record is in memory (`record` lives in `arena` and is valid only during the call). After
   * the first requests are issued and before waiting on any, `meanwhile` runs once: work that
   * overlaps the reads (the shared experts).
   */
  each(layer: number, ids: readonly number[], compute: (expert: number, record: Uint8Array, arena: Arena) => void, meanwhile?: () => void): void;
  /**
   * `each`, but handing over at once every record that has landed by the time the model is ready
   * for more (`landed` lists expert, record and arena; the records are valid only during the call),
   * so the model can compute them together.
   */
  eachLanded?(layer: number, ids: readonly number[], compute: (landed: readonly LandedRecord[]) => void, meanwhile?: () => void): void;
  /** Decode: how many of each coming MoE layer's likeliest experts the model should name (0 = none). */
  readonly lookahead: number;
  /** Decode: how many layers ahead to guess (1: the next one; 0 = none). */
  readonly lookaheadLayers: number;
  /** A guess, made `depth` layers earlier, at what layer `layer` will ask for: read ahead, if there is room. */
  prefetch(layer: number, ids: readonly number[], depth: number): void;
}

/** An expert's record in memory, as `eachLanded` hands it over. */
export interface LandedRecord {
  expert: number;
  record: Uint8Array;
  arena: Arena;
}
