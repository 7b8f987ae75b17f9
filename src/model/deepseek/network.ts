import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { ExpertStore } from '../../core/expert-store.js';
import type { Kernels } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import type { SequenceState } from '../architecture.js';
import { ModelNetwork, type TrunkWeights } from '../base/network.js';
import type { ChunkRows } from '../base/rows.js';
import { arenaAllocator } from '../base/scratch.js';
import { type Activation, ffn } from '../blocks/ffn.js';
import { type MlaRope, mla } from '../blocks/mla.js';
import { type MoeShape, lookAhead, moe } from '../blocks/moe.js';
import { Rope } from '../blocks/rope.js';
import type { RouterConfig } from '../blocks/router.js';
import { type DeepseekConfig, LATENT_NORM_EPS } from './config.js';
import type { DeepseekLayer } from './layout.js';
import { DeepseekScratch } from './scratch.js';
import { decodeLatentState, encodeLatentState, maxLatentStateBytes } from './state-file.js';
import { LatentState } from './state.js';

/**
 * DeepSeek-V3's decoder: per layer x += MLA(norm(x)) over the layer's latent cache (RoPE on the
 * decoupled heads, kv_b absorbed: prefill and decode are the same code), then x += FFN(norm(x))
 * with a dense SwiGLU (the first layers) or the MoE block (group-limited sigmoid router, shared
 * experts); each layer computes in its own arena with that arena's scratch.
 */
export class DeepseekNetwork extends ModelNetwork<DeepseekConfig, DeepseekLayer, DeepseekScratch, LatentState> {
  readonly act: Activation = { kind: 'silu' };
  readonly router: RouterConfig;
  private readonly dr: MlaRope;

  constructor(
    cfg: DeepseekConfig,
    weights: TrunkWeights<DeepseekLayer>,
    kernels: Kernels,
    experts: ExpertStore | undefined,
    q: ExpertQuant | undefined,
    record: RecordLayout | undefined,
    chunk: number,
    maxContext: number,
  ) {
    super(cfg, weights, kernels, experts, q, record, chunk, maxContext, (a, role) => new DeepseekScratch(cfg, maxContext, chunk, q, arenaAllocator(a), role));
    this.router = cfg.router;
    this.dr = { rope: new Rope(cfg.rope), scale: cfg.scale };
  }

  get moe(): MoeShape {
    return this.cfg.moe;
  }

  protected makeState(maxContext: number, arenas: Arena[]): LatentState {
    return new LatentState(this.cfg, maxContext, arenas);
  }

  encodeState(state: SequenceState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
    return encodeLatentState(this.cfg, state as LatentState, history, logits, meta, identity);
  }

  decodeState(state: SequenceState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void) {
    return decodeLatentState(this.cfg, state as LatentState, data, identity, file, accept);
  }

  maxStateBytes(limit: number): number {
    return maxLatentStateBytes(this.cfg, limit);
  }

  protected async layers(rows: ChunkRows<LatentState>, T: number, s: DeepseekScratch): Promise<DeepseekScratch> {
    for (let L = 0; L < this.cfg.layers; L++) {
      s = this.carry(s, this.weights.layers[L].arena, T);
      this.layer(rows, L, T, s);
    }
    return s;
  }

  private layer(rows: ChunkRows<LatentState>, L: number, T: number, s: DeepseekScratch): void {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    let t0 = this.profile ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    mla(k, this.cfg.mla, LATENT_NORM_EPS, w.attn, rows.each((st) => st.caches[L]), rows.positions(), T, s, this.dr);
    k.add(s.x, s.out, T * H);
    t0 = this.tally('mla', t0);
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
