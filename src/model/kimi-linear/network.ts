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
import type { Scratch, ScratchShape } from '../parts/scratch.js';
import type { KimiState } from '../parts/state.js';
import type { LayerWeights } from './weights.js';

/** The scratch a Kimi-Linear (or K3) config needs. */
export function scratchShape(cfg: KimiConfig, maxContext: number, blocks = 0): ScratchShape {
  return {
    hidden: cfg.hidden,
    vocab: cfg.vocab,
    maxContext,
    kda: cfg.kda,
    mla: cfg.mla,
    inter: Math.max(cfg.denseInter, cfg.moe.inter * Math.max(1, cfg.moe.shared)),
    moe: cfg.moe,
    expertWidth: cfg.expertWidth,
    latent: cfg.latent?.width ?? 0,
    blocks,
  };
}

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

  protected async layers(state: KimiState, T: number, s: Scratch): Promise<Scratch> {
    for (let L = 0; L < this.cfg.layers; L++) {
      s = this.carry(s, this.weights.layers[L].arena, T);
      this.layer(state, L, T, s);
    }
    return s;
  }

  private layer(state: KimiState, L: number, T: number, s: Scratch): void {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    let t0 = this.profile ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    if (w.attn.kind === 'kda') kda(k, this.cfg.kda, eps, w.attn, state.kda[L]!, T, s);
    else mla(k, this.cfg.mla, eps, w.attn, state.mla[L]!.cache, state.pos, T, s);
    k.add(s.x, s.out, T * H);
    t0 = this.tally(w.attn.kind, t0);
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.postNorm, eps, s.norm, H, t * H, t * H);
    if (w.ffn.kind === 'dense') ffn(k, this.act, w.ffn, T, s, s.out);
    else {
      moe(this, L, w.ffn, T, s);
      const next = this.weights.layers[L + 1];
      if (T === 1 && next?.ffn.kind === 'moe') lookAhead(this, L + 1, next.ffn, s, this.scratchOf(next.arena));
    }
    k.add(s.x, s.out, T * H);
    this.tally(w.ffn.kind, t0);
  }
}
