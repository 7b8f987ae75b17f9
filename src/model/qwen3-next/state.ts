import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { KvCache } from '../blocks/attention.js';
import { type GdnState, gdnChannels } from '../blocks/gated-deltanet.js';
import type { Qwen3NextConfig } from './config.js';

const al = (n: number) => Math.ceil(n / 64) * 64;

/** Floats of a DeltaNet layer's state: the conv's last K − 1 inputs, and S. */
function gdnFloats(cfg: Qwen3NextConfig): [number, number] {
  const g = cfg.gdn;
  return [gdnChannels(g) * (g.convKernel - 1), g.vHeads * g.headDim * g.headDim];
}

/**
 * One sequence's state: a full-attention layer's keys and values ([context][kvHeads][headDim], in
 * that layer's arena) for the positions consumed; a DeltaNet layer's conv history and recurrent
 * state, whose size does not grow with the context.
 */
export class Qwen3NextState {
  pos = 0;
  readonly maxContext: number;
  limit: number;
  readonly kv: (KvCache | undefined)[];
  readonly gdn: (GdnState | undefined)[];

  constructor(cfg: Qwen3NextConfig, maxContext: number, arenas: Arena[]) {
    if (!(Number.isInteger(maxContext) && maxContext >= 1))
      throw new WasteError('E_ARG', `context length must be a positive integer (got ${maxContext})`);
    this.maxContext = maxContext;
    this.limit = maxContext;
    const row = cfg.attention.kvHeads * cfg.attention.headDim;
    const [conv, S] = gdnFloats(cfg);
    this.kv = cfg.layerKinds.map((k, L) => (k.attn === 'gdn' ? undefined : { k: arenas[L].allocF32(maxContext * row), v: arenas[L].allocF32(maxContext * row), slots: maxContext }));
    this.gdn = cfg.layerKinds.map((k, L) => (k.attn === 'gdn' ? { conv: arenas[L].allocF32(conv), S: arenas[L].allocF32(S) } : undefined));
  }

  /** Bytes one session's state takes in each layer's arena, for `maxContext` positions. */
  static layerBytes(cfg: Qwen3NextConfig, maxContext: number): number[] {
    const row = cfg.attention.kvHeads * cfg.attention.headDim;
    const [conv, S] = gdnFloats(cfg);
    return cfg.layerKinds.map((k) => (k.attn === 'gdn' ? al(4 * conv) + al(4 * S) : 2 * al(4 * maxContext * row)));
  }

  reserve(end: number): void {
    if (end > this.limit) throw new WasteError('E_STATE', `context is full: ${end} tokens would exceed the context length of ${this.limit}`);
  }

  /** Keys are written before anything reads them; the DeltaNet states start from zeros. */
  reset(): void {
    this.pos = 0;
    for (const g of this.gdn)
      if (g) {
        g.conv.fill(0);
        g.S.fill(0);
      }
  }

  /** What a saved session holds of layer L after `pos` positions: the keys and values written so far, or the DeltaNet state whole. */
  saved(L: number, pos: number): Float32Array[] {
    const g = this.gdn[L];
    if (g) return [g.conv, g.S];
    const c = this.kv[L]!;
    const n = Math.min(pos, c.slots) * (c.k.length / c.slots);
    return [c.k.subarray(0, n), c.v.subarray(0, n)];
  }
}

/** Floats layer L's part of a saved session holds after `pos` positions. */
export function savedFloats(cfg: Qwen3NextConfig, L: number, pos: number): number {
  if (cfg.layerKinds[L].attn === 'gdn') {
    const [conv, S] = gdnFloats(cfg);
    return conv + S;
  }
  return 2 * pos * cfg.attention.kvHeads * cfg.attention.headDim;
}
