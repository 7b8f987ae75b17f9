import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { LayerKind } from '../../core/model-config.js';

/** What the state's sizes depend on: the layer kinds, the KDA and MLA widths (and the vocabulary, for saved logits). */
export interface StateGeometry {
  layerKinds: LayerKind[];
  vocab: number;
  kda: { heads: number; headDim: number; convKernel: number };
  mla: { kvLoraRank: number; qkRope: number };
}

/**
 * Per-sequence state of a Kimi-family model (Kimi-Linear and K3 carry the same kinds), each layer's part in that layer's arena: for KDA
 * layers the recurrent state S [H][D][D] and the short-convolution history (the last K−1 raw
 * inputs of q, k and v per channel, oldest first); for MLA layers the compressed latent
 * (normalised c ‖ k_pe) of every position up to the context length.
 */
export class KimiState {
  /** Tokens consumed so far (the next position). */
  pos = 0;
  /** Positions the state has room for. */
  readonly maxContext: number;
  /** Positions the current session may use (at most maxContext). */
  limit: number;
  readonly kda: ({ S: Float32Array; conv: Float32Array } | null)[];
  readonly mla: ({ cache: Float32Array } | null)[];
  readonly latentWidth: number;

  constructor(cfg: StateGeometry, maxContext: number, arenas: Arena[]) {
    if (!(Number.isInteger(maxContext) && maxContext >= 1))
      throw new WasteError('E_ARG', `context length must be a positive integer (got ${maxContext})`);
    this.maxContext = maxContext;
    this.limit = maxContext;
    const { heads: H, headDim: D, convKernel: K } = cfg.kda;
    this.latentWidth = cfg.mla.kvLoraRank + cfg.mla.qkRope;
    this.kda = cfg.layerKinds.map((k, L) =>
      k.attn === 'kda' ? { S: arenas[L].allocF32(H * D * D), conv: arenas[L].allocF32(3 * H * D * (K - 1)) } : null,
    );
    this.mla = cfg.layerKinds.map((k, L) => (k.attn === 'mla' ? { cache: arenas[L].allocF32(maxContext * this.latentWidth) } : null));
  }

  /** Bytes one session's state takes in each layer's arena, for `maxContext` positions. */
  static layerBytes(cfg: StateGeometry, maxContext: number): number[] {
    const { heads: H, headDim: D, convKernel: K } = cfg.kda;
    const al = (n: number) => Math.ceil(n / 64) * 64;
    return cfg.layerKinds.map((k) =>
      k.attn === 'kda' ? al(4 * H * D * D) + al(4 * 3 * H * D * (K - 1)) : al(4 * maxContext * (cfg.mla.kvLoraRank + cfg.mla.qkRope)),
    );
  }

  /** Check that positions up to `end` (exclusive) fit. */
  reserve(end: number): void {
    if (end > this.limit)
      throw new WasteError('E_STATE', `context is full: ${end} tokens would exceed the context length of ${this.limit}`);
  }

  reset(): void {
    this.pos = 0;
    for (const k of this.kda) {
      k?.S.fill(0);
      k?.conv.fill(0);
    }
  }
}
