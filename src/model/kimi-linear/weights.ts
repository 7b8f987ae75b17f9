import type { TrunkLayout } from '../parts/binder.js';
import type { KimiConfig } from '../parts/kimi-config.js';
import { type KimiLayer, kimiHead, kimiLayer } from '../parts/layouts.js';

export type LayerWeights = KimiLayer;

/** Kimi-Linear's trunk: each layer's norms, attention and FFN, then the final norm and the LM head. */
export const KIMI_LINEAR_LAYOUT: TrunkLayout<KimiConfig, LayerWeights, object> = { layer: kimiLayer, head: kimiHead };
