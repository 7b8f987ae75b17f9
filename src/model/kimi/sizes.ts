import type { KimiConfig } from './config.js';
import type { ScratchShape } from './scratch.js';

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

/** The widest input of any Kimi-family product. */
export function widestInput(cfg: KimiConfig): number {
  const m = cfg.mla;
  return Math.max(
    cfg.hidden,
    cfg.denseInter,
    cfg.kda.heads * cfg.kda.headDim,
    cfg.kda.headDim,
    m.heads * m.vHead,
    m.kvLoraRank,
    m.qLoraRank,
    cfg.moe.inter * Math.max(1, cfg.moe.shared),
    cfg.latent?.width ?? 0,
  );
}
