import type { ExpertStore, LandedRecord } from '../core/expert-store.js';
import type { Arena } from '../memory/arena.js';
import type { CacheSlot, ExpertCache } from './cache.js';

/**
 * The expert store over the cache: every expert a layer asks for is requested at once (as many as
 * the cache can hold at a time: a whole decode layer, prefill chunks in windows), and each is
 * handed to the model as soon as its record lands. Lookahead guesses are read ahead and scored
 * against what the layer then asks for.
 */
export class StreamedExperts implements ExpertStore {
  /** Lookahead guesses, and how many of them the layer then asked for (all depths). */
  readonly lookaheadStats = { predicted: 0, correct: 0 };
  /**
   * The same by depth (index 0: guesses one layer ahead): experts guessed, guessed and then asked
   * for, and asked for by the layers guessed at (precision = correct / predicted, recall = correct / asked).
   */
  readonly lookaheadByDepth: LookaheadScore[] = [];
  /** Per layer, the latest guess made at each depth. */
  private readonly guesses = new Map<number, Map<number, readonly number[]>>();

  constructor(
    readonly cache: ExpertCache,
    /** How many of each coming layer's likeliest experts to read ahead in decode (0 = off). */
    public lookahead: number,
    /** How many MoE layers ahead to guess (1 = the next one). */
    public lookaheadLayers = 1,
  ) {}

  each(layer: number, ids: readonly number[], compute: (expert: number, record: Uint8Array, arena: Arena) => void, meanwhile?: () => void): void {
    this.eachLanded(layer, ids, (landed) => {
      for (const r of landed) compute(r.expert, r.record, r.arena);
    }, meanwhile);
  }

  eachLanded(layer: number, ids: readonly number[], compute: (landed: readonly LandedRecord[]) => void, meanwhile?: () => void): void {
    this.score(layer, ids);
    const cache = this.cache;
    let ran = false;
    for (let i = 0; i < ids.length; ) {
      const n = Math.max(1, Math.min(ids.length - i, cache.available()));
      const want = ids.slice(i, i + n);
      i += n;
      const slots: CacheSlot[] = cache.request(layer, want);
      if (!ran) meanwhile?.();
      ran = true;
      try {
        while (slots.length) {
          // the first to land, then every other one already in, in request order
          const first = cache.waitAny(slots);
          const take = slots.map((_, k) => k).filter((k) => k === first || cache.landed(slots[k]));
          const landed = take.map((k) => ({ expert: want[k], record: cache.record(slots[k]), arena: slots[k].arena }));
          compute(landed);
          for (let k = take.length - 1; k >= 0; k--) {
            const [slot] = slots.splice(take[k], 1);
            want.splice(take[k], 1);
            cache.release(slot);
          }
        }
      } finally {
        // a fault mid-layer leaves no slot pinned
        for (const s of slots) cache.release(s);
      }
    }
  }

  prefetch(layer: number, ids: readonly number[], depth = 1): void {
    let at = this.guesses.get(layer);
    if (!at) this.guesses.set(layer, (at = new Map()));
    at.set(depth, ids);
    this.cache.prefetch(layer, ids);
  }

  /** The first request for a layer after a guess at it is what the guess was for. */
  private score(layer: number, ids: readonly number[]): void {
    const at = this.guesses.get(layer);
    if (!at) return;
    this.guesses.delete(layer);
    const chosen = new Set(ids);
    for (const [depth, guess] of at) {
      let correct = 0;
      for (const e of guess) if (chosen.has(e)) correct++;
      while (this.lookaheadByDepth.length < depth) this.lookaheadByDepth.push({ predicted: 0, correct: 0, asked: 0 });
      const d = this.lookaheadByDepth[depth - 1];
      d.predicted += guess.length;
      d.correct += correct;
      d.asked += chosen.size;
      this.lookaheadStats.predicted += guess.length;
      this.lookaheadStats.correct += correct;
    }
  }
}

/** How one depth of lookahead guessed: experts guessed, of them asked for, and experts asked for where it guessed. */
export interface LookaheadScore {
  predicted: number;
  correct: number;
  asked: number;
}
