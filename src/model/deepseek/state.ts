import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { DeepseekConfig } from './config.js';

/**
 * One sequence's state: each layer's latent cache — per position the normalised latent (kv_lora_rank)
 * and the rotated k_pe (qk_rope_head_dim) — in that layer's arena.
 */
export class LatentState {
  pos = 0;
  readonly maxContext: number;
  limit: number;
  readonly caches: Float32Array[];
  readonly width: number;

  constructor(cfg: DeepseekConfig, maxContext: number, arenas: Arena[]) {
    if (!(Number.isInteger(maxContext) && maxContext >= 1)) throw new WasteError('E_ARG', `context length must be a positive integer (got ${maxContext})`);
    this.maxContext = maxContext;
    this.limit = maxContext;
    this.width = cfg.mla.kvLoraRank + cfg.mla.qkRope;
    this.caches = cfg.layerKinds.map((_, L) => arenas[L].allocF32(maxContext * this.width));
  }

  /** Bytes one session's state takes in each layer's arena, for `maxContext` positions. */
  static layerBytes(cfg: DeepseekConfig, maxContext: number): number[] {
    const al = (n: number) => Math.ceil(n / 64) * 64;
    return cfg.layerKinds.map(() => al(4 * maxContext * (cfg.mla.kvLoraRank + cfg.mla.qkRope)));
  }

  reserve(end: number): void {
    if (end > this.limit) throw new WasteError('E_STATE', `context is full: ${end} tokens would exceed the context length of ${this.limit}`);
  }

  /** Nothing to clear: a position's latent is written before anything reads it. */
  reset(): void {
    this.pos = 0;
  }
}
