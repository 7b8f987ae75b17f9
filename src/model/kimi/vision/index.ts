import * as fs from 'node:fs';
import * as path from 'node:path';
import { readJson } from '../../../util/read.js';
import type { VisionSupport } from '../../architecture.js';
import { type VisionConfig, checkVisionFits, readVisionConfig } from './config.js';
import { KimiK3Tower, TILE } from './tower.js';

/** K3's images: a vision.json (or a checkpoint's vision_config) beside a tower in the weights. */
export const kimiK3Vision: VisionSupport = {
  spec(dir, kind, src, cfg, warn) {
    const tower = src.unprefixed();
    if (!KimiK3Tower.present(tower)) return undefined;
    const v = readVisionConfig(dir, kind);
    if (!v) return undefined;
    checkVisionFits(v, cfg.hidden, cfg.vocab);
    const version = kind === 'container' ? converterVersion(dir) : undefined;
    if (version !== undefined && version < 3) {
      // its patch embedding holds only the first D × 14 values of the real one: images would be noise
      warn?.(`${dir} was converted by waste's converter version ${version}, whose vision patch embedding is wrong: images are off; convert it again to use them`);
      return undefined;
    }
    return v;
  },
  plan(src, spec) {
    const v = spec as VisionConfig;
    return { bytes: KimiK3Tower.plan(src.unprefixed(), v), widest: Math.max(3 * v.patch * v.patch, 4 * v.hidden, v.inter, v.qkv), rows: TILE };
  },
  describe(spec) {
    const v = spec as VisionConfig;
    return { layers: v.layers, hidden: v.hidden, heads: v.heads, parameters: KimiK3Tower.parameters(v) };
  },
  load: (src, spec, kernels, arena) => KimiK3Tower.load(src.unprefixed(), spec as VisionConfig, kernels, arena),
};

/** The converter version a container's convert.json records, when it has one. */
function converterVersion(dir: string): number | undefined {
  const file = path.join(dir, 'convert.json');
  if (!fs.existsSync(file)) return undefined;
  try {
    const doc = readJson(file) as { converter?: unknown };
    return typeof doc?.converter === 'number' ? doc.converter : undefined;
  } catch {
    return undefined;
  }
}
