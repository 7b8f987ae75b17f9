import type { VisionSupport } from '../../architecture.js';
import { type VisionConfig, checkVisionFits, readVisionConfig } from './config.js';
import { KimiK3Tower, TILE } from './tower.js';

/** K3's images: a vision.json (or a checkpoint's vision_config) beside a tower in the weights. */
export const kimiK3Vision: VisionSupport = {
  spec(dir, kind, src, cfg) {
    const tower = src.unprefixed();
    if (!KimiK3Tower.present(tower)) return undefined;
    const v = readVisionConfig(dir, kind);
    if (!v) return undefined;
    checkVisionFits(v, cfg.hidden, cfg.vocab);
    return v;
  },
  plan(src, spec) {
    const v = spec as VisionConfig;
    return { bytes: KimiK3Tower.plan(src.unprefixed(), v), widest: Math.max(3 * v.patch * v.patch, 4 * v.hidden, v.inter, v.qkv), rows: TILE };
  },
  load: (src, spec, kernels, arena) => KimiK3Tower.load(src.unprefixed(), spec as VisionConfig, kernels, arena),
};
