import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { ExpertStore } from '../../core/expert-store.js';
import type { Kernels } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import type { SequenceState } from '../architecture.js';
import { ModelNetwork, type TrunkWeights } from '../base/network.js';
import type { ChunkRows } from '../base/rows.js';
import { arenaAllocator } from '../base/scratch.js';
import { type Activation, ffn } from '../blocks/ffn.js';
import { kda } from '../blocks/kda.js';
import { mla } from '../blocks/mla.js';
import { type MoeShape, lookAhead, moe } from '../blocks/moe.js';
import type { KimiConfig } from './config.js';
import { kdaOf, mlaOf } from './rows.js';
import { Scratch } from './scratch.js';
import { scratchShape } from './sizes.js';
import { decodeState, encodeState, maxStateBytes } from './state-file.js';
import { KimiState } from './state.js';
import type { HeadWeights, LayerWeights } from './weights.js';

/** Block summaries a token collects: one per layer that starts a block (L mod block = 0). */
export function blockCount(cfg: KimiConfig): number {
  return cfg.attnResBlock ? Math.ceil(cfg.layers / cfg.attnResBlock) : 0;
}

/**
 * The Kimi forward pass, Kimi-Linear's and K3's. Per layer, x += attention(norm(x)) with KDA or
 * MLA, then x += FFN(norm(x)) with a dense SwiGLU (SiTU-GLU for K3) or the MoE block; each layer
 * computes in its own arena (where its weights live) with that arena's scratch.
 *
 * K3 with attention residuals has no residual stream: each layer's
 * sublayers read a softmax mix over the token's block summaries (the embedding, then the sum of
 * each finished block of layers) and the current block's partial sum, and add their outputs to
 * that partial sum; a last mix feeds the final norm. The summaries are per token and rebuilt at
 * every step: nothing of them is carried to the next position. The sublayers are Kimi-Linear's
 * in their K3 forms (KDA with the bounded gate and a full-rank output gate, MLA with a compressed
 * query and an output gate, the latent MoE, SiTU-GLU).
 */
export class KimiNetwork extends ModelNetwork<KimiConfig, LayerWeights, Scratch, KimiState> {
  readonly act: Activation;
  private readonly nbMax: number;
  /** Summaries the chunk in flight has collected (the same for every token of a chunk). */
  private nb = 0;
  private readonly outRes: Float32Array | undefined;

  constructor(
    cfg: KimiConfig,
    weights: TrunkWeights<LayerWeights> & { head: HeadWeights },
    kernels: Kernels,
    experts: ExpertStore | undefined,
    q: ExpertQuant | undefined,
    record: RecordLayout | undefined,
    chunk: number,
    maxContext: number,
  ) {
    const shape = scratchShape(cfg, maxContext, blockCount(cfg));
    super(cfg, weights, kernels, experts, q, record, chunk, maxContext, (a, role) => new Scratch(shape, chunk, q, arenaAllocator(a), role));
    this.act = cfg.act;
    this.nbMax = blockCount(cfg);
    this.outRes = weights.head.outRes;
  }

  get moe(): MoeShape {
    return this.cfg.moe;
  }

  protected makeState(maxContext: number, arenas: Arena[]): KimiState {
    return new KimiState(this.cfg, maxContext, arenas);
  }

  encodeState(state: SequenceState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
    return encodeState(this.cfg, state as KimiState, history, logits, meta, identity);
  }

  decodeState(state: SequenceState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void) {
    return decodeState(this.cfg, state as KimiState, data, identity, file, accept);
  }

  maxStateBytes(limit: number): number {
    return maxStateBytes(this.cfg, limit);
  }

  protected override carried(from: Scratch, to: Scratch, T: number): [Float32Array, Float32Array, number][] {
    const H = this.cfg.hidden;
    const out: [Float32Array, Float32Array, number][] = [[from.x, to.x, T * H]];
    if (this.nbMax) out.push([from.ps, to.ps, T * H], [from.blocks, to.blocks, T * this.nbMax * H]);
    return out;
  }

  protected async layers(rows: ChunkRows<KimiState>, T: number, s: Scratch): Promise<Scratch> {
    this.nb = 0;
    for (let L = 0; L < this.cfg.layers; L++) {
      s = this.carry(s, this.weights.layers[L].arena, T);
      this.layer(rows, L, T, s);
    }
    return s;
  }

  /** The mix of token t's summaries and `cur` into `out` (three distinct buffers), with weight `w`. */
  private mix(T: number, s: Scratch, cur: Float32Array, w: Float32Array, out: Float32Array): void {
    const H = this.cfg.hidden;
    const NB = this.nbMax;
    for (let t = 0; t < T; t++)
      this.kernels.attnRes(s.blocks.subarray(t * NB * H, (t * NB + this.nb) * H), this.nb, cur.subarray(t * H, (t + 1) * H), w, H, this.cfg.eps, out.subarray(t * H, (t + 1) * H));
  }

  private layer(rows: ChunkRows<KimiState>, L: number, T: number, s: Scratch): void {
    const { hidden: H, eps, attnResBlock: B } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    const n = T * H;
    let fresh = false;
    if (B) {
      // the partial sum so far is what came out of the last layer
      s.ps.set(s.x.subarray(0, n));
      if (this.nb > 0) this.mix(T, s, s.ps, w.selfRes!, s.x);
      if (L % B === 0) {
        // a new block: the partial sum so far becomes its summary, and the sum restarts
        const NB = this.nbMax;
        for (let t = 0; t < T; t++) s.blocks.set(s.ps.subarray(t * H, (t + 1) * H), (t * NB + this.nb) * H);
        this.nb++;
        fresh = true;
      }
    }
    let t0 = this.profile ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    if (w.attn.kind === 'kda') kda(k, this.cfg.kda, eps, w.attn, kdaOf(rows, L), T, s);
    else mla(k, this.cfg.mla, eps, w.attn, mlaOf(rows, L), rows.positions(), T, s);
    if (B) {
      if (fresh) s.ps.set(s.out.subarray(0, n));
      else k.add(s.ps, s.out, n);
      this.mix(T, s, s.ps, w.mlpRes!, s.x);
    } else k.add(s.x, s.out, n);
    t0 = this.tally(w.attn.kind, t0);
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.postNorm, eps, s.norm, H, t * H, t * H);
    if (w.ffn.kind === 'dense') ffn(k, this.act, w.ffn, T, s, s.out);
    else {
      moe(this, L, w.ffn, T, s);
      if (T === 1 || rows.decode) lookAhead(this, L, this.weights.layers, s, T);
    }
    if (B) {
      k.add(s.ps, s.out, n);
      s.x.set(s.ps.subarray(0, n));
    } else k.add(s.x, s.out, n);
    this.tally(w.ffn.kind, t0);
  }

  protected override final(T: number, s: Scratch): Float32Array {
    if (!this.cfg.attnResBlock) return s.x;
    this.mix(T, s, s.x, this.outRes!, s.ps);
    return s.ps;
  }
}
