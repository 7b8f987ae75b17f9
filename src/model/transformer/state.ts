import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { KvCache } from '../blocks/attention.js';
import type { TransformerConfig } from './config.js';

/** A layer's cache slots for a context of `maxContext`: every position, or a sliding window's ring. */
export function cacheSlots(cfg: TransformerConfig, L: number, maxContext: number): number {
  const w = cfg.windows[L];
  return w ? Math.min(w, maxContext) : maxContext;
}

/**
 * One sequence's state: each layer's keys and values ([slots][kvHeads][headDim], in that layer's
 * arena) for the positions consumed, a sliding-window layer's as a ring of its window.
 */
export class KvState {
  pos = 0;
  readonly maxContext: number;
  limit: number;
  readonly kv: KvCache[];

  constructor(cfg: TransformerConfig, maxContext: number, arenas: Arena[]) {
    if (!(Number.isInteger(maxContext) && maxContext >= 1))
      throw new WasteError('E_ARG', `context length must be a positive integer (got ${maxContext})`);
    this.maxContext = maxContext;
    this.limit = maxContext;
    const row = cfg.attention.kvHeads * cfg.attention.headDim;
    this.kv = cfg.layerKinds.map((_, L) => {
      const slots = cacheSlots(cfg, L, maxContext);
      return { k: arenas[L].allocF32(slots * row), v: arenas[L].allocF32(slots * row), slots };
    });
  }

  /** Bytes one session's state takes in each layer's arena, for `maxContext` positions. */
  static layerBytes(cfg: TransformerConfig, maxContext: number): number[] {
    const row = cfg.attention.kvHeads * cfg.attention.headDim;
    const al = (n: number) => Math.ceil(n / 64) * 64;
    return cfg.layerKinds.map((_, L) => 2 * al(4 * cacheSlots(cfg, L, maxContext) * row));
  }

  reserve(end: number): void {
    if (end > this.limit) throw new WasteError('E_STATE', `context is full: ${end} tokens would exceed the context length of ${this.limit}`);
  }

  /** Nothing to clear: a position's keys are written before anything reads them. */
  reset(): void {
    this.pos = 0;
  }

  /** What a saved session holds of layer L after `pos` positions: the slots written so far. */
  saved(L: number, pos: number): Float32Array[] {
    const c = this.kv[L];
    const n = Math.min(pos, c.slots) * (c.k.length / c.slots);
    return [c.k.subarray(0, n), c.v.subarray(0, n)];
  }
}
