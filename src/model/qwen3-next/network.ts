import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { ExpertStore } from '../../core/expert-store.js';
import type { Kernels } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import type { SequenceState } from '../architecture.js';
import { ModelNetwork, type TrunkWeights } from '../base/network.js';
import type { ChunkRows } from '../base/rows.js';
import { arenaAllocator } from '../base/scratch.js';
import { type AttentionWeights, attention } from '../blocks/attention.js';
import { type Activation, ffn } from '../blocks/ffn.js';
import { type GdnWeights, gatedDeltaNet } from '../blocks/gated-deltanet.js';
import { type MoeShape, lookAhead, moe } from '../blocks/moe.js';
import { Rope } from '../blocks/rope.js';
import type { RouterConfig } from '../blocks/router.js';
import type { Qwen3NextConfig } from './config.js';
import type { Qwen3NextLayer } from './layout.js';
import { Qwen3NextScratch } from './scratch.js';
import { decodeQwen3NextState, encodeQwen3NextState, maxQwen3NextStateBytes } from './state-file.js';
import { Qwen3NextState } from './state.js';

/**
 * Qwen3-Next's decoder: per layer x += mixer(norm(x)) — Gated DeltaNet, or full attention with an
 * output gate — then x += FFN(norm(x)), routed experts plus a gated shared expert; the norms
 * zero-centred (their weights stored as 1 + w).
 */
export class Qwen3NextNetwork extends ModelNetwork<Qwen3NextConfig, Qwen3NextLayer, Qwen3NextScratch, Qwen3NextState> {
  readonly act: Activation;
  readonly router: RouterConfig;
  private readonly rope: Rope;

  constructor(
    cfg: Qwen3NextConfig,
    weights: TrunkWeights<Qwen3NextLayer>,
    kernels: Kernels,
    experts: ExpertStore | undefined,
    q: ExpertQuant | undefined,
    record: RecordLayout | undefined,
    chunk: number,
    maxContext: number,
  ) {
    super(cfg, weights, kernels, experts, q, record, chunk, maxContext, (a, role) => new Qwen3NextScratch(cfg, maxContext, chunk, q, arenaAllocator(a), role));
    this.act = cfg.act;
    this.router = cfg.router;
    this.rope = new Rope(cfg.rope);
  }

  get moe(): MoeShape {
    return this.cfg.moe;
  }

  protected makeState(maxContext: number, arenas: Arena[]): Qwen3NextState {
    return new Qwen3NextState(this.cfg, maxContext, arenas);
  }

  encodeState(state: SequenceState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
    return encodeQwen3NextState(this.cfg, state as Qwen3NextState, history, logits, meta, identity);
  }

  decodeState(state: SequenceState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void) {
    return decodeQwen3NextState(this.cfg, state as Qwen3NextState, data, identity, file, accept);
  }

  maxStateBytes(limit: number): number {
    return maxQwen3NextStateBytes(this.cfg, limit);
  }

  protected async layers(rows: ChunkRows<Qwen3NextState>, T: number, s: Qwen3NextScratch): Promise<Qwen3NextScratch> {
    for (let L = 0; L < this.cfg.layers; L++) {
      s = this.carry(s, this.weights.layers[L].arena, T);
      this.layer(rows, L, T, s);
    }
    return s;
  }

  private layer(rows: ChunkRows<Qwen3NextState>, L: number, T: number, s: Qwen3NextScratch): void {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    let t0 = this.profile ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    if ('kind' in w.attn) {
      gatedDeltaNet(k, this.cfg.gdn, eps, w.attn as GdnWeights, T, (t) => rows.row(t).state.gdn[L]!, s);
      t0 = this.tally('gdn', t0);
    } else {
      attention(k, this.cfg.attention, this.rope, 0, w.attn as AttentionWeights, T, (t) => {
        const r = rows.row(t);
        return { cache: r.state.kv[L]!, pos: r.pos };
      }, s);
      t0 = this.tally('attention', t0);
    }
    k.add(s.x, s.out, T * H);
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
