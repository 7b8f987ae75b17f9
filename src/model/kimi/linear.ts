import { WasteError } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import type { Architecture } from '../architecture.js';
import { loadTrunk, planTrunk } from '../base/binder.js';
import { type KimiConfig, countKimiParams, outerArchitecture, textConfig } from './config.js';
import { parseKimiLinearConfig } from './linear-config.js';
import { Scratch } from './scratch.js';
import { KimiState } from './state.js';
import { kimiSynth } from './synth.js';
import { KIMI_LINEAR_RELEASES } from './releases.js';
import { describeKimi } from './describe.js';
import { kimiExpertLayerOf, kimiExpertTensor } from './names.js';
import { KimiNetwork } from './network.js';
import { scratchShape, widestInput } from './sizes.js';
import { KIMI_LAYOUT } from './weights.js';

/** Kimi-Linear (KDA + MLA + MoE, `kimi_linear`), the architecture of Kimi-Linear-48B-A3B. */
export const kimiLinear: Architecture<KimiConfig> = {
  id: 'kimi-linear',
  claims(cfg: Fields): boolean {
    const t = textConfig(cfg);
    const type = t.given('model_type') ? t.raw('model_type') : 'kimi_linear';
    return type === 'kimi_linear' && !/KimiK3/.test(outerArchitecture(cfg) ?? '');
  },
  parseConfig: parseKimiLinearConfig,
  countParams: countKimiParams,
  planWeights: (src, cfg, q) => planTrunk(src, cfg, q, KIMI_LAYOUT),
  stateBytes: (cfg, maxContext) => KimiState.layerBytes(cfg, maxContext),
  scratchBytes: (cfg, chunk, maxContext, q, role) => Scratch.bytes(scratchShape(cfg, maxContext), chunk, q, role),
  widestInput,
  synth: kimiSynth,
  releases: KIMI_LINEAR_RELEASES,
  expertTensor: kimiExpertTensor,
  expertLayerOf: kimiExpertLayerOf,
  describe: describeKimi,
  build(p) {
    if (p.cfg.arch !== 'kimi-linear') throw new WasteError('E_STATE', `a ${p.cfg.arch} config given to the Kimi-Linear architecture`);
    const w = loadTrunk(p.source, p.cfg, p.of, p.arenas, p.quant, KIMI_LAYOUT, p.onProgress);
    return new KimiNetwork(p.cfg, w, p.kernels, p.experts, p.quant, p.record, p.chunk, p.maxContext);
  },
};
