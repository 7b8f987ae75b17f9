import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { ExpertStore } from '../../core/expert-store.js';
import type { Kernels } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import type { SequenceState } from '../architecture.js';
import { ModelNetwork, type TrunkWeights } from '../base/network.js';
import type { ChunkRows } from '../base/rows.js';
import { arenaAllocator } from '../base/scratch.js';
import { type AttentionWeights, attention } from '../blocks/attention.js';
import { type Activation, type FfnWeights, ffn } from '../blocks/ffn.js';
import { type MoeShape, type MoeWeights, lookAhead, moe } from '../blocks/moe.js';
import { Rope } from '../blocks/rope.js';
import type { RouterConfig } from '../blocks/router.js';
import type { TransformerConfig } from './config.js';
import { TransformerScratch } from './scratch.js';
import { decodeKvState, encodeKvState, maxKvStateBytes } from './state-file.js';
import { KvState } from './state.js';

/** One layer's weights: its two norms, its attention, its FFN (dense or routed experts). */
export interface TransformerLayer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  attn: AttentionWeights;
  ffn: ({ kind: 'dense' } & FfnWeights) | MoeWeights;
}

/**
 * The pre-norm decoder (see TransformerConfig): per layer, x += attention(norm(x)) over the
 * layer's key/value cache, then x += FFN(norm(x)); each layer computes in its own arena (where its
 * weights live) with that arena's scratch.
 */
export class TransformerNetwork extends ModelNetwork<TransformerConfig, TransformerLayer, TransformerScratch, KvState> {
  readonly act: Activation;
  readonly router: RouterConfig;
  private readonly rope: Rope;

  constructor(
    cfg: TransformerConfig,
    weights: TrunkWeights<TransformerLayer>,
    kernels: Kernels,
    experts: ExpertStore | undefined,
    q: ExpertQuant | undefined,
    record: RecordLayout | undefined,
    chunk: number,
    maxContext: number,
  ) {
    super(cfg, weights, kernels, experts, q, record, chunk, maxContext, (a, role) => new TransformerScratch(cfg, maxContext, chunk, q, arenaAllocator(a), role));
    this.act = cfg.act;
    this.router = cfg.router;
    this.rope = new Rope(cfg.rope);
  }

  get moe(): MoeShape {
    return this.cfg.moe;
  }

  protected makeState(maxContext: number, arenas: Arena[]): KvState {
    return new KvState(this.cfg, maxContext, arenas);
  }

  encodeState(state: SequenceState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
    return encodeKvState(this.cfg, state as KvState, history, logits, meta, identity);
  }

  decodeState(state: SequenceState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void) {
    return decodeKvState(this.cfg, state as KvState, data, identity, file, accept);
  }

  maxStateBytes(limit: number): number {
    return maxKvStateBytes(this.cfg, limit);
  }

  protected async layers(rows: ChunkRows<KvState>, T: number, s: TransformerScratch): Promise<TransformerScratch> {
    for (let L = 0; L < this.cfg.layers; L++) {
      s = this.carry(s, this.weights.layers[L].arena, T);
      this.layer(rows, L, T, s);
    }
    return s;
  }

  private layer(rows: ChunkRows<KvState>, L: number, T: number, s: TransformerScratch): void {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    let t0 = this.profile ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    attention(k, this.cfg.attention, this.rope, this.cfg.windows[L], w.attn, T, (t) => {
      const r = rows.row(t);
      return { cache: r.state.kv[L], pos: r.pos };
    }, s);
    k.add(s.x, s.out, T * H);
    t0 = this.tally('attention', t0);
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.postNorm, eps, s.norm, H, t * H, t * H);
    if (w.ffn.kind === 'dense') ffn(k, this.act, w.ffn, T, s, s.out);
    else {
      moe(this, L, w.ffn, T, s);
      if (T === 1 || rows.decode) lookAhead(this, L, this.weights.layers, s, T);
    }
    k.add(s.x, s.out, T * H);
    this.tally(w.ffn.kind, t0);
  }
}
