import { WasteError } from '../../util/errors.js';
import type { Architecture } from '../architecture.js';
import { loadTrunk, planTrunk } from '../base/binder.js';
import { type DeepseekConfig, countDeepseekParams, deepseekWidest, parseDeepseekConfig } from './config.js';
import { describeDeepseek } from './describe.js';
import { DEEPSEEK_LAYOUT } from './layout.js';
import { deepseekExpertLayerOf, deepseekExpertTensor } from './names.js';
import { DeepseekNetwork } from './network.js';
import { DEEPSEEK_RELEASES } from './releases.js';
import { DeepseekScratch } from './scratch.js';
import { LatentState } from './state.js';
import { deepseekSynth } from './synth.js';

/**
 * DeepSeek-V3's architecture (`deepseek_v3`: DeepSeek-V3, V3.1, R1; `kimi_k2`: Kimi K2). It also
 * claims DeepSeek-V3.2 (`deepseek_v32`), to refuse it by name.
 */
export const deepseekV3: Architecture<DeepseekConfig> = {
  id: 'deepseek-v3',
  claims: (cfg) => cfg.given('model_type') && ['deepseek_v3', 'kimi_k2', 'deepseek_v32'].includes(String(cfg.raw('model_type'))),
  parseConfig: parseDeepseekConfig,
  countParams: countDeepseekParams,
  planWeights: (src, cfg, q) => planTrunk(src, cfg, q, DEEPSEEK_LAYOUT),
  stateBytes: (cfg, maxContext) => LatentState.layerBytes(cfg, maxContext),
  scratchBytes: (cfg, chunk, maxContext, q, role) => DeepseekScratch.bytes(cfg, maxContext, chunk, q, role),
  widestInput: deepseekWidest,
  build(p) {
    if (p.cfg.arch !== 'deepseek-v3') throw new WasteError('E_STATE', `a ${p.cfg.arch} config given to the DeepSeek-V3 architecture`);
    const w = loadTrunk(p.source, p.cfg, p.of, p.arenas, p.quant, DEEPSEEK_LAYOUT, p.onProgress);
    return new DeepseekNetwork(p.cfg, w, p.kernels, p.experts, p.quant, p.record, p.chunk, p.maxContext);
  },
  expertTensor: deepseekExpertTensor,
  expertLayerOf: deepseekExpertLayerOf,
  // the MTP layers (model.layers.N past num_hidden_layers) are never run: neither converted nor copied by pull
  unread: (name, cfg) => {
    const m = cfg.skippedLayers ? /(?:^|\.)layers\.(\d+)\./.exec(name) : null;
    return !!m && Number(m[1]) >= cfg.layers && Number(m[1]) < cfg.layers + cfg.skippedLayers;
  },
  describe: describeDeepseek,
  synth: deepseekSynth,
  releases: DEEPSEEK_RELEASES,
};
