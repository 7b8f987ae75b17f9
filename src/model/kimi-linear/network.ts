import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { ExpertStore } from '../../core/expert-store.js';
import type { Kernels } from '../../kernels/types.js';
import type { Activation } from '../parts/ffn.js';
import { ffn } from '../parts/ffn.js';
import { kda } from '../parts/kda.js';
import type { KimiConfig } from '../parts/kimi-config.js';
import { mla } from '../parts/mla.js';
import { lookAhead, moe } from '../parts/moe.js';
import { KimiNetwork, type TrunkWeights } from '../parts/network.js';
import type { Scratch } from '../parts/scratch.js';
import { scratchShape } from '../parts/sizes.js';
import type { ChunkRows } from '../parts/rows.js';
import type { LayerWeights } from './weights.js';

/**
 * The Kimi-Linear forward pass: per layer, x += attention(norm(x)) with KDA or MLA, then
 * x += FFN(norm(x)) with a dense SwiGLU or the MoE block. Each layer computes in its own arena
 * (where its weights live) with that arena's scratch.
 */
export class KimiLinearNetwork extends KimiNetwork<KimiConfig, LayerWeights> {
  readonly act: Activation;

  constructor(cfg: KimiConfig, weights: TrunkWeights<LayerWeights>, kernels: Kernels, experts: ExpertStore | undefined, q: ExpertQuant | undefined, record: RecordLayout | undefined, chunk: number, maxContext: number) {
    super(cfg, weights, kernels, experts, q, record, chunk, maxContext, scratchShape(cfg, maxContext));
    this.act = cfg.act;
  }

  protected async layers(rows: ChunkRows, T: number, s: Scratch): Promise<Scratch> {
    for (let L = 0; L < this.cfg.layers; L++) {
      s = this.carry(s, this.weights.layers[L].arena, T);
      this.layer(rows, L, T, s);
    }
    return s;
  }

  private layer(rows: ChunkRows, L: number, T: number, s: Scratch): void {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    let t0 = this.profile ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    if (w.attn.kind === 'kda') kda(k, this.cfg.kda, eps, w.attn, rows.kda(L), T, s);
    else mla(k, this.cfg.mla, eps, w.attn, rows.mla(L), rows.positions(), T, s);
    k.add(s.x, s.out, T * H);
    t0 = this.tally(w.attn.kind, t0);
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
