import type { Binder, TrunkLayout } from '../base/binder.js';
import type { KimiConfig } from './config.js';
import { type KimiLayer, kimiHead, kimiLayer } from './layouts.js';

/**
 * One Kimi layer (Kimi-Linear's; in K3, with attention residuals, also the mixes): a Kimi-family layer (its KDA and MLA in their K3 forms, its MoE latent) and the
 * two attention-residual mixes before its sublayers, each weight the product of the mix's norm and
 * its one-row projection (they only ever act together, so they are fused at load).
 */
export interface LayerWeights extends KimiLayer {
  selfRes?: Float32Array;
  mlpRes?: Float32Array;
}

export interface HeadWeights {
  /** The output mix over the block summaries, before the final norm. */
  outRes?: Float32Array;
}

const RES_SHAPES = (H: number) => [[H], [1, H]];

/** The Kimi trunk: each layer's norms, attention and FFN (and K3's residual mixes), then the final norm and the LM head. */
export const KIMI_LAYOUT: TrunkLayout<KimiConfig, LayerWeights, HeadWeights> = {
  layer(cfg: KimiConfig, L: number, b: Binder): LayerWeights {
    const H = cfg.hidden;
    const p = `model.layers.${L}.`;
    const base = kimiLayer(cfg, L, b);
    if (!cfg.attnResBlock) return base;
    return {
      ...base,
      selfRes: b.product(`${p}self_attention_res_norm.weight`, `${p}self_attention_res_proj.weight`, H, RES_SHAPES(H)),
      mlpRes: b.product(`${p}mlp_res_norm.weight`, `${p}mlp_res_proj.weight`, H, RES_SHAPES(H)),
    };
  },
  head(cfg: KimiConfig, b: Binder) {
    const H = cfg.hidden;
    const outRes = cfg.attnResBlock ? b.product('model.output_attn_res_norm.weight', 'model.output_attn_res_proj.weight', H, RES_SHAPES(H)) : undefined;
    return { ...kimiHead(cfg, b), outRes };
  },
};
