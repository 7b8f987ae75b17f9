import { WasteError } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import type { Architecture } from '../architecture.js';
import { scratchShape, widestInput } from './sizes.js';
import { loadTrunk, planTrunk } from '../base/binder.js';
import { type KimiConfig, countKimiParams, outerArchitecture, parseKimiConfig, textConfig } from './config.js';
import { Scratch } from './scratch.js';
import { KimiState } from './state.js';
import { kimiSynth } from './synth.js';
import { KIMI_K3_RELEASES } from './releases.js';
import { describeKimi } from './describe.js';
import { kimiExpertLayerOf, kimiExpertTensor } from './names.js';
import { KimiNetwork, blockCount } from './network.js';
import { kimiK3Vision } from './vision/index.js';
import { KIMI_LAYOUT } from './weights.js';

/** Whether a config turns on any feature Kimi-Linear lacks (read from the raw keys: claiming never throws). */
function hasK3Features(t: Fields): boolean {
  const on = (key: string, off: unknown) => t.given(key) && t.raw(key) !== off;
  const lac = t.given('linear_attn_config') ? t.raw('linear_attn_config') : undefined;
  const lacOn = (key: string, off: unknown) => typeof lac === 'object' && lac !== null && !Array.isArray(lac) && key in lac && lac[key] !== null && lac[key] !== off;
  return (
    on('routed_expert_hidden_size', 0) ||
    on('attn_res_block_size', 0) ||
    on('mla_use_output_gate', false) ||
    on('q_lora_rank', 0) ||
    (t.given('hidden_act') && t.raw('hidden_act') === 'situ') ||
    lacOn('use_full_rank_gate', false) ||
    (typeof lac === 'object' && lac !== null && !Array.isArray(lac) && 'gate_lower_bound' in lac && lac.gate_lower_bound !== null)
  );
}

/**
 * Kimi K3 (`KimiK3ForConditionalGeneration`, its language model `kimi_linear` with attention
 * residuals, a latent MoE, SiTU-GLU, KDA's bounded gate and full-rank output gate, MLA's compressed
 * query and output gate). It also runs any Kimi-Linear-family config that turns one of these on.
 */
export const kimiK3: Architecture<KimiConfig> = {
  id: 'kimi-k3',
  claims(cfg: Fields): boolean {
    if (/KimiK3/.test(outerArchitecture(cfg) ?? '')) return true;
    if (cfg.given('model_type') && cfg.raw('model_type') === 'kimi_k3') return true;
    const t = textConfig(cfg);
    const type = t.given('model_type') ? t.raw('model_type') : 'kimi_linear';
    return type === 'kimi_linear' && hasK3Features(t);
  },
  parseConfig: (cfg) => parseKimiConfig(cfg, 'kimi-k3'),
  countParams: countKimiParams,
  planWeights: (src, cfg, q) => planTrunk(src, cfg, q, KIMI_LAYOUT),
  stateBytes: (cfg, maxContext) => KimiState.layerBytes(cfg, maxContext),
  scratchBytes: (cfg, chunk, maxContext, q, role) => Scratch.bytes(scratchShape(cfg, maxContext, blockCount(cfg)), chunk, q, role),
  widestInput,
  synth: kimiSynth,
  releases: KIMI_K3_RELEASES,
  expertTensor: kimiExpertTensor,
  expertLayerOf: kimiExpertLayerOf,
  describe: describeKimi,
  build(p) {
    if (p.cfg.arch !== 'kimi-k3') throw new WasteError('E_STATE', `a ${p.cfg.arch} config given to the Kimi K3 architecture`);
    const w = loadTrunk(p.source, p.cfg, p.of, p.arenas, p.quant, KIMI_LAYOUT, p.onProgress);
    return new KimiNetwork(p.cfg, w, p.kernels, p.experts, p.quant, p.record, p.chunk, p.maxContext);
  },
  vision: kimiK3Vision,
  chatFormat: 'xtml',
};
