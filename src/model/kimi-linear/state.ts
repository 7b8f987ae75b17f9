import { WasteError } from '../../util/errors.js';
import type { KimiLinearConfig } from './config.js';

/**
 * Per-sequence state of a Kimi-Linear model: for each KDA layer the recurrent state S [H][D][D]
 * and the short-convolution history (the last K−1 raw inputs of q, k and v per channel, oldest
 * first); for each MLA layer the compressed latent (normalised c ‖ k_pe) of every position.
 */
export class KimiLinearState {
  /** Tokens consumed so far (the next position). */
  pos = 0;
  readonly maxContext: number;
  readonly kda: ({ S: Float32Array; conv: Float32Array } | null)[];
  readonly mla: ({ cache: Float32Array } | null)[];
  readonly latentWidth: number;

  constructor(cfg: KimiLinearConfig, maxContext: number) {
    if (!(Number.isInteger(maxContext) && maxContext >= 1))
      throw new WasteError('E_ARG', `context length must be a positive integer (got ${maxContext})`);
    this.maxContext = maxContext;
    const { heads: H, headDim: D, convKernel: K } = cfg.kda;
    this.latentWidth = cfg.mla.kvLoraRank + cfg.mla.qkRope;
    const initial = Math.min(maxContext, 256);
    this.kda = cfg.layerKinds.map((k) =>
      k.attn === 'kda' ? { S: new Float32Array(H * D * D), conv: new Float32Array(3 * H * D * (K - 1)) } : null,
    );
    this.mla = cfg.layerKinds.map((k) => (k.attn === 'mla' ? { cache: new Float32Array(initial * this.latentWidth) } : null));
  }

  /** Make room for positions up to `end` (exclusive) in every MLA cache. */
  reserve(end: number): void {
    if (end > this.maxContext)
      throw new WasteError('E_STATE', `context is full: ${end} tokens would exceed the context length of ${this.maxContext}`);
    for (const m of this.mla) {
      if (!m || m.cache.length >= end * this.latentWidth) continue;
      let cap = m.cache.length / this.latentWidth;
      while (cap < end) cap *= 2;
      const grown = new Float32Array(Math.min(cap, this.maxContext) * this.latentWidth);
      grown.set(m.cache);
      m.cache = grown;
    }
  }

  reset(): void {
    this.pos = 0;
    for (const k of this.kda) {
      k?.S.fill(0);
      k?.conv.fill(0);
    }
  }
}
