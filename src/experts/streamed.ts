import type { ExpertStore } from '../core/expert-store.js';
import type { Arena } from '../memory/arena.js';
import type { CacheSlot, ExpertCache } from './cache.js';

/**
 * The expert store over the cache: every expert a layer asks for is requested at once (as many as
 * the cache can hold at a time: a whole decode layer, prefill chunks in windows), and each is
 * handed to the model as soon as its record lands. Lookahead guesses are read ahead and scored
 * against what the layer then asks for.
 */
export class StreamedExperts implements ExpertStore {
  /** Lookahead guesses, and how many of them the layer then asked for. */
  readonly lookaheadStats = { predicted: 0, correct: 0 };
  private readonly guesses = new Map<number, readonly number[]>();

  constructor(
    readonly cache: ExpertCache,
    /** How many of the next layer's likeliest experts to read ahead in decode (0 = off). */
    public lookahead: number,
  ) {}

  each(layer: number, ids: readonly number[], compute: (expert: number, record: Uint8Array, arena: Arena) => void, meanwhile?: () => void): void {
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
          const at = cache.waitAny(slots);
          const slot = slots[at];
          const rec = cache.record(slot);
          compute(want[at], rec, slot.arena);
          slots.splice(at, 1);
          want.splice(at, 1);
          cache.release(slot);
        }
      } finally {
        // a fault mid-layer leaves no slot pinned
        for (const s of slots) cache.release(s);
      }
    }
  }

  prefetch(layer: number, ids: readonly number[]): void {
    this.guesses.set(layer, ids);
    this.cache.prefetch(layer, ids);
  }

  /** The first request for a layer after a guess at it is what the guess was for. */
  private score(layer: number, ids: readonly number[]): void {
    const guess = this.guesses.get(layer);
    if (!guess) return;
    this.guesses.delete(layer);
    const chosen = new Set(ids);
    this.lookaheadStats.predicted += guess.length;
    for (const e of guess) if (chosen.has(e)) this.lookaheadStats.correct++;
  }
}
